"""`show(node)`: a JMESPath AST printed back as an expression a person can read and paste.

Messages quote sub-expressions this way (a type error names `labels == 'draft'`, `--explain`
names the part of a condition that was false). Strings come back in single quotes, other
literals in backquotes, so what is shown is also valid JMESPath.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

OPS = {"eq": "==", "ne": "!=", "lt": "<", "lte": "<=", "gt": ">", "gte": ">="}
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: How tightly each node binds (higher binds tighter); a child looser than its parent is
#: printed in parentheses.
_BINDING = {"pipe": 1, "or_expression": 2, "and_expression": 3, "comparator": 5,
            "projection": 6, "filter_projection": 6, "value_projection": 6, "flatten": 6,
            "not_expression": 7}


def literal(value: Any) -> str:
    """A value as JMESPath source: 'text' for a string, `json` for anything else."""
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return "`" + json.dumps(value, ensure_ascii=False) + "`"


def show(node: Mapping[str, Any]) -> str:
    """The expression `node` was parsed from (up to spacing and parentheses)."""
    return SHOW.get(str(node.get("type")), _unknown)(node, node.get("children", []))


#: Prints a node given the node and its children.
Printer = Callable[[Mapping[str, Any], Any], str]


def _field(node: Mapping[str, Any], ch: Any) -> str:
    name = str(node["value"])
    return name if _NAME.match(name) else json.dumps(name, ensure_ascii=False)


def _literal(node: Mapping[str, Any], ch: Any) -> str:
    path = node.get("data_path")  # a read of the policy data, replaced by its value
    if isinstance(path, list):
        return ".".join(["data", *(_field({"value": name}, ()) for name in path)])
    return literal(node["value"])


def _current(node: Mapping[str, Any], ch: Any) -> str:
    return "@"


def _subexpression(node: Mapping[str, Any], ch: Any) -> str:
    return ".".join(_wrap(c, 9) for c in ch)


def _comparator(node: Mapping[str, Any], ch: Any) -> str:
    return f"{_wrap(ch[0], 6)} {OPS[node['value']]} {_wrap(ch[1], 6)}"


def _and(node: Mapping[str, Any], ch: Any) -> str:
    return f"{_wrap(ch[0], 3)} && {_wrap(ch[1], 4)}"


def _or(node: Mapping[str, Any], ch: Any) -> str:
    return f"{_wrap(ch[0], 2)} || {_wrap(ch[1], 3)}"


def _not(node: Mapping[str, Any], ch: Any) -> str:
    # `!a.b` reads `(!a).b`: a chain under `!` keeps its parentheses (a bool field of a
    # record, `!(work_item.fork)`, is the first such chain the catalog has).
    if ch[0].get("type") in ("subexpression", "index_expression"):
        return f"!({show(ch[0])})"
    return "!" + _wrap(ch[0], 8)


def _pipe(node: Mapping[str, Any], ch: Any) -> str:
    return f"{show(ch[0])} | {show(ch[1])}"


def _function(node: Mapping[str, Any], ch: Any) -> str:
    return f"{node['value']}({', '.join(show(c) for c in ch)})"


def _expref(node: Mapping[str, Any], ch: Any) -> str:
    return "&" + show(ch[0])


def _index_expression(node: Mapping[str, Any], ch: Any) -> str:
    return _wrap(ch[0], 9) + _bracket(ch[1])


def _index_or_slice(node: Mapping[str, Any], ch: Any) -> str:
    """Printed by its index_expression (`a[0]`, `a[1:2]`); on its own, the brackets."""
    return _bracket(node)


def _flatten(node: Mapping[str, Any], ch: Any) -> str:
    return _wrap(ch[0], 9) + "[]"


def _projection(node: Mapping[str, Any], ch: Any) -> str:
    left = ch[0]
    sliced = left.get("type") == "index_expression" and \
        left["children"][1].get("type") == "slice"
    if left.get("type") == "flatten":
        base = _wrap(left["children"][0], 9) + "[]"
    elif sliced:
        base = show(left)
    else:
        base = _wrap(left, 9) + "[*]"
    return base + _tail(ch[1])


def _value_projection(node: Mapping[str, Any], ch: Any) -> str:
    return _wrap(ch[0], 9) + ".*" + _tail(ch[1])


def _filter_projection(node: Mapping[str, Any], ch: Any) -> str:
    return f"{_wrap(ch[0], 9)}[?{show(ch[2])}]" + _tail(ch[1])


def _multi_select_list(node: Mapping[str, Any], ch: Any) -> str:
    return "[" + ", ".join(show(c) for c in ch) + "]"


def _multi_select_dict(node: Mapping[str, Any], ch: Any) -> str:
    return "{" + ", ".join(show(c) for c in ch) + "}"


def _key_val_pair(node: Mapping[str, Any], ch: Any) -> str:
    return f"{node['value']}: {show(ch[0])}"


def _unknown(node: Mapping[str, Any], ch: Any) -> str:
    return "…"


#: How each node type is printed: the one dispatch table (`show`).
SHOW: dict[str, Printer] = {
    "field": _field,
    "literal": _literal,
    "identity": _current,
    "current": _current,
    "subexpression": _subexpression,
    "comparator": _comparator,
    "and_expression": _and,
    "or_expression": _or,
    "not_expression": _not,
    "pipe": _pipe,
    "function_expression": _function,
    "expref": _expref,
    "index_expression": _index_expression,
    "index": _index_or_slice,
    "slice": _index_or_slice,
    "flatten": _flatten,
    "projection": _projection,
    "value_projection": _value_projection,
    "filter_projection": _filter_projection,
    "multi_select_list": _multi_select_list,
    "multi_select_dict": _multi_select_dict,
    "key_val_pair": _key_val_pair,
}


def _bracket(node: Mapping[str, Any]) -> str:
    if node.get("type") == "index":
        return f"[{node['value']}]"
    if node.get("type") == "slice":
        parts = ["" if v is None else str(v) for v in node["children"]]
        return "[" + ":".join(parts[:2] if parts[2] == "" else parts) + "]"
    return "[…]"


def _tail(node: Mapping[str, Any]) -> str:
    if node.get("type") == "identity":
        return ""
    text = show(node)
    return text if text.startswith("[") else "." + text


def _wrap(node: Mapping[str, Any], parent: int) -> str:
    text = show(node)
    binding = _BINDING.get(str(node.get("type")), 10)
    return f"({text})" if binding < parent else text
