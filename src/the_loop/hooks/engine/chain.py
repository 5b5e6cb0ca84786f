"""The chain: runs executors at one point in declaration order and reads back typed decisions.

Rules, each tested by name in tests/hooks/test_chain.py:
- `None` passes through; a context of the same type (or a `Decisions` patch) replaces the
  decisions; each executor sees the decisions of the ones before it.
- Each executor gets its own copy (lists included), so an edit followed by a failure leaves
  nothing behind; one it keeps stays as it left it, even while later executors run.
- Only decisions are read back; a changed fact or unknown attribute is dropped and recorded.
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
- A failing `required` executor at a point with `proceed` refuses, naming the hook.
- A refusal sticks: once `proceed` is false, a later executor cannot set it back to true.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar
from weakref import getweakrefcount

from the_loop.errors import describe_exception, quote
from the_loop.events import EventLog
from the_loop.hooks.engine.executor import Decisions, Executor, HookError, LifecycleHooks
from the_loop.hooks.engine.location import hook_raise_site, located
from the_loop.hooks.engine.points import POINTS, SPECS, Context, WorkItem
from the_loop.hooks.executors.registry import default_points, handler_for
from the_loop.interrupt import reraise_if_real

C = TypeVar("C", bound=Context)

_PY_TYPES: dict[str, type] = {"str": str, "bool": bool}


class _Shape:
    """Per-context-class data the hot path needs, computed once."""

    __slots__ = ("decisions", "facts", "list1", "list2", "lists", "more_lists", "names", "point",
                 "proceed", "wanted")

    def __init__(self, cls: type[Context]) -> None:
        spec = SPECS[cls.POINT]
        self.point = cls.POINT
        self.decisions: tuple[tuple[str, type], ...] = tuple(
            (d.name, _PY_TYPES[d.type]) for d in spec.decisions
        )
        self.wanted: dict[str, type] = dict(self.decisions)  # read only, never handed out
        self.facts: tuple[str, ...] = tuple(f.name for f in spec.facts)
        self.lists: tuple[str, ...] = tuple(f.name for f in spec.fields if f.type == "list[str]")
        # The copy in the hot loop is unrolled for the first two list fields (every context
        # has `labels`, first; session_spawn also has `command`); further ones are looped over.
        assert self.lists[:1] == ("labels",), cls
        padded = (*self.lists, "", "")
        self.list1: str = padded[0]
        self.list2: str = padded[1]
        self.more_lists: tuple[str, ...] = self.lists[2:]
        self.names = frozenset(f.name for f in spec.fields)
        self.proceed = any(name == "proceed" for name, _ in self.decisions)


_SHAPES: dict[type[Context], _Shape] = {cls: _Shape(cls) for cls in POINTS.values()}
_new = object.__new__
_refs = sys.getrefcount


def _unshared_refs() -> int:
    """What `sys.getrefcount` says of an object one local variable alone holds (2 on
    CPython 3.11: the variable and the call's argument), measured in the same shape as the
    check in `Chain._run`, so an interpreter that counts otherwise is measured, not assumed."""
    view = _new(WorkItem)
    return _refs(view)


_UNSHARED = _unshared_refs()


def copy_context(ctx: C) -> C:
    """A copy of `ctx` that shares nothing mutable with it (WorkItem records are frozen)."""
    cls = type(ctx)
    out: C = _new(cls)
    d = ctx.__dict__.copy()
    for name in _SHAPES[cls].lists:
        d[name] = list(d[name])
    out.__dict__ = d
    return out


@dataclass
class Step:
    """What one executor did at one point (one line of a trace)."""

    hook: str
    status: str  # unchanged | changed | failed
    changed: dict[str, Any] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)
    error: str = ""
    ms: float = 0.0
    detail: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            **self.detail,  # extra fields (e.g. a policy's rules); never hides the fields below
            "hook": self.hook, "status": self.status, "changed": self.changed,
            "dropped": self.dropped, "error": self.error, "ms": round(self.ms, 3),
        }


@dataclass
class Outcome:
    """The result of running a point: the final context and who changed what."""

    point: str
    context: Context
    given: Context | None = None  # the caller's context, never modified
    steps: list[Step] = field(default_factory=list)
    changed_by: dict[str, str] = field(default_factory=dict)  # decision → last hook to set it
    refused_by: str = ""  # the hook whose proceed: false stuck

    @property
    def refused(self) -> bool:
        return bool(getattr(self.context, "proceed", True) is False)


@dataclass(frozen=True)
class Link:
    """One executor in the chain, with the entry facts the chain needs."""

    name: str
    executor: LifecycleHooks | Executor
    points: frozenset[str]
    required: bool = False


#: The fields of a `hooks.decided` record an executor's detail cannot set: the event log's
#: own (`EventLog.emit`) and the chain's.
_OWN_FIELDS = frozenset({"event", "ts", "source", "pid", "point", "hook", "changed",
                         "work_item"})

#: (name, handler, required, reads_only) of one executor at one point.
_Entry = tuple[str, Callable[[Any], Any], bool, bool]


class Chain:
    """Executors in declaration order, pre-sorted by point at construction."""

    def __init__(self, links: Iterable[Link] = (), *, log: EventLog | None = None) -> None:
        self.links: tuple[Link, ...] = tuple(links)
        self.log = log if log is not None else EventLog()
        self._by_point: dict[str, tuple[_Entry, ...]] = {}
        for point in POINTS:
            self._by_point[point] = tuple(
                (link.name, handler_for(link.executor, point), link.required,
                 bool(getattr(link.executor, "reads_only", False)))
                for link in self.links
                if point in link.points
            )
        self._by_class = {cls: self._by_point[point] for point, cls in POINTS.items()}

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
        try:  # by class, a subscript: this is the hot path
            handlers = self._by_class[ctx.__class__]
        except KeyError:  # not a point's own class: what its POINT names, as before
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
        handlers = self._by_point.get(ctx.POINT, ())
        outcome = self._run(ctx, handlers, True)
        assert outcome is not None  # a traced run always has one
        return outcome

    # The loop below is the hot path: no dataclasses.asdict/replace, and no allocation
    # besides each copying executor's own dict and lists while executors answer None (the
    # object they sit in is handed on, see "One view"; the Outcome is made on the first
    # answer or failure); everything else goes through `_settle`.
    def _run(self, ctx: Context, handlers: tuple[_Entry, ...], trace: bool
             ) -> Outcome | None:
        cls = ctx.__class__
        try:
            shape = _SHAPES[cls]
        except KeyError:
            raise TypeError(f"{cls.__name__} is not a lifecycle context") from None
        outcome = Outcome(shape.point, ctx, ctx) if trace else None
        current: Context = ctx  # the current decisions live here
        src = ctx.__dict__
        list2, more_lists = shape.list2, shape.more_lists
        labels = src["labels"]  # every context has labels; read again when src changes
        second = src[list2] if list2 else None
        view: Any = None  # the object a copying executor is handed (see "One view" below)
        started = 0.0
        for name, fn, required, reads_only in handlers:
            if trace:
                started = time.perf_counter()
            if not reads_only:  # a reading executor is handed `current`: nothing to protect
                d = src.copy()
                d["labels"] = labels[:]
                if second is not None:
                    d[list2] = second[:]
                    if more_lists:
                        for key in more_lists:
                            d[key] = d[key][:]
                # One view: the object the last executor answered None with is handed on
                # with fresh values (its edits are gone) unless anything else holds it (the
                # hook kept it, or a weak reference) or its class was changed: then a new one.
                if (view is None or _refs(view) != _UNSHARED or getweakrefcount(view)
                        or view.__class__ is not cls):
                    view = _new(cls)
                view.__dict__ = d
            try:
                answer = fn(current if reads_only else view)
            except BaseException as exc:  # anything a hook raises is its own failure (rule 3)
                answer, (error, site), view = None, self._failure(exc, fn), None
            else:
                if answer is None and not trace:
                    continue
                error = site = ""
                if answer is not None:  # the next copying executor gets a new view
                    view = None
            if outcome is None:
                outcome = Outcome(shape.point, ctx, ctx)
            self._settle(outcome, shape, name, required, answer, (error, site), started, trace)
            current = outcome.context
            src = current.__dict__
            labels = src["labels"]
            second = src[list2] if list2 else None
        if outcome is None:
            return None
        if outcome.refused_by:
            self._record(
                "hooks.refused", point=shape.point, hook=outcome.refused_by,
                reason=getattr(outcome.context, "reason", ""), work_item=ctx.work_item.ref,
            )
        return outcome

    def _failure(self, exc: BaseException, fn: Callable[[Any], Any]) -> tuple[str, str]:
        """(error, site) of what an executor raised; a real Ctrl-C of ours goes on up."""
        reraise_if_real(exc)
        site = hook_raise_site(exc, fn)
        if isinstance(exc, HookError):  # the chain's secrets go before the message is cut
            return describe_exception(exc, plain=True, secrets=self.log.known_secrets()), site
        return describe_exception(exc, secrets=self.log.known_secrets()), site

    def _record(self, event: str, **fields: Any) -> None:
        """Emit an event; a log that cannot be written is reported, never raised (R6.2)."""
        try:
            self.log.emit(event, **fields)
        except OSError as exc:
            self._unrecorded(event, exc)

    def _unrecorded(self, event: str, exc: OSError) -> None:
        print(f"the-loop: could not record {event} in {self.log.path}: {exc}", file=sys.stderr)

    def _apply(self, outcome: Outcome, name: str, changes: dict[str, Any],
               detail: dict[str, Any]) -> None:
        """A clean answer (nothing dropped, no earlier refusal) into the outcome: what
        `_settle` does for it, without its other branches."""
        if not changes:
            return
        state = outcome.context
        if state is outcome.given:
            state = outcome.context = copy_context(state)  # never touch the caller's object
        sd = state.__dict__
        changed_by = outcome.changed_by
        for key, value in changes.items():
            sd[key] = value
            changed_by[key] = name
        self._decided(state.POINT, name, changes, detail, sd["work_item"].ref)
        if changes.get("proceed") is False:
            outcome.refused_by = name

    def _decided(self, point: str, name: str, changes: dict[str, Any],
                 detail: dict[str, Any], ref: str) -> None:
        """Record `hooks.decided`: the executor's detail adds fields, never one the record
        or the chain owns (an `event` in it made `emit` raise; a `source` forged the record)."""
        for key in detail:
            if key in _OWN_FIELDS:
                detail = {k: v for k, v in detail.items() if k not in _OWN_FIELDS}
                break
        try:
            self.log.emit("hooks.decided", **detail, point=point, hook=name,
                          changed=sorted(changes), work_item=ref)
        except OSError as exc:
            self._unrecorded("hooks.decided", exc)

    def _settle(self, outcome: Outcome, shape: _Shape, name: str, required: bool, answer: Any,
                failure: tuple[str, str], started: float, trace: bool) -> None:
        """Read back one executor's answer (or failure) into the outcome; record events.

        `failure` is what the executor raised and where in its code ('' and '' when it
        answered). The event and the trace name the file and line; a refusal's reason, which
        reaches the tracker and remote callers, names the hook and what it raised only.
        """
        if answer is None and not failure[0]:  # (traced: untraced, it never gets here)
            outcome.steps.append(Step(name, "unchanged", {}, [], "",
                                      (time.perf_counter() - started) * 1000.0, {}))
            return
        state = outcome.context
        ref = state.work_item.ref
        changes, dropped, detail, error = _read_back(state, answer, failure[0])
        if not (error or dropped or trace) and not (
            shape.proceed and state.__dict__["proceed"] is False
        ):
            self._apply(outcome, name, changes, detail)  # the common case, kept short
            return
        shown = located(error, failure[1]) if error else error
        if error:
            changes, dropped, detail = {}, [], {}
            self._record(
                "hooks.failed", point=shape.point, hook=name, error=shown, work_item=ref,
                required=required,
            )
            if required and shape.proceed and state.__dict__["proceed"] is not False:
                changes = {"proceed": False, "reason": f"required hook {name!r} failed: {error}"}
        if changes and shape.proceed and state.__dict__["proceed"] is False:
            _keep_first_refusal(changes, dropped, error)
        if dropped:
            self._record(
                "hooks.dropped", point=shape.point, hook=name, dropped=sorted(set(dropped)),
                work_item=ref,
            )
        if changes:
            if state is outcome.context and state is outcome.given:
                state = copy_context(state)  # never touch the caller's object
            sd = state.__dict__
            for key, value in changes.items():
                sd[key] = value
                outcome.changed_by[key] = name
            outcome.context = state
            if not error:
                self._decided(shape.point, name, changes, detail, ref)
            if changes.get("proceed") is False:
                outcome.refused_by = name
        if trace:
            outcome.steps.append(Step(
                hook=name,
                status="failed" if error else ("changed" if changes else "unchanged"),
                changed={} if error else dict(changes), dropped=sorted(set(dropped)),
                error=shown, ms=(time.perf_counter() - started) * 1000.0, detail=detail,
            ))


def _keep_first_refusal(changes: dict[str, Any], dropped: list[str], error: str) -> None:
    """A refusal sticks: a later answer's proceed and reason are taken out of `changes`
    (and listed as dropped, unless the executor failed)."""
    for key in ("proceed", "reason"):
        if key in changes:
            del changes[key]
            if not error:
                dropped.append(key)


def _read_back(
    state: Context, answer: Any, error: str
) -> tuple[dict[str, Any], list[str], dict[str, Any], str]:
    """(changes, dropped, detail, error) of one executor's answer; nothing when it failed."""
    if error or answer is None:
        return {}, [], {}, error
    changes, dropped, error = read_answer(state, answer)
    if error or not isinstance(answer, Decisions):
        return changes, dropped, {}, error
    given = answer.detail
    if type(given) is dict:  # the common case: a plain dict keyed by strings
        for key in given:
            if type(key) is not str:
                break
        else:
            return changes, dropped, given.copy(), error
    try:
        return changes, dropped, {str(k): v for k, v in answer.detail.items()}, error
    except BaseException as exc:  # a hostile patch whose detail is not a mapping
        reraise_if_real(exc)
        return changes, dropped, {}, (
            f"its answer could not be read back: {describe_exception(exc)}")


def read_answer(state: Context, answer: Any) -> tuple[dict[str, Any], list[str], str]:
    """Read an executor's answer against `state` as the chain does.

    Returns (changed decisions, ignored keys, error); the error is "" for a valid answer —
    `None`, a context of the same type, or a `Decisions` patch with well-typed values.
    Shared with the JSON-RPC server so both sides judge an answer the same way.
    """
    changes: dict[str, Any] = {}
    dropped: list[str] = []
    if answer is None:
        return changes, dropped, ""
    shape = _SHAPES[type(state)]
    try:
        if type(answer) is type(state):
            error = _read_context(shape, state, answer, changes, dropped)
        elif isinstance(answer, Decisions):
            if answer.dropped:
                dropped.extend(str(k) for k in answer.dropped)
            error = _read_patch(shape, state, answer.values, changes, dropped)
        else:
            error = _wrong_answer(type(state), answer)
    except BaseException as exc:  # a hostile answer (a fact whose __eq__ raises, …)
        reraise_if_real(exc)
        error = f"its answer could not be read back: {describe_exception(exc)}"
    if error:
        changes = {}
    return changes, dropped, error


def _wrong_answer(cls: type[Context], answer: object) -> str:
    if isinstance(answer, Context):
        return (
            f"returned a {type(answer).__name__} ({answer.POINT}'s context) at "
            f"{cls.POINT}; expected {cls.__name__} or None"
        )
    return f"returned {type(answer).__name__}; expected {cls.__name__} or None"


def _type_error(name: str, want: type, value: object) -> str:
    return (
        f"decision {name!r} must be {want.__name__} (got {quote(value)} that is "
        f"{type(value).__name__}); nothing from this hook was applied"
    )


def _read_context(
    shape: _Shape, state: Context, answer: Context, changes: dict[str, Any], dropped: list[str]
) -> str:
    """Collect changed decisions from a returned context; an error string on a bad type."""
    ad = answer.__dict__
    sd = state.__dict__
    for name, want in shape.decisions:
        value = ad.get(name)
        if type(value) is not want:
            return _type_error(name, want, value)
        if value != sd[name]:
            changes[name] = value
    for name in shape.facts:
        value = ad.get(name)
        # Identity first: an untouched fact is the very object the copy shared (a WorkItem's
        # generated __eq__ is not free).
        if value is not sd[name] and value != sd[name]:
            dropped.append(name)
    if len(ad) != len(sd):
        dropped.extend(k for k in ad if k not in shape.names)
    return ""


def _read_patch(
    shape: _Shape,
    state: Context,
    values: Any,
    changes: dict[str, Any],
    dropped: list[str],
) -> str:
    """Collect changed decisions from a patch (remote result, policy)."""
    sd = state.__dict__
    wanted = shape.wanted
    for name, value in values.items():
        want = wanted.get(name)
        if want is None:
            dropped.append(name)
            continue
        if type(value) is not want:
            return _type_error(name, want, value)
        if value != sd[name]:
            changes[name] = value
    return ""


__all__ = ["Chain", "Link", "Outcome", "Step", "WorkItem", "copy_context"]
