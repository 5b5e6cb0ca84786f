"""Reading an executor's answer back: which decisions it changed, what it dropped, or why
the answer is that executor's failure (a wrong type, a wrong class, a hostile object).

Shared by the chain and the JSON-RPC server, so both sides judge an answer the same way.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any, TypeVar

from the_loop.errors import describe_exception, quote
from the_loop.hooks.engine.executor import Decisions
from the_loop.hooks.engine.points import POINTS, SPECS, Context
from the_loop.interrupt import reraise_if_real

C = TypeVar("C", bound=Context)

_PY_TYPES: dict[str, type] = {"str": str, "bool": bool}


class Shape:
    """What reading back needs of one point's context class, computed once."""

    __slots__ = ("decisions", "facts", "lists", "names", "point", "proceed", "wanted")

    def __init__(self, cls: type[Context]) -> None:
        spec = SPECS[cls.POINT]
        self.point = cls.POINT
        self.decisions: tuple[tuple[str, type], ...] = tuple(
            (d.name, _PY_TYPES[d.type]) for d in spec.decisions
        )
        self.wanted: dict[str, type] = dict(self.decisions)
        self.facts: tuple[str, ...] = tuple(f.name for f in spec.facts)
        self.lists: tuple[str, ...] = tuple(f.name for f in spec.fields if f.type == "list[str]")
        self.names = frozenset(f.name for f in spec.fields)
        self.proceed = "proceed" in self.wanted


#: Each point's context class → its shape.
SHAPES: dict[type[Context], Shape] = {cls: Shape(cls) for cls in POINTS.values()}


def copy_context(ctx: C) -> C:
    """A copy of `ctx` that shares nothing mutable with it (WorkItem records are frozen)."""
    cls = type(ctx)
    out: C = object.__new__(cls)
    d = ctx.__dict__.copy()
    for name in SHAPES[cls].lists:
        d[name] = list(d[name])
    out.__dict__ = d
    return out


@dataclass
class Reading:
    """One executor's answer as read back: the decisions it changed, the keys it set that
    were dropped, the detail for its `hooks.decided` record — or the error that makes it
    that executor's failure (with `site`, where in the hook's code it was raised)."""

    changes: dict[str, Any] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)
    detail: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    site: str = ""


def read_back(state: Context, answer: Any) -> Reading | None:
    """The reading of an answer given against `state`; None for a None answer (nothing to
    read: the executor passed)."""
    if answer is None:
        return None
    changes, dropped, error = read_answer(state, answer)
    if error or not isinstance(answer, Decisions):
        return Reading(changes, dropped, {}, error)
    detail, error = _detail_of(answer)
    return Reading(changes if not error else {}, dropped, detail, error)


def _detail_of(answer: Decisions) -> tuple[dict[str, Any], str]:
    """A patch's detail as a dict keyed by strings, or the error a hostile one makes."""
    given = answer.detail
    if type(given) is dict:  # the common case: a plain dict keyed by strings
        for key in given:
            if type(key) is not str:
                break
        else:
            return given.copy(), ""
    try:
        return {str(k): v for k, v in given.items()}, ""
    except BaseException as exc:  # a hostile patch whose detail is not a mapping
        reraise_if_real(exc)
        return {}, f"its answer could not be read back: {describe_exception(exc)}"


def read_answer(state: Context, answer: Any) -> tuple[dict[str, Any], list[str], str]:
    """Read an executor's answer against `state` as the chain does.

    Returns (changed decisions, ignored keys, error); the error is "" for a valid answer —
    `None`, a context of the same type, or a `Decisions` patch with well-typed values.
    """
    changes: dict[str, Any] = {}
    dropped: list[str] = []
    if answer is None:
        return changes, dropped, ""
    shape = SHAPES[type(state)]
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
    shape: Shape, state: Context, answer: Context, changes: dict[str, Any], dropped: list[str]
) -> str:
    """Collect changed decisions from a returned context; an error string on a bad type
    or an attribute the point does not have (a misspelt decision must not pass unseen)."""
    ad = answer.__dict__
    sd = state.__dict__
    if ad.keys() != sd.keys():
        unknown = sorted(k for k in ad if k not in shape.names)
        if unknown:
            return _unknown_error(shape, unknown)
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
    return ""


def _unknown_error(shape: Shape, unknown: list[str]) -> str:
    """Why setting attributes the point does not have fails the hook (R6.1): the first one,
    the point's decisions, and the nearest name (`procede` → `proceed`)."""
    first = quote(unknown[0])
    near = difflib.get_close_matches(unknown[0], sorted(shape.names), n=1) if len(
        unknown[0]) <= 100 else []
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    others = [quote(k) for k in unknown[1:6]]
    if unknown[6:]:
        others.append(f"{len(unknown) - 6} more")
    more = f" (and {', '.join(others)})" if others else ""
    return (f"set {first}{more}, which is neither a fact nor a decision of {shape.point}"
            f"{hint}; its decisions are {', '.join(n for n, _ in shape.decisions)}; nothing "
            "from this hook was applied")


def _read_patch(
    shape: Shape, state: Context, values: Any, changes: dict[str, Any], dropped: list[str]
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


__all__ = ["SHAPES", "Reading", "Shape", "copy_context", "read_answer", "read_back"]
