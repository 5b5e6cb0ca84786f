"""The intermediate representation: compiled values (``Val``) inside generated functions (``Fn``).

The emitter turns each AST node (``Node``, jmespath's parsed dicts) into a ``Val``: a Python
expression (``code``) with the JMESPath types it may have at run time (``jtypes``), and the literal
itself when it is one. Statements a node needs (a loop, a temporary) go into the ``Fn`` being
generated, at the current indentation. ``Unsupported`` says the compiler does not handle a
node: the caller falls back to the reference interpreter for that expression.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, NamedTuple

from the_loop.jmes.jtypes import JTypes

__all__ = [
    "MAX_DEPTH", "MAX_LOOPS", "NODE_TYPES", "NO_LITERAL", "Fn", "Node", "Unsupported", "Val",
    "pending",
]

Node = Mapping[str, Any]
#: Every node type jmespath's parser builds (the ``type`` of the dicts ``jmespath.ast`` makes).
#: Each walker over the AST dispatches through a table with one entry per type (the emitter's is
#: ``nodes.NODES``); a test checks this set against the parser and every walker's table against it.
NODE_TYPES = frozenset((
    "and_expression", "comparator", "current", "expref", "field", "filter_projection",
    "flatten", "function_expression", "identity", "index", "index_expression", "key_val_pair",
    "literal", "multi_select_dict", "multi_select_list", "not_expression", "or_expression",
    "pipe", "projection", "slice", "subexpression", "value_projection",
))

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
    jtypes: JTypes
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




def pending(code: str, may_be: JTypes) -> Val:
    """A value that is an expression to evaluate once (parenthesised, so it embeds anywhere)."""
    return Val(f"({code})", may_be, simple=False)
