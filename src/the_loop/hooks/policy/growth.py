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

from collections.abc import Mapping
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
    def growth_of(child: Mapping[str, Any]) -> int:
        return memo[id(child)]  # children are done first

    kind = node.get("type")
    children = [c for c in node.get("children", ()) if isinstance(c, Mapping)]
    if kind in ("current", "identity", "field", "literal", "index", "slice", "comparator",
                "not_expression"):
        # A comparison's value is a boolean; what it walks is bounded by its operands,
        # whose own growth is checked by `worst` below.
        return 1
    if kind in ("multi_select_list", "multi_select_dict"):
        return _cap(sum(growth_of(c) for c in children))
    if kind == "key_val_pair":
        return growth_of(children[0]) if children else 1
    if kind in ("subexpression", "pipe", "index_expression", "projection", "value_projection",
                "filter_projection"):
        # Left to right: each part runs on the value (or each element) of the one before;
        # a filter's condition (third child) only selects.
        total = 1
        for child in children[:2]:
            total = _cap(total * growth_of(child))
        return total
    if kind in ("flatten", "expref"):
        return growth_of(children[0]) if children else 1
    if kind in ("or_expression", "and_expression"):
        return max((growth_of(c) for c in children), default=1)
    if kind == "function_expression":
        name = node.get("value")
        if name in _SCALAR:
            return 1
        if name in _MAPPING:
            total = 1
            for child in children:
                total = _cap(total * growth_of(child))
            return total
        return _cap(sum(growth_of(c) for c in children))  # to_string, join, merge, values, …
    return _cap(sum(growth_of(c) for c in children) or 1)  # anything new: its parts together


def worst(node: Mapping[str, Any]) -> int:
    """The largest growth of `node` or any of its parts (a part may build a large value that
    the whole then reduces, e.g. `length(to_string([@, @] | …))`)."""
    memo: dict[int, int] = {}
    growth(node, memo)  # every node, a filter's condition included
    return max(memo.values(), default=1)


def _cap(value: int) -> int:
    return value if value < _CAP else _CAP


__all__ = ["MAX_GROWTH", "growth", "worst"]
