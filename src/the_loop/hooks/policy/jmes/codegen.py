"""The node compilers: one ``n_<type>`` method per node type of jmespath's AST.

``Codegen`` mirrors ``jmespath.visitor.TreeInterpreter`` node by node (same evaluation order,
same null propagation, same errors) and specialises where a value's kind proves the outcome the
same: a comparison with a string literal is a plain ``==``, a projection over a value known to
be a list skips the ``isinstance`` test, and so on. ``Codegen(...).build(ast)`` returns the
evaluator and its source; ``api.compile_expression`` is the public entry point.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import nullcontext

from the_loop.hooks.policy.jmes.calls import Calls
from the_loop.hooks.policy.jmes.semantics import ORDERING, ORDERING_PY, eq, get_index, truthy
from the_loop.hooks.policy.jmes.values import (
    ANY,
    ARR,
    BOOL,
    DECLARED,
    K_ARR,
    K_BOOL_NULL,
    K_NULL,
    K_NUM,
    K_OBJ,
    K_STR_NULL,
    NULL,
    NUM,
    OBJ,
    Fn,
    Node,
    Unsupported,
    Val,
    kinds,
    pending,
)

__all__ = ["Codegen"]


class Codegen(Calls):
    """Generates the Python source of one expression.

    ``optimistic`` code reads fields with a bare ``value.get(key)``: fast, and exact as long as
    every value it reads a field from has a ``get`` (is an object). When one does not (null, a
    list, a string ...) it raises AttributeError, and the evaluation is redone from the start by
    the guarded (non-optimistic) code, which reads fields exactly like the reference interpreter.
    Evaluation is pure, so doing it twice is unobservable.
    """

    # -- nodes ------------------------------------------------------------------------------

    def n_literal(self, node: Node, cur: Val, fn: Fn) -> Val:
        return self.const(node["value"])

    def n_current(self, node: Node, cur: Val, fn: Fn) -> Val:
        return cur

    n_identity = n_current

    def n_field(self, node: Node, cur: Val, fn: Fn) -> Val:
        key = node["value"]
        if cur.is_literal:
            return self.const(cur.literal.get(key) if isinstance(cur.literal, dict) else None)
        if OBJ not in cur.kind:
            return self.discard(cur, fn)
        if cur.root:
            bound = self.bind((key,), fn)
            if bound is not None:
                return bound[0]
        kind = ANY
        if cur.root and key in self.field_types:
            kind = DECLARED[self.field_types[key]]
        c, k = cur.code, self.global_("_k", key)
        if self.optimistic or cur.kind == K_OBJ:
            # Optimistic: a value without .get raises AttributeError, and the whole evaluation
            # is redone by the guarded code (see compile_expression).
            code = f"{c}.get({k})"
        else:
            code = f"{c}.get({k}) if {c}.__class__ is dict else _getf({c}, {k})"
        return pending(code, kind)

    def n_subexpression(self, node: Node, cur: Val, fn: Fn) -> Val:
        result = cur
        children: list[Node] = node["children"]
        if cur.root:  # a chain of fields from the root may be bound to one value
            lead = 0
            while lead < len(children) and children[lead]["type"] == "current":
                lead += 1
            names: list[str] = []
            for child in children[lead:]:
                if child["type"] != "field":
                    break
                names.append(child["value"])
            bound = self.bind(tuple(names), fn) if names else None
            if bound is not None:
                result, used = bound
                children = children[lead + used :]
        for child in children:
            if not (self.optimistic and child["type"] == "field"):
                result = self.simple(result, fn)  # an optimistic field embeds its operand once
            result = self.expr(child, result, fn)
        return result

    n_index_expression = n_subexpression
    n_pipe = n_subexpression

    def n_index(self, node: Node, cur: Val, fn: Fn) -> Val:
        i: int = node["value"]
        if cur.is_literal:
            return self.const(get_index(cur.literal, i))
        if ARR not in cur.kind:
            return self.const(None)
        c = cur.code
        fits = f"len({c}) > {i}" if i >= 0 else f"len({c}) >= {-i}"
        if cur.kind == K_ARR:
            return pending(f"{c}[{i}] if {fits} else None", ANY)
        code = f"({c}[{i}] if {fits} else None) if {c}.__class__ is list else _index({c}, {i})"
        return pending(code, ANY)

    def n_slice(self, node: Node, cur: Val, fn: Fn) -> Val:
        if ARR not in cur.kind or (cur.is_literal and not isinstance(cur.literal, list)):
            return self.const(None)
        parts = ["" if part is None else str(int(part)) for part in node["children"]]
        c = cur.code
        sliced = f"{c}[{':'.join(parts)}]"
        if cur.kind == K_ARR:
            return pending(sliced, kinds(ARR))
        return pending(f"{sliced} if isinstance({c}, list) else None", kinds(ARR, NULL))

    def n_comparator(self, node: Node, cur: Val, fn: Fn) -> Val:
        op: str = node["value"]
        a, b = self.in_order([(child, cur) for child in node["children"]], fn)
        if a.is_literal and b.is_literal:
            if op == "eq":
                return self.const(eq(a.literal, b.literal))
            if op == "ne":
                return self.const(not eq(a.literal, b.literal))
            return self.const(ORDERING[op](a.literal, b.literal))
        if op in ("eq", "ne"):
            return pending(self.equality(a, b, fn, negate=op == "ne"), kinds(BOOL))
        py = ORDERING_PY[op]
        if a.kind == K_NUM and b.kind == K_NUM:
            return pending(f"{a.code} {py} {b.code}", kinds(BOOL))
        if NUM not in a.kind or NUM not in b.kind:
            # Never both numbers: null (both sides were still evaluated, in order).
            for v in (a, b):
                if not v.simple:
                    fn.emit(v.code)
            return self.const(None)
        a = self.simple(a, fn)
        b = self.simple(b, fn)
        guards = " and ".join(f"{v.code}.__class__ in _NUMS" for v in (a, b) if v.kind != {NUM})
        slow = f"_{ORDERING[op].__name__.lstrip('_')}({a.code}, {b.code})"
        code = f"({a.code} {py} {b.code}) if {guards} else {slow}"
        return pending(code, kinds(BOOL, NULL))

    def equality(self, a: Val, b: Val, fn: Fn, *, negate: bool) -> str:
        """A Python expression for JMESPath ``a == b`` (or ``!=``); not both literals."""
        eq, is_, not_ = ("!=", "is not", "not ") if negate else ("==", "is", "")
        for x, y in ((a, b), (b, a)):
            if not y.is_literal or x.is_literal:
                continue
            lit = y.literal
            if lit is None or lit is True or lit is False:
                return f"{x.code} {is_} {lit!r}"
            if lit.__class__ is str:
                return f"{a.code} {eq} {b.code}"
            if lit.__class__ in (int, float) and math.isfinite(lit):
                if lit == 0 or lit == 1:
                    x = self.simple(x, fn)
                    boolean = "False" if lit == 0 else "True"
                    return f"{not_}({x.code} == {y.code} and {x.code} is not {boolean})"
                return f"{a.code} {eq} {b.code}"
        for x in (a, b):
            if x.kind <= K_STR_NULL:
                return f"{a.code} {eq} {b.code}"
            if x.kind <= K_BOOL_NULL:
                return f"{a.code} {is_} {b.code}"
        return f"{not_}_eq({a.code}, {b.code})"

    def n_and_expression(self, node: Node, cur: Val, fn: Fn) -> Val:
        return self.logical(node, cur, fn, is_and=True)

    def n_or_expression(self, node: Node, cur: Val, fn: Fn) -> Val:
        return self.logical(node, cur, fn, is_and=False)

    def logical(self, node: Node, cur: Val, fn: Fn, *, is_and: bool) -> Val:
        left, right = node["children"]
        a = self.expr(left, cur, fn)
        if a.is_literal:
            if truthy(a.literal) is not is_and:
                return a
            return self.expr(right, cur, fn)
        mark = len(fn.lines)
        t = self.name("t")
        fn.emit(f"{t} = {a.code}")
        held = a._replace(code=t, simple=True)
        test = self.truth(held, fn)
        with fn.block(f"if {test}:" if is_and else f"if not {test}:"):
            inner = len(fn.lines)
            b = self.expr(right, cur, fn)
            emitted = len(fn.lines) > inner
            fn.emit(f"{t} = {b.code}")
        kind = a.kind | b.kind
        if not emitted and NUM not in a.kind:
            # Python's and/or return the same operand as JMESPath's when truth agrees.
            del fn.lines[mark:]
            op = "and" if is_and else "or"
            return pending(f"({a.code} {op} {b.code})", kind)
        return Val(t, kind)

    def n_not_expression(self, node: Node, cur: Val, fn: Fn) -> Val:
        a = self.expr(node["children"][0], cur, fn)
        if a.is_literal:
            return self.const(not truthy(a.literal))
        return pending(f"not {self.truth(a, fn)}", kinds(BOOL))

    def n_multi_select_list(self, node: Node, cur: Val, fn: Fn) -> Val:
        return self.multi_select(node, cur, fn, is_dict=False)

    def n_multi_select_dict(self, node: Node, cur: Val, fn: Fn) -> Val:
        return self.multi_select(node, cur, fn, is_dict=True)

    def multi_select(self, node: Node, cur: Val, fn: Fn, *, is_dict: bool) -> Val:
        if cur.is_literal and cur.literal is None:
            return self.const(None)
        kind = kinds(OBJ if is_dict else ARR)
        nullable = NULL in cur.kind and not cur.is_literal
        children = node["children"]
        if is_dict:
            items = [(child["children"][0], cur) for child in children]
        else:
            items = [(child, cur) for child in children]
        mark = len(fn.lines)
        t = self.name("t")
        if nullable:
            fn.emit(f"{t} = None")
        with fn.block(f"if {cur.code} is not None:") if nullable else nullcontext():
            inner = len(fn.lines)
            values = self.in_order(items, fn)
            emitted = len(fn.lines) > inner
            if is_dict:
                keys = [self.global_("_k", child["value"]) for child in children]
                parts = [f"{k}: {v.code}" for k, v in zip(keys, values, strict=True)]
                display = "{" + ", ".join(parts) + "}"
            else:
                display = "[" + ", ".join(v.code for v in values) + "]"
            fn.emit(f"{t} = {display}")
        if not emitted:
            del fn.lines[mark:]
            if nullable:
                return pending(f"{display} if {cur.code} is not None else None", kind | K_NULL)
            return pending(display, kind)
        return Val(t, kind | K_NULL if nullable else kind)

    def project(self, base: Val, right: Node, fn: Fn, condition: Node | None = None) -> Val:
        """A projection (or filter) loop over the simple iterable ``base``; drops nulls."""
        e = self.name("e")
        element = Val(e, ANY)
        if condition is None and right["type"] == "identity":
            return pending(f"[{e} for {e} in {base.code} if {e} is not None]", kinds(ARR))
        t = self.name("t")
        fn.emit(f"{t} = []")
        with fn.block(f"for {e} in {base.code}:", loop=True):
            if condition is None:
                self.collect(fn, t, self.expr(right, element, fn))
            else:
                test = self.truth(self.expr(condition, element, fn), fn)
                with fn.block(f"if {test}:"):
                    self.collect(fn, t, self.expr(right, element, fn))
        return Val(t, kinds(ARR))

    def guarded(self, base: Val, fn: Fn, body: Callable[[Val], Val]) -> Val:
        """``body(base)`` when ``base`` is a list, else null (``base`` is made simple)."""
        base = self.simple(base, fn)
        if base.kind == K_ARR:
            return body(base)
        mark = len(fn.lines)
        t = self.name("t")
        fn.emit(f"{t} = None")
        with fn.block(f"if isinstance({base.code}, list):"):
            inner_mark = len(fn.lines)
            inner = body(base)
            emitted = len(fn.lines) > inner_mark
            fn.emit(f"{t} = {inner.code}")
        if not emitted:
            del fn.lines[mark:]
            code = f"({inner.code}) if isinstance({base.code}, list) else None"
            return pending(code, inner.kind | K_NULL)
        return Val(t, inner.kind | K_NULL)

    def n_projection(self, node: Node, cur: Val, fn: Fn) -> Val:
        left, right = node["children"]
        base = self.expr(left, cur, fn)
        if ARR not in base.kind or (base.is_literal and not isinstance(base.literal, list)):
            return self.discard(base, fn)
        return self.guarded(base, fn, lambda b: self.project(b, right, fn))

    def n_filter_projection(self, node: Node, cur: Val, fn: Fn) -> Val:
        left, right, condition = node["children"]
        base = self.expr(left, cur, fn)
        if ARR not in base.kind or (base.is_literal and not isinstance(base.literal, list)):
            return self.discard(base, fn)
        return self.guarded(base, fn, lambda b: self.project(b, right, fn, condition))

    def n_value_projection(self, node: Node, cur: Val, fn: Fn) -> Val:
        left, right = node["children"]
        base = self.expr(left, cur, fn)
        if OBJ not in base.kind or (base.is_literal and not isinstance(base.literal, dict)):
            return self.discard(base, fn)
        b = self.simple(base, fn).code
        values = self.simple(
            pending(f"{b}.values() if {b}.__class__ is dict else _values({b})", ANY),
            fn,
        )
        t = self.name("t")
        fn.emit(f"{t} = None")
        with fn.block(f"if {values.code} is not None:"):
            inner = self.project(values, right, fn)
            fn.emit(f"{t} = {inner.code}")
        return Val(t, kinds(ARR, NULL))

    def n_flatten(self, node: Node, cur: Val, fn: Fn) -> Val:
        base = self.expr(node["children"][0], cur, fn)
        if ARR not in base.kind or (base.is_literal and not isinstance(base.literal, list)):
            return self.discard(base, fn)
        kind = kinds(ARR) if base.kind == K_ARR else kinds(ARR, NULL)
        return pending(f"_flatten({base.code})", kind)

    def discard(self, v: Val, fn: Fn) -> Val:
        """Evaluate ``v`` for its errors only; the result is null."""
        if not v.simple:
            fn.emit(v.code)
        return self.const(None)

    def n_expref(self, node: Node, cur: Val, fn: Fn) -> Val:
        raise Unsupported("an expression reference used as a value")

