"""The public SDK for hook authors: re-exports only (the names existing hook modules import).

`HookServer` and `handle_request` are imported when first asked for: a hook module the loop
loads at every start (`poll`) then costs no server stack (an event loop, an HTTP parser,
metrics) it never uses. `HookFailure` is the other the-loop's name for our `HookError`
(a hook's failure, with a message for a person), so a hook file written for it imports
unchanged.
"""

import typing as _typing

from the_loop.hooks.engine.compat import DecisionTypeError
from the_loop.hooks.engine.executor import HookError as HookFailure
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

if _typing.TYPE_CHECKING:
    from the_loop.hooks.serving.jsonrpc import handle_request
    from the_loop.hooks.serving.server import HookServer

__all__ = [
    "POINTS",
    "Context",
    "DecisionTypeError",
    "HookFailure",
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


def __getattr__(name: str) -> _typing.Any:
    if name == "HookServer":
        from the_loop.hooks.serving.server import HookServer

        return HookServer
    if name == "handle_request":
        from the_loop.hooks.serving.jsonrpc import handle_request

        return handle_request
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
