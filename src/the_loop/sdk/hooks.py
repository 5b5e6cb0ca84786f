"""The public SDK for hook authors: re-exports only (the names existing hook modules import)."""

from the_loop.hooks.engine.compat import DecisionTypeError
from the_loop.hooks.engine.executor import LifecycleHooks
from the_loop.hooks.engine.points import (
    POINTS,
    Context,
    InputReceived,
    PhaseChanged,
    SessionSpawn,
    SessionSpawned,
    WaitingForInput,
    WorkItem,
    WorkItemComplete,
    WorkItemStart,
)
from the_loop.hooks.serving.jsonrpc import handle_request
from the_loop.hooks.serving.server import HookServer

__all__ = [
    "POINTS",
    "Context",
    "DecisionTypeError",
    "HookServer",
    "InputReceived",
    "LifecycleHooks",
    "PhaseChanged",
    "SessionSpawn",
    "SessionSpawned",
    "WaitingForInput",
    "WorkItem",
    "WorkItemComplete",
    "WorkItemStart",
    "handle_request",
]
