"""The codegen's plumbing: names, literals as globals, evaluation order, and building the function.

``CodegenBase`` holds what every node compiler needs: fresh names, constants (as globals of the
generated code, so expressions of one shape share a code object), ``in_order`` (values of several
sub-expressions kept in the reference's evaluation order), ``truth`` (JMESPath truth as a Python
condition) and ``build`` (source → ``compile`` → ``exec`` → the evaluator). The node compilers
live in ``codegen.py`` (``Codegen``) and ``calls.py`` (function calls).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from the_loop.hooks.policy.jmes.runtime import RUNTIME
from the_loop.hooks.policy.jmes.semantics import truthy
from the_loop.hooks.policy.jmes.values import (
    ANY,
    CODE_CACHE,
    CODE_CACHE_SIZE,
    K_NUM,
    MAX_DEPTH,
    MAX_LOOPS,
    NULL,
    NUM,
    Fn,
    Node,
    Unsupported,
    Val,
    kind_of,
    pending,
)

__all__ = ["CodegenBase"]


class CodegenBase:
    """Generates the Python source of one expression (the node compilers are in subclasses).

    ``optimistic`` code reads fields with a bare ``value.get(key)``: fast, and exact as long as
    every value it reads a field from has a ``get`` (is an object). When one does not (null, a
    list, a string ...) it raises AttributeError, and the evaluation is redone from the start by
    the guarded (non-optimistic) code, which reads fields exactly like the reference interpreter.
    Evaluation is pure, so doing it twice is unobservable.
    """

    def __init__(self, field_types: Mapping[str, str] | None, *, optimistic: bool = False) -> None:
        self.optimistic = optimistic
        self.field_types = dict(field_types or {})
        self.globals: dict[str, Any] = {}
        self.defs: list[str] = []
        self.counter = 0

    # -- plumbing ---------------------------------------------------------------------------

    def name(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def const(self, value: Any) -> Val:
        """A literal. Only null/true/false are written into the source: every other constant
        is a global, so expressions that differ only in their literals and field names
        generate the same source and share one compiled code object (``CODE_CACHE``)."""
        if value is None or value is True or value is False:
            code = repr(value)
        else:
            code = self.global_("_k", value)
        return Val(code, kind_of(value), value)

    def global_(self, prefix: str, value: Any) -> str:
        name = self.name(prefix)
        self.globals[name] = value
        return name

    def bind(self, path: tuple[str, ...], fn: Fn) -> tuple[Val, int] | None:
        """A value for the root field chain ``path`` (or a prefix of it) and how many names it
        covers, or None to read the fields from the root as usual. ``batch.py`` binds them to
        values read once, straight from the root object."""
        return None

    def build(
        self, ast: Node, deoptimize: Callable[[Any], Any] | None = None
    ) -> tuple[Callable[[Any], Any], str]:
        """The evaluator for ``ast`` (optimistic code calls ``deoptimize(data)`` on errors)."""
        main = Fn("_jp_main", "data")
        result = self.expr(ast, Val("data", ANY, root=True), main)
        handler = "_deoptimize(data)" if self.optimistic else ""
        self.defs.append(main.source(result.code, on_attribute_error=handler))
        source = "\n".join(self.defs)
        namespace = {**RUNTIME, **self.globals, "_deoptimize": deoptimize}
        code = CODE_CACHE.get(source)
        if code is None:
            code = compile(source, "<jmespath>", "exec")
            if len(CODE_CACHE) >= CODE_CACHE_SIZE:
                CODE_CACHE.clear()
            CODE_CACHE[source] = code
        exec(code, namespace)
        function: Callable[[Any], Any] = namespace["_jp_main"]
        return function, source

    def expr(self, node: Node, cur: Val, fn: Fn) -> Val:
        """Compile ``node`` applied to ``cur`` (always a simple value)."""
        if fn.loops >= MAX_LOOPS or fn.depth >= MAX_DEPTH:
            return self.hoist(node, cur, fn)
        handler = getattr(self, "n_" + node["type"], None)
        if handler is None:
            raise Unsupported(f"unsupported node type {node['type']!r}")
        result: Val = handler(node, cur, fn)
        return result

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
        return pending(f"{sub.name}({cur.code})", value.kind)

    def truth(self, v: Val, fn: Fn) -> str:
        """A Python condition equivalent to the JMESPath truth of ``v`` (embeds it once)."""
        if v.is_literal:
            return repr(truthy(v.literal))
        if NUM not in v.kind:
            return v.code  # Python and JMESPath truth agree on every other type
        if v.kind == K_NUM:  # numbers are always true; a pending value is still evaluated
            return "True" if v.simple else f"({v.code} is not None)"
        c = self.simple(v, fn).code
        return f"({c} or ({c} == 0 and {c} is not False))"

    def collect(self, fn: Fn, target: str, v: Val) -> None:
        """``target.append(v)`` unless v is null (projections drop nulls)."""
        if v.is_literal and v.literal is None:
            return
        if NULL in v.kind:
            v = self.simple(v, fn)
            with fn.block(f"if {v.code} is not None:"):
                fn.emit(f"{target}.append({v.code})")
        else:
            fn.emit(f"{target}.append({v.code})")

