"""``root_paths``: the field chains an expression reads from the root document, for load checks.

The policy loader checks each chain against the point's context (``checks.check_fields``), so a
typo in a field name is a load error, never a silent null at run time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["root_paths"]

_Chains = tuple[tuple[str, ...], ...]

#: Chains are cut after this many fields: no context field nests deeper than two (work_item.ref),
#: so a longer chain is an error whatever follows, and its first fields say which. Cutting keeps
#: the walk linear in the expression (a 16 KB `a.a.a…` would otherwise build n² tuples).
MAX_DEPTH = 4
#: At most this many alternative chains are carried through `||` and `not_null` (each is still
#: checked itself); beyond it, what is read from their result is not followed.
MAX_ALTERNATIVES = 64


def root_paths(ast: Mapping[str, Any]) -> list[tuple[str, ...]]:
    """Every chain of field names the expression reads from the root document.

    ``work_item.kind == 'x' && contains(labels, 'y')`` gives ``[("work_item", "kind"),
    ("labels",)]``. Only maximal chains are listed (``work_item.kind`` implies ``work_item``), in
    order of first appearance. Fields read relative to projected elements (``labels[?@ == 'x']``,
    ``items[*].name``, ``*.x``, ``&name`` in ``sort_by(items, &name)``) are not root paths; a
    pipe's right side reads the left side's result, so ``work_item | kind`` reads
    ``("work_item", "kind")`` while ``items[0] | name`` reads only ``("items",)``. Either operand
    of ``||`` and any argument of ``not_null`` can be the value, so ``(a || b).c`` reads
    ``("a", "c")`` and ``("b", "c")``; ``(a && b).c`` reads ``("a",)`` and ``("b", "c")`` (a
    falsy ``a``, the only one ``&&`` returns, has no fields to read).
    """
    walker = _Walker()
    walker.walk(ast, ((),))
    # Every prefix of a found chain was found on the way to it, so a chain is maximal exactly
    # when no found chain has it as its parent (one pass, instead of comparing all pairs).
    parents = {path[:-1] for path in walker.found}
    return [path for path in walker.found if path and path not in parents]


def _union(*chains: _Chains) -> _Chains:
    """The chains of every group, in order, without repeats, at most ``MAX_ALTERNATIVES``."""
    merged: dict[tuple[str, ...], None] = {}
    for group in chains:
        for chain in group:
            if len(merged) >= MAX_ALTERNATIVES:
                return tuple(merged)
            merged[chain] = None
    return tuple(merged)


class _Walker:
    """``walk(node, cur)``: the chains ``node``'s value is read from, given that its current
    value is read from the chains ``cur``; every field chain met is added to ``found``."""

    def __init__(self) -> None:
        self.found: dict[tuple[str, ...], None] = {}

    def walk(self, node: Mapping[str, Any], cur: _Chains) -> _Chains:
        node_type = node["type"]
        children = node.get("children", [])
        if node_type == "field":
            out = tuple((*chain, node["value"]) for chain in cur if len(chain) < MAX_DEPTH)
            self.found.update(dict.fromkeys(out))
            return out
        if node_type in ("subexpression", "index_expression", "pipe"):
            for child in children:
                cur = self.walk(child, cur)
            return cur
        if node_type in ("current", "identity"):
            return cur
        if node_type == "or_expression":  # either operand can be the value
            return _union(self.walk(children[0], cur), self.walk(children[1], cur))
        if node_type == "and_expression":  # the left operand is the value only when it is falsy,
            self.walk(children[0], cur)  # and then nothing can be read from it
            return self.walk(children[1], cur)
        if node_type == "key_val_pair":
            return self.walk(children[0], cur)
        if node_type == "function_expression":
            results = [self.walk(child, cur) for child in children]
            return _union(*results) if node["value"] == "not_null" else ()
        return self.elements(node_type, children, cur)

    def elements(self, node_type: str, children: list[Any], cur: _Chains) -> _Chains:
        """Nodes whose value is not a field chain of the root."""
        if node_type in ("projection", "value_projection", "filter_projection", "expref"):
            # The first child of a projection reads from `cur`; the rest (and an expref's
            # expression) read from projected elements, never from the root.
            first, *rest = children
            self.walk(first, () if node_type == "expref" else cur)
            for child in rest:
                self.walk(child, ())
            return ()
        # index, slice, literal, comparator, not_expression, multi_select_*, flatten and
        # anything new: the children are read relative to the same node.
        for child in children:
            if isinstance(child, Mapping):
                self.walk(child, cur)
        return ()
