"""Conditions that can never be true at a point: the contradiction half of `never-matches`.

`contradiction(ast, point)` reads a condition's `&&`, `||` and `!` over the atoms it
understands and says, in words, why no context makes it true — or returns "" when one may:

- `fact == literal` and `fact != literal` (either side), `contains(<literal list>, fact)`;
- a fact read as a condition: a boolean (`terminal`, `!terminal`), a string (`node`: non-empty).

Each atom constrains one fact (a field of the context, or of a work-item record in it) to a
set of values; the closed sets of every caller (`engine.values`) and a boolean's two values
bound it. The condition is brought to disjunctive normal form (`!` pushed inward); a conjunction is
impossible when some fact has no value left, and the condition is when every conjunction is.
Any other part (a function call, `<`, a projection) is a fact of its own that may be true
or false, so the check never calls satisfiable condition impossible. Past `MAX_TERMS`
conjunctions it gives up ("").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from the_loop.hooks.engine.points import SPECS
from the_loop.hooks.engine.values import known_values
from the_loop.hooks.policy.exprtext import show

__all__ = ["MAX_TERMS", "contradiction"]

#: The most conjunctions the normal form may have before the check gives up.
MAX_TERMS = 256

Value = tuple[str, Any]  # ("s", text) | ("b", bool) | ("n", float): JMESPath equality


@dataclass(frozen=True)
class Atom:
    """One fact constrained: to the values in `allowed` (None: any) and none in `excluded`."""

    path: tuple[str, ...]
    node: Mapping[str, Any]
    allowed: frozenset[Value] | None = None
    excluded: frozenset[Value] = frozenset()

    def negated(self) -> Atom:
        """The atom for `!atom` (an atom sets `allowed` or `excluded`, never both)."""
        node = {"type": "not_expression", "children": [self.node]}
        if self.allowed is not None:
            return Atom(self.path, node, excluded=self.allowed)
        return Atom(self.path, node, allowed=self.excluded if self.path else None)


def contradiction(ast: Mapping[str, Any], point: str) -> str:
    """Why condition `ast` is never true at `point`, or "" when it may be."""
    terms = _dnf(ast, point, positive=True)
    if terms is None or not terms:
        return ""
    reasons: list[str] = []
    for term in terms:
        reason = _impossible(term, point)
        if not reason:
            return ""
        if reason not in reasons:
            reasons.append(reason)
    return "; ".join(reasons)


def _dnf(node: Mapping[str, Any], point: str, positive: bool) -> list[list[Atom]] | None:
    """The condition (or its negation) as a list of conjunctions of atoms; None past
    `MAX_TERMS`. An atom with an empty path is a part the check does not read."""
    node_type = node.get("type")
    children = node.get("children") or []
    if node_type == "not_expression" and children:
        return _dnf(children[0], point, not positive)
    if node_type in ("and_expression", "or_expression") and len(children) == 2:
        left = _dnf(children[0], point, positive)
        right = _dnf(children[1], point, positive)
        if left is None or right is None:
            return None
        if (node_type == "and_expression") == positive:  # a conjunction: every pair
            if len(left) * len(right) > MAX_TERMS:
                return None
            return [a + b for a in left for b in right]
        return left + right if len(left) + len(right) <= MAX_TERMS else None
    atom = _atom(node, point)
    return [[atom if positive else atom.negated()]]


def _atom(node: Mapping[str, Any], point: str) -> Atom:
    node_type = node.get("type")
    children = node.get("children") or []
    if node_type == "comparator" and node.get("value") in ("eq", "ne") and len(children) == 2:
        for fact, literal in (children, reversed(children)):
            path, value = _fact(fact, point), _value(literal)
            if path is not None and value is not None:
                one = frozenset({value})
                if node["value"] == "eq":
                    return Atom(path[0], node, allowed=one)
                return Atom(path[0], node, excluded=one)
    if (node_type == "function_expression" and node.get("value") == "contains"
            and len(children) == 2):
        path, among = _fact(children[1], point), _values(children[0])
        if path is not None and among is not None:
            return Atom(path[0], node, allowed=among)
    fact = _fact(node, point)
    if fact is not None and fact[1] == "bool":
        return Atom(fact[0], node, allowed=frozenset({("b", True)}))
    if fact is not None and fact[1] == "str":
        return Atom(fact[0], node, excluded=frozenset({("s", "")}))
    return Atom((), node)


def _fact(node: Mapping[str, Any], point: str) -> tuple[tuple[str, ...], str] | None:
    """(path, catalog type) when `node` reads a str, bool or int fact of the context."""
    path = _path(node)
    if not path:
        return None
    spec = SPECS[point].field(path[0])
    if spec is None:
        return None
    if spec.type == "WorkItem" and len(path) == 2:
        return (path, "int" if path[1] == "number" else "str")
    if spec.type in ("str", "bool", "int") and len(path) == 1:
        return (path, spec.type)
    return None


def _path(node: Mapping[str, Any]) -> tuple[str, ...]:
    if node.get("type") == "field":
        return (str(node["value"]),)
    if node.get("type") == "subexpression":
        out: tuple[str, ...] = ()
        for child in node.get("children") or []:
            part = _path(child)
            if not part:
                return ()
            out += part
        return out
    return ()


def _value(node: Mapping[str, Any]) -> Value | None:
    if node.get("type") != "literal":
        return None
    return _scalar(node.get("value"))


def _scalar(value: Any) -> Value | None:
    if isinstance(value, bool):
        return ("b", value)
    if isinstance(value, str):
        return ("s", value)
    if isinstance(value, int | float):
        return ("n", float(value))
    return None


def _values(node: Mapping[str, Any]) -> frozenset[Value] | None:
    """The values of a literal list: `['a', 'b']` or a JSON literal `` `["a"]` ``."""
    items: list[Any]
    if node.get("type") == "multi_select_list":
        items = [c.get("value") if c.get("type") == "literal" else object()
                 for c in node.get("children") or []]
    elif node.get("type") == "literal" and isinstance(node.get("value"), list):
        items = list(node["value"])
    else:
        return None
    values = [_scalar(v) for v in items]
    if any(v is None for v in values):
        return None
    return frozenset(v for v in values if v is not None)


def _impossible(term: list[Atom], point: str) -> str:
    """Why the conjunction `term` cannot hold, or ""."""
    by_path: dict[tuple[str, ...], list[Atom]] = {}
    for atom in term:
        if atom.path:
            by_path.setdefault(atom.path, []).append(atom)
    for path, atoms in by_path.items():
        domain = _domain(path, point)
        allowed = domain
        for atom in atoms:
            if atom.allowed is not None:
                allowed = atom.allowed if allowed is None else allowed & atom.allowed
        if allowed is None:
            continue  # an open set minus a few values is never empty
        left = allowed - frozenset().union(*(a.excluded for a in atoms))
        if left:
            continue
        name = ".".join(path)
        shown = list(dict.fromkeys(show(a.node) for a in atoms))
        if len(shown) == 1 and domain is not None:
            return (f"{shown[0]} is never true: {name} is always one of "
                    f"{_words(domain)}")
        both = "both" if len(shown) == 2 else "all"
        return f"{' and '.join(shown)} cannot {both} be true"
    return ""


def _domain(path: tuple[str, ...], point: str) -> frozenset[Value] | None:
    spec = SPECS[point].field(path[0])
    if spec is not None and spec.type == "bool":
        return frozenset({("b", True), ("b", False)})
    record = spec is not None and spec.type == "WorkItem"
    values = known_values(point, path, record)
    return None if values is None else frozenset(("s", v) for v in values)


def _words(values: frozenset[Value]) -> str:
    return ", ".join(sorted(_text(v) for v in values))


def _text(value: Value) -> str:
    tag, raw = value
    if tag == "b":
        return "true" if raw else "false"
    return repr(raw) if tag == "s" else f"{raw:g}"

