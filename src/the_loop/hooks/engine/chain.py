"""The chain: runs executors at one point in declaration order and reads back typed decisions.

Rules, each tested by name in tests/hooks/test_chain.py:
- `None` passes through; a context of the same type (or a `Decisions` patch) replaces the
  decisions; each executor sees the decisions of the ones before it.
- Each executor that may edit its context gets a fresh copy (lists included), so an edit
  followed by a failure leaves nothing behind, and one a hook keeps stays as it left it.
- Only decisions are read back; a changed fact is dropped and recorded. An attribute that
  is neither a fact nor a decision of the point (`ctx.procede`) fails that executor.
- A decision of the wrong type fails that executor and changes nothing (never coerced).
- An executor that raises anything at all — any `BaseException`: `SystemExit`,
  `GeneratorExit`, `asyncio.CancelledError`, a `KeyboardInterrupt` it raised itself, a custom
  subclass — or answers the wrong thing is recorded as `hooks.failed` and skipped; the chain
  never raises into its caller. A sync hook cannot receive a real task cancellation (that
  arrives at an `await`, never inside a call), so a `CancelledError` is always the hook's own.
- The one exception that leaves the chain is a real Ctrl-C of our own process, told apart
  by `interrupt.is_real` (see `the_loop/interrupt.py`: our SIGINT handler marks the object it
  raises; the daemons' handlers never raise at all).
- An error message quotes at most `MAX_ERROR` characters of what the hook raised, then the
  file and line in the hook's own code it came from (`location.py`).
- A failing `required` executor at a point with `proceed` refuses, naming the hook; a
  refusal sticks (`refusals.py`).

This module is the loop; reading answers back is `answers.py`, the refusal rules are
`refusals.py`, the events `records.py` (as pluggy keeps `_multicall` to the loop alone).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from the_loop.errors import describe_exception
from the_loop.events import EventLog
from the_loop.hooks.engine import refusals
from the_loop.hooks.engine.answers import (
    SHAPES,
    Reading,
    Shape,
    copy_context,
    read_answer,
    read_back,
)
from the_loop.hooks.engine.deadline import Deadline
from the_loop.hooks.engine.executor import Executor, HookError, LifecycleHooks
from the_loop.hooks.engine.location import hook_raise_site, located
from the_loop.hooks.engine.outcome import Outcome, Step
from the_loop.hooks.engine.points import POINTS, Context, WorkItem
from the_loop.hooks.engine.records import Records
from the_loop.hooks.engine.slow import WATCH
from the_loop.hooks.executors.registry import default_points, handler_for
from the_loop.interrupt import reraise_if_real

C = TypeVar("C", bound=Context)
_new = object.__new__


def _shape_of(cls: type) -> Shape:
    """What the chain knows of a context class; a TypeError for anything else."""
    shape = SHAPES.get(cls)
    if shape is None:
        raise TypeError(f"{cls.__name__} is not a lifecycle context")
    return shape


@dataclass(frozen=True)
class Link:
    """One executor in the chain, with the entry facts the chain needs."""

    name: str
    executor: LifecycleHooks | Executor
    points: frozenset[str]
    required: bool = False
    #: A local hook's `timeoutSeconds`: each call runs on a worker thread (`deadline.py`).
    timeout: float | None = None


#: (name, handler, required, reads_only) of one executor at one point.
_Entry = tuple[str, Callable[[Any], Any], bool, bool]


class Chain:
    """Executors in declaration order, pre-sorted by point at construction."""

    def __init__(self, links: Iterable[Link] = (), *, log: EventLog | None = None) -> None:
        self.links: tuple[Link, ...] = tuple(links)
        self.log = log if log is not None else EventLog()
        self.records = Records(self.log)
        self._by_point: dict[str, tuple[_Entry, ...]] = {
            point: tuple(self._entry(link, point) for link in self.links if point in link.points)
            for point in POINTS
        }
        self._by_class = {cls: self._by_point[point] for point, cls in POINTS.items()}

    @staticmethod
    def _entry(link: Link, point: str) -> _Entry:
        reads_only = bool(getattr(link.executor, "reads_only", False))
        handler = handler_for(link.executor, point)
        if link.timeout is not None:
            handler = Deadline(handler, link.name, link.timeout)
        return (link.name, handler, link.required, reads_only)

    @classmethod
    def of(cls, *executors: LifecycleHooks | Executor, log: EventLog | None = None) -> Chain:
        """A chain of unnamed-by-config executors (names from their class), for embedding."""
        links = [
            Link(type(e).__name__.lower(), e, frozenset(default_points(e))) for e in executors
        ]
        return cls(links, log=log)

    def names(self, point: str) -> list[str]:
        """The hooks that run at `point`, in order."""
        return [entry[0] for entry in self._by_point[point]]

    def run(self, ctx: C) -> C:
        """Run the chain at ctx's point; returns a context with the final decisions."""
        handlers = self._by_class.get(ctx.__class__)
        if handlers is None:  # not a point's own class: what its POINT names
            handlers = self._by_point[ctx.POINT]
        if not handlers:
            return ctx
        outcome = self._run(ctx, handlers, False)
        if outcome is None:  # every executor answered None: the caller's context stands
            return ctx
        out: C = outcome.context  # type: ignore[assignment]
        return out

    def invoke(self, ctx: Context) -> Outcome:
        """Like `run`, with a trace: every executor's step and who changed what."""
        outcome = self._run(ctx, self._by_point.get(ctx.POINT, ()), True)
        assert outcome is not None  # a traced run always has one
        return outcome

    def _run(self, ctx: Context, handlers: tuple[_Entry, ...], trace: bool) -> Outcome | None:
        """The loop: hand each executor its context, settle what it answered. Untraced, an
        executor that answers None costs its copy and its call, and nothing else."""
        cls = ctx.__class__
        shape = _shape_of(cls)
        lists = shape.lists
        outcome = Outcome(shape.point, ctx, ctx) if trace else None
        current = ctx  # the decisions so far live here
        started = 0.0
        failure: Reading | None
        for name, fn, required, reads_only in handlers:
            if trace:
                started = time.perf_counter()
            if reads_only:  # it only reads: nothing to protect
                given = current
            else:  # a fresh copy, so nothing it does to it reaches the others
                d = current.__dict__.copy()
                for key in lists:
                    d[key] = d[key][:]
                given = _new(cls)
                given.__dict__ = d
            try:  # traced, the call is watched: a slow one is recorded while it runs
                answer = WATCH.call(fn, given, self.records, name) if trace else fn(given)
            except BaseException as exc:  # anything a hook raises is its own failure
                answer, failure = None, self._failure(exc, fn)
            else:
                if answer is None and not trace:
                    continue
                failure = None
            if outcome is None:
                outcome = Outcome(shape.point, ctx, ctx)
            self._settle(outcome, shape, name, required, failure or read_back(current, answer),
                         started if trace else None)
            current = outcome.context
        if outcome is not None:
            self._say_refusal(outcome)
        return outcome

    def _say_refusal(self, outcome: Outcome) -> None:
        """The one `hooks.refused` record of a run that ended refused."""
        if outcome.refused_by:
            self.records.refused(outcome)

    def _failure(self, exc: BaseException, fn: Callable[[Any], Any]) -> Reading:
        """The reading of what an executor raised; a real Ctrl-C of ours goes on up."""
        reraise_if_real(exc)
        secrets = self.log.known_secrets()
        # A HookError's message is the hook's sentence; the chain's secrets go before it is cut.
        error = describe_exception(exc, plain=isinstance(exc, HookError), secrets=secrets)
        return Reading(error=error, site=hook_raise_site(
            exc, fn.fn if isinstance(fn, Deadline) else fn))

    def _settle(self, outcome: Outcome, shape: Shape, name: str, required: bool,
                reading: Reading | None, started: float | None) -> None:
        """One executor's reading into the outcome, with its events (and, traced, its step);
        None: it passed (only traced runs get here with that).

        The event and the trace name the file and line of a failure; a refusal's reason,
        which reaches the tracker and remote callers, names the hook and what it raised only.
        """
        if reading is None:
            if started is not None:
                ms = (time.perf_counter() - started) * 1000.0
                outcome.steps.append(Step(name, "unchanged", {}, [], "", ms, {}))
            return
        state = outcome.context
        ref = state.work_item.ref
        shown = located(reading.error, reading.site) if reading.error else ""
        if reading.error:
            self.records.failed(shape.point, name, shown, ref, required)
            reading.dropped, reading.detail = [], {}
            reading.changes = refusals.for_failure(shape, state, name, required, reading.error)
        elif reading.changes and refusals.refused_already(shape, state):
            refusals.keep_first(reading)
        if reading.dropped:
            self.records.dropped(shape.point, name, reading.dropped, ref)
        if reading.changes:
            self._apply(outcome, name, reading.changes)
            if not reading.error:
                self.records.decided(shape.point, name, reading.changes, reading.detail, ref)
        if started is not None:
            outcome.steps.append(_step(name, reading, shown, started))

    @staticmethod
    def _apply(outcome: Outcome, name: str, changes: dict[str, Any]) -> None:
        """Set `changes` on the outcome's context (a copy: never the caller's object)."""
        if outcome.context is outcome.given:
            outcome.context = copy_context(outcome.context)
        state = outcome.context.__dict__
        for key, value in changes.items():
            state[key] = value
            outcome.changed_by[key] = name
        if changes.get("proceed") is False:
            outcome.refused_by = name


def _step(name: str, reading: Reading, shown: str, started: float) -> Step:
    """The trace line of one executor."""
    failed = bool(reading.error)
    return Step(
        hook=name, status="failed" if failed else ("changed" if reading.changes else "unchanged"),
        changed={} if failed else dict(reading.changes), dropped=sorted(set(reading.dropped)),
        error=shown, ms=(time.perf_counter() - started) * 1000.0,
        detail={} if failed else reading.detail,
    )


__all__ = ["Chain", "Link", "Outcome", "Step", "WorkItem", "copy_context", "read_answer"]
