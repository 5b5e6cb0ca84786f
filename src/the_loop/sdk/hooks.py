"""The public SDK for hook authors: re-exports only (the names existing hook modules import)."""

from the_loop.hooks.compat import DecisionTypeError
from the_loop.hooks.executor import LifecycleHooks
from the_loop.hooks.jsonrpc import handle_request
from the_loop.hooks.points import (
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
from the_loop.hooks.server import HookServer

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
