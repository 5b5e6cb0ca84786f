"""`show(node)`: a JMESPath AST printed back as an expression a person can read and paste.

Messages quote sub-expressions this way (a type error names `labels == 'draft'`, `--explain`
names the part of a condition that was false). Strings come back in single quotes, other
literals in backquotes, so what is shown is also valid JMESPath.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
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
    kind = node.get("type")
    children = node.get("children", [])
    if kind == "field":
        name = str(node["value"])
        return name if _NAME.match(name) else json.dumps(name, ensure_ascii=False)
    if kind == "literal":
        return literal(node["value"])
    if kind in ("identity", "current"):
        return "@"
    if kind == "subexpression":
        return ".".join(_wrap(c, 9) for c in children)
    if kind == "comparator":
        return f"{_wrap(children[0], 6)} {OPS[node['value']]} {_wrap(children[1], 6)}"
    if kind == "and_expression":
        return f"{_wrap(children[0], 3)} && {_wrap(children[1], 4)}"
    if kind == "or_expression":
        return f"{_wrap(children[0], 2)} || {_wrap(children[1], 3)}"
    if kind == "not_expression":
        return "!" + _wrap(children[0], 8)
    if kind == "pipe":
        return f"{show(children[0])} | {show(children[1])}"
    if kind == "function_expression":
        return f"{node['value']}({', '.join(show(c) for c in children)})"
    if kind == "expref":
        return "&" + show(children[0])
    if kind == "index_expression":
        return _wrap(children[0], 9) + _bracket(children[1])
    if kind == "flatten":
        return _wrap(children[0], 9) + "[]"
    if kind == "projection":
        left = children[0]
        sliced = left.get("type") == "index_expression" and \
            left["children"][1].get("type") == "slice"
        if left.get("type") == "flatten":
            base = _wrap(left["children"][0], 9) + "[]"
        elif sliced:
            base = show(left)
        else:
            base = _wrap(left, 9) + "[*]"
        return base + _tail(children[1])
    if kind == "value_projection":
        return _wrap(children[0], 9) + ".*" + _tail(children[1])
    if kind == "filter_projection":
        return f"{_wrap(children[0], 9)}[?{show(children[2])}]" + _tail(children[1])
    if kind == "multi_select_list":
        return "[" + ", ".join(show(c) for c in children) + "]"
    if kind == "multi_select_dict":
        return "{" + ", ".join(f"{c['value']}: {show(c['children'][0])}" for c in children) + "}"
    return "…"


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
