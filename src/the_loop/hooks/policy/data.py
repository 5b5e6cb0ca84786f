"""Policy data: the named values of a folder's `data/*.yaml`, read as `data.<name>` by rules.

Each data file is a mapping of names to values (lists, mappings, strings, numbers, booleans);
their names together form `data`, and a name given in two files is a load error naming both.
Data is read through the rule files' loader (same bounds, no links) and checked value by
value. An expression reads it as constants: `PolicyData.rewrite` replaces each read of
`data…` with a literal before the expression is type-checked and compiled, so the checker
knows `data.maintainers` is a list of strings and the compiled code is the code of the
literal. A path starts reading the data wherever a path can start (at the top, inside a
filter, in a function's arguments); `x.data` and `items[*].data` stay ordinary fields.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from the_loop import yamlsafe
from the_loop.errors import ExpressionError
from the_loop.hooks.engine.points import closest
from the_loop.hooks.policy.files import DATA_FOLDER, Snapshot, Unloadable, load_yaml

__all__ = ["ROOT", "PolicyData", "check_value", "read_data", "reads_context", "reads_data"]

#: The root name under which expressions read the policy data.
ROOT = "data"
#: The most bytes a policy folder's data files may hold together (each file is bounded by the
#: YAML loader too).
MAX_DATA_BYTES = yamlsafe.MAX_BYTES
#: A data name, readable as `data.<name>` without quotes.
NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: Nodes whose first child reads from the current value and the rest from its result.
_LEFT_FIRST = ("index_expression", "projection", "value_projection", "filter_projection")
#: The key a substituted literal carries: the names it was read by under `data`, so a
#: message shows `data.maintainers` (`exprtext.show`), not the list.
MARK = "data_path"


@dataclass(frozen=True)
class PolicyData:
    """The folder's data: each name's value, and the file that defined it."""

    values: Mapping[str, Any] = field(default_factory=dict)
    origin: Mapping[str, str] = field(default_factory=dict)

    def with_values(self, override: Mapping[str, Any]) -> PolicyData:
        """This data with some names' values replaced (a test case's `data:`)."""
        return PolicyData({**self.values, **override},
                          {**self.origin, **dict.fromkeys(override, "a test case")})

    def rewrite(self, text: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
        """The AST rewrite (`Compiler.compile_expression(rewrite=…)`) for expression `text`:
        every read of `data…` becomes the literal it reads; raises `ExpressionError` for a
        name the data does not hold, with the closest one."""
        if ROOT not in text and "\\" not in text:  # no field can be named `data` (an
            return _unchanged  # escape in a quoted name could spell it: walk those)
        return lambda ast: _Rewriter(self, text).walk(ast, True)

    def missing(self, path: tuple[str, ...]) -> str | None:
        """Why `data.<path>` reads nothing, or None when it reads a value."""
        value: Any = self.values
        for depth, key in enumerate(path):
            where = ".".join((ROOT, *path[:depth]))
            if isinstance(value, dict):
                if key not in value:
                    return self._unknown(where, key, [str(k) for k in value], depth)
                value = value[key]
            else:
                return (f"{where} is {_a_type_name(value)}, which has no fields; read {where} "
                        "itself")
        return None

    def _unknown(self, where: str, key: str, names: list[str], depth: int) -> str:
        if depth == 0 and not self.values:
            return (f"the policy folder has no data: put `{key}: …` in a file of its "
                    f"{DATA_FOLDER}/ folder (data/*.yaml) to read it as {ROOT}.{key}")
        hint = closest(key, names)
        said = f"{where} has no {key!r}"
        said += f"; did you mean {where + '.' + hint!r}?" if hint else "."
        shown = ", ".join(names[:20]) + (", …" if len(names) > 20 else "")
        holds = f" {where} holds: {shown}" if names else f" {where} is empty"
        if depth == 0:
            files = sorted(set(self.origin.values()))
            holds += f" (from {', '.join(files)})" if files else ""
        return said + holds


def _a_type_name(value: Any) -> str:
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    return "a number"


def _unchanged(ast: dict[str, Any]) -> dict[str, Any]:
    return ast


class _Rewriter:
    """Copies an AST with every read of the data replaced by a literal (`at_start`: a path
    may start at this node, so a field named `data` there reads the policy data)."""

    def __init__(self, data: PolicyData, text: str) -> None:
        self.data = data
        self.text = text

    def walk(self, node: dict[str, Any], at_start: bool) -> dict[str, Any]:
        node_type = node.get("type")
        children = node.get("children") or []
        if node_type == "field" and at_start and node.get("value") == ROOT:
            return self._literal(())
        if node_type == "subexpression":
            return self._chain(node, at_start)
        if not children:
            return node
        new = [self.walk(child, self._starts(node_type, i, at_start)) if isinstance(child, dict)
               else child for i, child in enumerate(children)]
        if all(a is b for a, b in zip(new, children, strict=True)):
            return node
        return {**node, "children": new}

    @staticmethod
    def _starts(node_type: Any, index: int, at_start: bool) -> bool:
        """Whether a path may start at child `index` of a `node_type` node."""
        if node_type in ("index_expression", "pipe", "projection", "value_projection"):
            return at_start if index == 0 else False
        if node_type == "filter_projection":  # [left, right, condition]
            return at_start if index == 0 else index == 2
        return True if node_type in ("function_expression", "expref") else at_start

    def _chain(self, node: dict[str, Any], at_start: bool) -> dict[str, Any]:
        """`data.a.b` (one subexpression node of fields) folded into one literal; in
        `data.a[0]` and `data.a[*].b` the `a` read from the data becomes the literal."""
        children = node["children"]
        new = [self.walk(children[0], at_start)]
        for child in children[1:]:
            head = new[-1]
            if MARK in head and child.get("type") == "field":
                new[-1] = self._step(head, child)
            elif MARK in head and child.get("type") in _LEFT_FIRST and \
                    child["children"][0].get("type") == "field":
                first = self._step(head, child["children"][0])
                rest = [self.walk(c, self._starts(child["type"], i + 1, False))
                        for i, c in enumerate(child["children"][1:])]
                new[-1] = {**child, "children": [first, *rest]}
            else:
                new.append(self.walk(child, False))
        if len(new) == 1:
            return new[0]
        if len(new) == len(children) and all(a is b for a, b in zip(new, children, strict=True)):
            return node
        return {**node, "children": new}

    def _step(self, head: dict[str, Any], field_node: dict[str, Any]) -> dict[str, Any]:
        return self._literal((*head[MARK], str(field_node["value"])))

    def _literal(self, path: tuple[str, ...]) -> dict[str, Any]:
        problem = self.data.missing(path)
        shown = ".".join((ROOT, *path))
        if problem is not None:
            column = _column(self.text, shown)
            at = f" at column {column}" if column else ""
            raise ExpressionError("data", f"reads {shown!r}{at}, but {problem}", column=column)
        value: Any = self.data.values
        for key in path:
            value = value[key]
        return {"type": "literal", "value": value, "children": [], MARK: list(path)}


def reads_data(node: Any) -> bool:
    """Whether a rewritten AST read the policy data somewhere."""
    if not isinstance(node, Mapping):
        return False
    return MARK in node or any(reads_data(c) for c in node.get("children") or [])


def reads_context(node: Mapping[str, Any], at_start: bool = True) -> bool:
    """Whether the (rewritten) expression may read the context: a field, `@` or an identity
    where a path starts. False means its value is a constant (data and literals only)."""
    node_type = node.get("type")
    if at_start and node_type in ("field", "current", "identity"):
        return True
    children = [c for c in node.get("children") or [] if isinstance(c, Mapping)]
    if node_type == "subexpression":
        return reads_context(children[0], at_start) or any(
            reads_context(c, False) for c in children[1:])
    return any(reads_context(c, _Rewriter._starts(node_type, i, at_start))
               for i, c in enumerate(children))


def _column(text: str, dotted: str) -> int:
    names = dotted.split(".")
    pattern = r"\s*\.\s*".join(re.escape(n) for n in names)
    m = re.search(rf"(?<![A-Za-z0-9_.'`]){pattern}(?![A-Za-z0-9_])", text)
    return m.start() + 1 if m else 0


def check_value(value: Any, where: str) -> str | None:
    """Why `value` (at `where`) cannot be policy data, or None: data is JSON without null,
    mappings keyed by strings, numbers finite."""
    if isinstance(value, bool | str | int):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else (
            f"{where}: {value} is not a finite number; write a number or quote it as text")
    if value is None:
        return (f"{where}: empty (null); give it a value ([] for an empty list, '' for an "
                "empty string) or remove it")
    if isinstance(value, list):
        for i, item in enumerate(value):
            problem = check_value(item, f"{where}[{i}]")
            if problem:
                return problem
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return (f"{where}: the key {key!r} is not a string; quote it "
                        f"(\"{key}\": …)")
            problem = check_value(item, f"{where}.{key}")
            if problem:
                return problem
        return None
    return f"{where}: {type(value).__name__} values are not data; write it as a string"


def read_data(snap: Snapshot) -> tuple[PolicyData, list[str]]:
    """The data of a policy folder's snapshot, and one error per problem (all of them);
    the snapshot's refused entries are the caller's to report."""
    errors: list[str] = []
    values: dict[str, Any] = {}
    origin: dict[str, str] = {}
    if snap.data is None:
        return PolicyData(), errors
    total = sum(len(read.body) for read in snap.data)
    if total > MAX_DATA_BYTES:
        errors.append(f"{snap.folder / DATA_FOLDER}: the data files hold {total:,} bytes; at "
                      f"most {MAX_DATA_BYTES:,} in all (data is compiled into every rule "
                      "that reads it); keep large lists out of the policy")
        return PolicyData(), errors
    for read in snap.data:
        where = str(read.path)
        try:
            document = load_yaml(read)
        except Unloadable as exc:
            errors.append(str(exc))
            continue
        if not isinstance(document, dict):
            errors.append(f"{where}: expected a mapping of names to values (`maintainers: "
                          f"[alice, bob]`), got {_said(document)}")
            continue
        for name, value in document.items():
            problem = _name_problem(name, where, origin)
            problem = problem or check_value(value, f"{where} → {name}")
            if problem:
                errors.append(problem)
                continue
            values[name] = value
            origin[name] = where
    return PolicyData(values, origin), errors


def _said(document: Any) -> str:
    if document is None:
        return "an empty file"
    return f"{type(document).__name__} {str(document)[:40]!r}"


def _name_problem(name: Any, where: str, origin: dict[str, str]) -> str | None:
    if not isinstance(name, str) or not NAME_RE.match(name):
        return (f"{where}: the name {name!r} cannot be read as data.<name>; a data name is "
                "letters, digits and _, starting with a letter or _ (maintainers, "
                "allowed_repositories)")
    if name in origin:
        return (f"{where}: {name!r} is defined in {origin[name]} too; a data name is defined "
                "once across the data files; remove one")
    return None
