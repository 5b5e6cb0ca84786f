"""What the type checker knows of a value (`T`) and of each point's context (`root_type`).

`T` holds the JMESPath types a value may have and, when known, its elements' types, its
fields, the literal itself and its truth; `describe` words it for messages ('a list of
strings'). The context's types come from the catalog: every field present, never null.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from the_loop.hooks.engine.points import SPECS, WORK_ITEM_TYPES
from the_loop.jmes.ir import NO_LITERAL
from the_loop.jmes.jtypes import ANY, ARR, BOOL, NULL, NUM, OBJ, STR, JTypes, jtypes, jtypes_of
from the_loop.jmes.semantics import truthy

__all__ = ["UNKNOWN", "T", "describe", "of_literal", "root_type", "truth_of"]


@dataclass(frozen=True)
class T:
    """What the checker knows of a value: its possible JMESPath types, and more when known.

    `elem`: the types of an array's elements; `fields`: an object's fields; `literal`: the
    value itself; `truth`: True/False when the value is always truthy/falsy.
    """

    jtypes: JTypes
    elem: JTypes | None = None
    fields: Mapping[str, T] | None = None
    literal: Any = NO_LITERAL
    truth: bool | None = None


UNKNOWN = T(ANY)
_CATALOG: dict[str, T] = {
    "str": T(jtypes(STR)), "int": T(jtypes(NUM), truth=True), "bool": T(jtypes(BOOL)),
    "list[str]": T(jtypes(ARR), elem=jtypes(STR)),
}
_WORK_ITEM = T(jtypes(OBJ), fields={
    f: _CATALOG[t] for f, t in WORK_ITEM_TYPES.items()
}, truth=True)


def root_type(point: str) -> T:
    """The context at `point` as the checker sees it (every field present, never null)."""
    return T(jtypes(OBJ), fields={
        f.name: _WORK_ITEM if f.type == "WorkItem" else _CATALOG[f.type]
        for f in SPECS[point].fields
    }, truth=True)


def describe(t: T) -> str:
    """'a list of strings', 'a number', 'null', 'a string or null' …"""
    names = {STR: "a string", NUM: "a number", BOOL: "a boolean", OBJ: "an object",
             NULL: "null", "expref": "an &expression"}
    parts: list[str] = []
    for k in (ARR, STR, NUM, BOOL, OBJ, NULL, "expref"):
        if k not in t.jtypes:
            continue
        if k == ARR:
            parts.append("a list of strings" if t.elem == jtypes(STR) else
                         "a list of numbers" if t.elem == jtypes(NUM) else "a list")
        else:
            parts.append(names[k])
    return " or ".join(parts) or "nothing"


def of_literal(value: Any) -> T:
    """A literal's type: the value itself, its jtypes, its elements' jtypes and its truth."""
    elem = None
    if isinstance(value, list):
        elem = frozenset().union(*(jtypes_of(v) for v in value)) if value else frozenset()
    return T(jtypes_of(value), elem=elem, literal=value, truth=truthy(value))


def truth_of(ks: JTypes) -> bool | None:
    """True/False when every value of jtypes `ks` is truthy/falsy (null; a number), else None."""
    if ks <= jtypes(NULL):
        return False
    if ks <= jtypes(NUM):
        return True
    return None
