"""The codegen's vocabulary: value kinds, a compiled value (``Val``), a generated function (``Fn``).

A *kind* is the set of JMESPath types a value may have at run time (``kinds(STR, NULL)``); the
codegen specialises when a kind proves the outcome (``len(x)`` for a string). ``DECLARED`` maps
the ``field_types`` a caller promises to kinds, ``RETURNS`` gives each built-in's result kind.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, NamedTuple

__all__ = [
    "ANY", "ARR", "BOOL", "CODE_CACHE", "CODE_CACHE_SIZE", "DECLARED", "EXPREF", "FIELD_TYPES",
    "K_ARR", "K_BOOL_NULL", "K_NULL", "K_NUM", "K_OBJ", "K_SIZED", "K_STR", "K_STR_ARR",
    "K_STR_NULL", "MAX_DEPTH", "MAX_LOOPS", "NO_LITERAL", "NULL", "NUM", "OBJ", "RETURNS", "STR",
    "Fn", "Kind", "Node", "Unsupported", "Val", "kind_of", "kinds", "pending",
]

#: The field types ``compile_expression(field_types=...)`` understands.
FIELD_TYPES = frozenset({"str", "bool", "int", "list[str]", "object"})


NULL, BOOL, NUM, STR, ARR, OBJ = "null", "boolean", "number", "string", "array", "object"
Kind = frozenset[str]
ANY: Kind = frozenset({NULL, BOOL, NUM, STR, ARR, OBJ})
EXPREF: Kind = frozenset({"expref"})


def kinds(*types: str) -> Kind:
    """The kind made of `types` (JMESPath type names)."""
    return frozenset(types)


K_NULL, K_NUM, K_STR, K_ARR, K_OBJ = (kinds(t) for t in (NULL, NUM, STR, ARR, OBJ))
K_BOOL_NULL, K_STR_NULL = kinds(BOOL, NULL), kinds(STR, NULL)
K_SIZED, K_STR_ARR = kinds(STR, ARR, OBJ), kinds(STR, ARR)


DECLARED: dict[str, Kind] = {
    "str": kinds(STR, NULL),
    "bool": kinds(BOOL, NULL),
    "int": kinds(NUM, NULL),
    "list[str]": kinds(ARR, NULL),
    "object": kinds(OBJ, NULL),
}

#: Result types of the built-in functions (by JMESPath type name).
RETURNS: dict[str, Kind] = {
    "abs": kinds(NUM),
    "avg": kinds(NUM, NULL),
    "ceil": kinds(NUM),
    "floor": kinds(NUM),
    "contains": kinds(BOOL),
    "ends_with": kinds(BOOL),
    "starts_with": kinds(BOOL),
    "join": kinds(STR),
    "keys": kinds(ARR),
    "values": kinds(ARR),
    "length": kinds(NUM),
    "map": kinds(ARR),
    "max": kinds(NUM, STR, NULL),
    "min": kinds(NUM, STR, NULL),
    "max_by": ANY,
    "min_by": ANY,
    "merge": kinds(OBJ),
    "reverse": kinds(ARR, STR),
    "sort": kinds(ARR),
    "sort_by": kinds(ARR),
    "sum": kinds(NUM),
    "to_array": kinds(ARR),
    "to_number": kinds(NUM, NULL),
    "to_string": kinds(STR),
    "type": kinds(STR, NULL),
}

MAX_LOOPS = 8  # nested loops in one generated function (CPython allows 20 blocks)
MAX_DEPTH = 40  # indentation levels in one generated function (CPython allows 100)


class Unsupported(Exception):
    """The compiler does not handle this expression: use the reference interpreter."""


class _NoLiteral:
    pass


NO_LITERAL: Any = _NoLiteral()


class Val(NamedTuple):
    """A compiled value: ``code`` is a Python expression.

    ``simple`` values (a name or a literal) can be repeated freely. Other values are expressions
    that must be evaluated exactly once, at the point where they were produced: a consumer either
    embeds them once (keeping the evaluation order) or binds them to a name first (``simple()``).
    """

    code: str
    kind: Kind
    literal: Any = NO_LITERAL
    root: bool = False
    simple: bool = True

    @property
    def is_literal(self) -> bool:
        return self.literal is not NO_LITERAL


class Fn:
    """One generated Python function."""

    def __init__(self, name: str, param: str) -> None:
        self.name = name
        self.param = param
        self.lines: list[str] = []
        self.depth = 1
        self.loops = 0

    def emit(self, line: str) -> None:
        self.lines.append("    " * self.depth + line)

    @contextmanager
    def block(self, header: str, *, loop: bool = False) -> Iterator[None]:
        self.emit(header)
        self.depth += 1
        self.loops += loop
        start = len(self.lines)
        try:
            yield
        finally:
            if len(self.lines) == start:
                self.emit("pass")
            self.depth -= 1
            self.loops -= loop

    def source(self, result: str, *, on_attribute_error: str = "") -> str:
        body = [*self.lines, f"    return {result}"]
        if on_attribute_error:
            body = ["    try:", *("    " + line for line in body)]
            body += ["    except AttributeError:", f"        return {on_attribute_error}"]
        return f"def {self.name}({self.param}):\n" + "\n".join(body) + "\n"


CODE_CACHE: dict[str, Any] = {}
CODE_CACHE_SIZE = 4096


def kind_of(value: Any) -> Kind:
    if value is None:
        return kinds(NULL)
    if isinstance(value, bool):
        return kinds(BOOL)
    if isinstance(value, (int, float)):
        return kinds(NUM)
    if isinstance(value, str):
        return kinds(STR)
    if isinstance(value, list):
        return kinds(ARR)
    if isinstance(value, dict):
        return kinds(OBJ)
    return ANY


Node = Mapping[str, Any]


def pending(code: str, kind: Kind) -> Val:
    """A value that is an expression to evaluate once (parenthesised, so it embeds anywhere)."""
    return Val(f"({code})", kind, simple=False)

