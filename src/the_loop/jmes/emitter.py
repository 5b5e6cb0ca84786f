"""The emitter: turns an AST into the source of a Python function, one node compiler per node type.

``Emitter`` holds what every node compiler needs (fresh names, constants, evaluation order,
JMESPath truth) and dispatches each node, in ``expr``, through the table it is given:
``nodes.NODES``, which names the function compiling each node type (``nodes.py`` for paths,
comparisons, logic and projections, ``calls.py`` for function calls). ``build(ast)`` returns the
evaluator and its source (``api.Compiler`` is the entry point); ``batch.py`` drives the same
emitter over many expressions into one function.

Constants are globals of the generated code, not part of its source, so expressions that differ
only in their literals and field names (``work_item.kind == 'a'``, ``work_item.ref == 'b'``)
generate the same source and share one code object (``CODE_CACHE``): compiling a policy costs
little more than parsing it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from the_loop.jmes.ir import (
    MAX_DEPTH,
    MAX_LOOPS,
    Fn,
    Node,
    Unsupported,
    Val,
    pending,
)
from the_loop.jmes.jtypes import ANY, K_NUM, K_STR, NULL, NUM, jtypes_of
from the_loop.jmes.library import Library
from the_loop.jmes.semantics import truthy

__all__ = ["CODE_CACHE", "Binder", "Emitter", "NodeCompiler"]

#: Compiled code objects by source, shared by every expression of the same shape.
CODE_CACHE: dict[str, Any] = {}
CODE_CACHE_SIZE = 4096
_MAX_INLINE_INT = 2**63

#: A node compiler: ``compile(emitter, node, cur, fn)`` is the value of ``node`` applied to the
#: simple value ``cur``, its statements emitted into ``fn``.
NodeCompiler = Callable[["Emitter", Node, Val, Fn], Val]
#: Binds a root field chain (or a prefix of it) to a value: (value, names covered), or None.
Binder = Callable[[tuple[str, ...], Fn], "tuple[Val, int] | None"]

class Emitter:
    """Generates the Python source of one expression (or, driven by ``batch.py``, of many).

    ``optimistic`` code reads fields with a bare ``value.get(key)``: fast, and exact as long as
    every value it reads a field from has a ``get`` (is an object). When one does not (null, a
    list, a string ...) it raises AttributeError, and the evaluation is redone from the start by
    the guarded (non-optimistic) code, which reads fields exactly like the reference interpreter.
    Evaluation is pure, so doing it twice is unobservable.

    ``inline_literals`` writes strings and finite numbers into the source (for a function that
    is compiled once, not shared); ``bind`` gives values for root field chains read elsewhere
    (``batch.py`` reads them once, straight from the root object). ``nodes`` maps each node
    type to its compiler (``nodes.NODES``).
    """

    def __init__(
        self,
        library: Library,
        nodes: Mapping[str, NodeCompiler],
        field_types: Mapping[str, str] | None,
        *,
        optimistic: bool = False,
        inline_literals: bool = False,
        bind: Binder | None = None,
    ) -> None:
        self.library = library
        self.nodes = nodes
        self.optimistic = optimistic
        self.field_types = dict(field_types or {})
        self.inline_literals = inline_literals
        self.binder = bind
        self.globals: dict[str, Any] = {}
        self.defs: list[str] = []
        self.counter = 0  # globals and helper functions: unique in the whole source
        self.local_counter = 0  # temporaries: see reset_locals

    # -- names and constants ----------------------------------------------------------------

    def name(self, prefix: str) -> str:
        """A fresh name: ``_``-prefixed ones are unique in the source, others in a function."""
        if prefix.startswith("_"):
            self.counter += 1
            return f"{prefix}{self.counter}"
        self.local_counter += 1
        return f"{prefix}{self.local_counter}"

    def reset_locals(self) -> None:
        """Temporaries may be reused from here on (the next condition of a batch)."""
        self.local_counter = 0

    def const(self, value: Any) -> Val:
        """A literal. Only null/true/false are written into the source (and, with
        ``inline_literals``, strings and finite numbers, a number in parentheses so that
        ``(0).__class__`` and ``-(1)`` stay valid Python); other constants are globals."""
        if value is None or value is True or value is False:
            return Val(repr(value), jtypes_of(value), value)
        if self.inline_literals:
            cls = value.__class__
            if cls is str:
                return Val(repr(value), K_STR, value)
            if (cls is int and -_MAX_INLINE_INT < value < _MAX_INLINE_INT) or (
                cls is float and math.isfinite(value)
            ):
                return Val(f"({value!r})", K_NUM, value)
        return Val(self.global_("_k", value), jtypes_of(value), value)

    def global_(self, prefix: str, value: Any) -> str:
        name = self.name(prefix)
        self.globals[name] = value
        return name

    def bind(self, path: tuple[str, ...], fn: Fn) -> tuple[Val, int] | None:
        """A value for the root field chain ``path`` (or a prefix of it) and how many names it
        covers, or None to read the fields from the root as usual."""
        return None if self.binder is None else self.binder(path, fn)

    # -- dispatch and building ----------------------------------------------------------------

    def expr(self, node: Node, cur: Val, fn: Fn) -> Val:
        """Compile ``node`` applied to ``cur`` (always a simple value)."""
        if fn.loops >= MAX_LOOPS or fn.depth >= MAX_DEPTH:
            return self.hoist(node, cur, fn)
        compiler = self.nodes.get(node["type"])
        if compiler is None:
            raise Unsupported(f"unsupported node type {node['type']!r}")
        return compiler(self, node, cur, fn)

    def build(
        self, ast: Node, deoptimize: Callable[[Any], Any] | None = None
    ) -> tuple[Callable[[Any], Any], str]:
        """The evaluator for ``ast`` (optimistic code calls ``deoptimize(data)`` on errors)."""
        main = Fn("_jp_main", "data")
        result = self.expr(ast, Val("data", ANY, root=True), main)
        handler = "_deoptimize(data)" if self.optimistic else ""
        self.defs.append(main.source(result.code, on_attribute_error=handler))
        source = "\n".join(self.defs)
        namespace = {**self.library.helpers, **self.globals, "_deoptimize": deoptimize}
        code = CODE_CACHE.get(source)
        if code is None:
            code = compile(source, "<jmespath>", "exec")
            if len(CODE_CACHE) >= CODE_CACHE_SIZE:
                CODE_CACHE.clear()
            CODE_CACHE[source] = code
        exec(code, namespace)
        function: Callable[[Any], Any] = namespace["_jp_main"]
        return function, source

    # -- what node compilers share ----------------------------------------------------------

    def in_order(self, items: list[tuple[Node, Val]], fn: Fn) -> list[Val]:
        """Compile several nodes evaluated left to right; their values may be embedded later.

        When a node emits statements, the pending (not yet evaluated) values of the nodes
        before it are bound to names right where they were produced, so evaluation order (and
        hence which error is raised first) is exactly the reference's.
        """
        values: list[Val] = []
        marks: list[tuple[int, int]] = []
        for node, cur in items:
            before = len(fn.lines)
            value = self.expr(node, cur, fn)
            if len(fn.lines) > before:
                for i in reversed(range(len(values))):
                    if not values[i].simple:
                        t = self.name("t")
                        position, depth = marks[i]
                        fn.lines.insert(position, "    " * depth + f"{t} = {values[i].code}")
                        values[i] = values[i]._replace(code=t, simple=True)
            values.append(value)
            marks.append((len(fn.lines), fn.depth))
        return values

    def simple(self, v: Val, fn: Fn) -> Val:
        """``v`` as a name (bound here) unless it already is simple."""
        if v.simple:
            return v
        t = self.name("t")
        fn.emit(f"{t} = {v.code}")
        return v._replace(code=t, simple=True)

    def hoist(self, node: Node, cur: Val, fn: Fn) -> Val:
        """Compile ``node`` into a function of its own (bounds nesting in generated code)."""
        sub = Fn(self.name("_h"), "c")
        value = self.expr(node, cur._replace(code="c", simple=True), sub)
        self.defs.append(sub.source(value.code))
        return pending(f"{sub.name}({cur.code})", value.jtypes)

    def truth(self, v: Val, fn: Fn) -> str:
        """A Python condition equivalent to the JMESPath truth of ``v`` (embeds it once)."""
        if v.is_literal:
            return repr(truthy(v.literal))
        if NUM not in v.jtypes:
            return v.code  # Python and JMESPath truth agree on every other type
        if v.jtypes == K_NUM:  # numbers are always true; a pending value is still evaluated
            return "True" if v.simple else f"({v.code} is not None)"
        c = self.simple(v, fn).code
        return f"({c} or ({c} == 0 and {c} is not False))"

    def collect(self, fn: Fn, target: str, v: Val) -> None:
        """``target.append(v)`` unless v is null (projections drop nulls)."""
        if v.is_literal and v.literal is None:
            return
        if NULL in v.jtypes:
            v = self.simple(v, fn)
            with fn.block(f"if {v.code} is not None:"):
                fn.emit(f"{target}.append({v.code})")
        else:
            fn.emit(f"{target}.append({v.code})")
