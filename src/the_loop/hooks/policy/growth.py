"""How much larger than what it reads an expression's values can grow: bounded at load.

JMESPath has no loops and no variables, so what an expression builds is bounded by what it
reads times a factor fixed by the expression alone — except where one value is used twice.
`[@, @]` holds its input twice (shared, so it costs nothing to build), and a chain of them,
`labels | [@, @] | [@, @] | …`, doubles the expanded size at each step: the first thing that
walks it (`to_string`, `join`, a flatten, `==`, a template) then takes time and memory
exponential in the number of steps (30 steps: 30 s and 1.3 GB on one point).

`growth(ast)` is an upper bound on that factor: the expanded size of the expression's value,
and of every intermediate value, is at most `growth × size of the context`. Multi-selects
add their parts; a pipe, subexpression, projection, `map` or `sort_by` multiplies its left
side's growth by its right side's; every other function is bounded by its arguments. A
policy whose expression can grow past `MAX_GROWTH` fails the load (issue 11 rule 6), so what
a point's evaluation builds — and the time it takes — stays linear in the context, with a
constant the operator can read. Literals count as 1: their size is the rule's own text.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from the_loop.hooks.policy.functions import POLICY_FUNCTION_RECORDS

#: The largest growth factor an expression may have (a legit expression rarely passes 8).
MAX_GROWTH = 256

#: Functions whose result is bounded by one argument times an expression reference.
_MAPPING = frozenset(("map", "sort_by", "max_by", "min_by"))
#: Functions whose result is a scalar of bounded size whatever they read: these built-ins,
#: and the policy functions that return booleans, numbers or null.
_SCALAR = frozenset((
    "abs", "avg", "ceil", "contains", "ends_with", "floor", "length", "max", "min",
    "starts_with", "sum", "to_number", "type",
)) | {r.name for r in POLICY_FUNCTION_RECORDS if set(r.returns) <= {"boolean", "number", "null"}}
_CAP = MAX_GROWTH * 1024  # stop multiplying far past the limit (the numbers stay small)


def growth(node: Mapping[str, Any], memo: dict[int, int] | None = None) -> int:
    """An upper bound on how many times larger than its input `node`'s values can be.

    `memo` (node id → growth) is filled for every node below, each computed once, children
    before parents, without recursion (a 16 KB `a.a.a…` nests thousands deep).
    """
    memo = {} if memo is None else memo
    stack: list[tuple[Mapping[str, Any], bool]] = [(node, False)]
    while stack:
        current, ready = stack.pop()
        if id(current) in memo:
            continue
        if ready:
            memo[id(current)] = _growth(current, memo)
            continue
        stack.append((current, True))
        stack.extend((c, False) for c in current.get("children", ()) if isinstance(c, Mapping))
    return memo[id(node)]


def _growth(node: Mapping[str, Any], memo: dict[int, int]) -> int:
    """`node`'s growth from its children's (done first): its handler in `GROWTH`."""
    grown = [memo[id(c)] for c in node.get("children", ()) if isinstance(c, Mapping)]
    return GROWTH.get(str(node.get("type")), _parts)(node, grown)


#: A node's growth from the node and the growth of each of its child nodes, in order.
Rule = Callable[[Mapping[str, Any], list[int]], int]


def _one(node: Mapping[str, Any], grown: list[int]) -> int:
    """A value of bounded size. A comparison's value is a boolean; what it walks is bounded
    by its operands, whose own growth is checked by `worst`."""
    return 1


def _sum(node: Mapping[str, Any], grown: list[int]) -> int:
    """Its parts side by side (a multi-select)."""
    return _cap(sum(grown))


def _first(node: Mapping[str, Any], grown: list[int]) -> int:
    """As large as its one operand."""
    return grown[0] if grown else 1


def _chain(node: Mapping[str, Any], grown: list[int]) -> int:
    """Left to right: each part runs on the value (or each element) of the one before; a
    filter's condition (third child) only selects."""
    total = 1
    for g in grown[:2]:
        total = _cap(total * g)
    return total


def _widest(node: Mapping[str, Any], grown: list[int]) -> int:
    """One operand or the other (`||`, `&&`)."""
    return max(grown, default=1)


def _call(node: Mapping[str, Any], grown: list[int]) -> int:
    name = node.get("value")
    if name in _SCALAR:
        return 1
    if name in _MAPPING:
        total = 1
        for g in grown:
            total = _cap(total * g)
        return total
    return _cap(sum(grown))  # to_string, join, merge, values, …


def _parts(node: Mapping[str, Any], grown: list[int]) -> int:
    """Anything new: its parts together."""
    return _cap(sum(grown) or 1)


#: How each node type grows: the one dispatch table (`growth`).
GROWTH: dict[str, Rule] = {
    "current": _one,
    "identity": _one,
    "field": _one,
    "literal": _one,
    "index": _one,
    "slice": _one,
    "comparator": _one,
    "not_expression": _one,
    "multi_select_list": _sum,
    "multi_select_dict": _sum,
    "key_val_pair": _first,
    "flatten": _first,
    "expref": _first,
    "subexpression": _chain,
    "pipe": _chain,
    "index_expression": _chain,
    "projection": _chain,
    "value_projection": _chain,
    "filter_projection": _chain,
    "or_expression": _widest,
    "and_expression": _widest,
    "function_expression": _call,
}


def worst(node: Mapping[str, Any]) -> int:
    """The largest growth of `node` or any of its parts (a part may build a large value that
    the whole then reduces, e.g. `length(to_string([@, @] | …))`)."""
    try:
        return _worst(node)[1]
    except RecursionError:  # a 16 KB `a.a.a…` nests past the stack: walk it without one
        memo: dict[int, int] = {}
        growth(node, memo)  # every node, a filter's condition included
        return max(memo.values(), default=1)


def _worst(node: Mapping[str, Any]) -> tuple[int, int]:
    """(`node`'s growth, the largest growth below and at it): `growth` and `worst` by
    recursion, several times faster on the shallow trees nearly every expression has."""
    grown: list[int] = []
    most = 1
    for child in node.get("children", ()):
        if isinstance(child, Mapping):
            g, m = _worst(child)
            grown.append(g)
            most = m if m > most else most
    g = GROWTH.get(str(node.get("type")), _parts)(node, grown)
    return g, g if g > most else most


def _cap(value: int) -> int:
    return value if value < _CAP else _CAP


__all__ = ["GROWTH", "MAX_GROWTH", "growth", "worst"]
