"""Checks a `LifecycleHooks` subclass at load: a method named like a point must be a point,
and a point method takes `(self, ctx)`; `problems(cls)` lists what is wrong, one line each.

The rule (docs/declaring-hooks.md): a public method whose name, lowercased and without `_`,
is within two edits (a swap of two neighbouring letters counts as one) of a point's name is
taken for a misspelt point; a helper is named unlike any point or starts with `_`.
"""

from __future__ import annotations

import inspect
from typing import Any

from the_loop.hooks.engine.executor import LifecycleHooks
from the_loop.hooks.engine.points import POINTS

#: How many edits from a point's name a public method may be before it must be that point.
NEAR = 2


def _folded(name: str) -> str:
    return name.lower().replace("_", "")


def distance(a: str, b: str) -> int:
    """Edits (insert, delete, replace, swap two neighbours) turning `a` into `b`."""
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        row = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            row[j] = min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + (ca != cb))
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                row[j] = min(row[j], prev2[j - 2] + 1)
        prev2, prev = prev, row
    return prev[-1]


def nearest_point(name: str) -> str | None:
    """The point `name` is most likely a misspelling of, or None when none is near."""
    folded = _folded(name)
    best = min(POINTS, key=lambda p: distance(folded, _folded(p)))
    return best if distance(folded, _folded(best)) <= NEAR else None


def _own_attributes(cls: type) -> dict[str, Any]:
    """Every attribute the class and its bases below `LifecycleHooks` define, nearest first."""
    found: dict[str, Any] = {}
    for klass in cls.__mro__:
        if klass is LifecycleHooks or klass is object:
            continue
        for name, value in vars(klass).items():
            found.setdefault(name, value)
    return found


def _unwrapped(value: Any) -> Any:
    return value.__func__ if isinstance(value, (staticmethod, classmethod)) else value


def _signature_problem(cls: type, point: str, value: Any) -> str | None:
    func = _unwrapped(value)
    if not callable(func):
        return (f"{cls.__name__}.{point} is a {type(value).__name__}, not a method; a point "
                f"is a method def {point}(self, ctx)")
    if inspect.iscoroutinefunction(func):
        return (f"{cls.__name__}.{point} is async; the loop calls a point method and uses "
                f"what it returns, so write def {point}(self, ctx) without async")
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError):
        return None  # a builtin or C callable: nothing to check
    given = (object(),) if isinstance(value, staticmethod) else (object(), object())
    try:
        sig.bind(*given)
    except TypeError:
        shown = ", ".join(sig.parameters) or "no parameter"
        return (f"{cls.__name__}.{point} takes ({shown}); a point method takes one context: "
                f"def {point}(self, ctx)")
    return None


def problems(cls: type) -> list[str]:
    """What keeps `cls` from loading: misspelt point names and point methods of a wrong shape."""
    out: list[str] = []
    for name, value in _own_attributes(cls).items():
        if name in POINTS:
            problem = _signature_problem(cls, name, value)
            if problem:
                out.append(problem)
            continue
        func = _unwrapped(value)
        if name.startswith("_") or isinstance(func, type) or not callable(func):
            continue
        near = nearest_point(name)
        if near is not None:
            out.append(f"{cls.__name__}.{name} is not a point; did you mean {near}? (a method "
                       f"named like a point must be one: rename it {near}, or start a "
                       "helper's name with _)")
    return out


__all__ = ["NEAR", "distance", "nearest_point", "problems"]
