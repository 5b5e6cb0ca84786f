"""The executor base class a hook author subclasses, and the internal executor protocol.

`HookError` (defined in `the_loop.errors`) is re-exported here for hook authors.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from the_loop.errors import HookError as HookError
from the_loop.hooks.engine.points import (
    POINTS,
    Context,
    InputReceived,
    PhaseChanged,
    SessionSpawn,
    SessionSpawned,
    WaitingForInput,
    WorkItemComplete,
    WorkItemStart,
)


@dataclass
class Decisions:
    """A patch of decisions an executor hands back instead of a context.

    Remote and policy executors answer with this: `values` are the decisions to set (the
    chain still checks their types), `dropped` the keys it ignored (facts, unknown keys),
    `detail` extra fields for the `hooks.decided` event (e.g. the rules that applied).
    """

    values: Mapping[str, Any]
    dropped: list[str] = field(default_factory=list)
    detail: dict[str, Any] = field(default_factory=dict)


Handler = Callable[[Any], "Context | Decisions | None"]


class Executor(Protocol):
    """What the chain needs from any executor: local, remote or policy."""

    def points(self) -> tuple[str, ...]:
        """The points this executor handles when `on` does not narrow them."""
        ...

    def handler(self, point: str) -> Handler:
        """The callable the chain invokes at `point`."""
        ...


class CalledAtEveryPoint:
    """An executor whose far side (a hook server, a program) decides what it handles: it
    takes every point (`on:` narrows it) and answers each with `self.call(point, ctx)`."""

    def points(self) -> tuple[str, ...]:
        return tuple(POINTS)

    def handler(self, point: str) -> Callable[[Context], Decisions | None]:
        def call(ctx: Context) -> Decisions | None:
            return self.call(point, ctx)

        return call

    def call(self, point: str, ctx: Context) -> Decisions | None:
        raise NotImplementedError


class LifecycleHooks:
    """Base class for hooks: override the points you handle.

    Each method receives that point's context and returns `None` (pass through) or a
    context of the same type whose decisions replace the current ones. Edit the context
    you are given and return it, or return a copy; facts you change are ignored, and an
    attribute the point does not have (a misspelt decision) fails the hook.
    """

    def work_item_start(self, ctx: WorkItemStart) -> WorkItemStart | None:
        return None

    def session_spawn(self, ctx: SessionSpawn) -> SessionSpawn | None:
        return None

    def session_spawned(self, ctx: SessionSpawned) -> SessionSpawned | None:
        return None

    def waiting_for_input(self, ctx: WaitingForInput) -> WaitingForInput | None:
        return None

    def input_received(self, ctx: InputReceived) -> InputReceived | None:
        return None

    def phase_changed(self, ctx: PhaseChanged) -> PhaseChanged | None:
        return None

    def work_item_complete(self, ctx: WorkItemComplete) -> WorkItemComplete | None:
        return None

    def handles(self, point: str) -> bool:
        """Whether this class overrides `point` (what it runs when `on` does not narrow it)."""
        return point in type(self).overridden_points()

    @classmethod
    def overridden_points(cls) -> tuple[str, ...]:
        """The points this class overrides, in lifecycle order."""
        from the_loop.hooks.engine.points import POINTS

        return tuple(
            p for p in POINTS if getattr(cls, p) is not getattr(LifecycleHooks, p)
        )


def _document_methods() -> None:
    """Each point's method carries the catalog's description of that point (R2.5)."""
    from the_loop.hooks.engine.points import SPECS, point_doc

    for point, spec in SPECS.items():
        getattr(LifecycleHooks, point).__doc__ = point_doc(spec).replace(
            f"The context of `{point}`", f"Called at `{point}`", 1
        ) + "\n\nReturn None to pass through, or a context of the same type."


_document_methods()
