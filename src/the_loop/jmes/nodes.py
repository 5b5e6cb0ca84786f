"""The node compilers: one function per node type of jmespath's AST, listed in ``NODES``.

Each mirrors ``jmespath.visitor.TreeInterpreter``'s handling of its node (same evaluation order,
same null propagation, same errors) and specialises where a value's jtypes prove the outcome the
same: a comparison with a string literal is a plain ``==``, a projection over a value known to
be a list skips the ``isinstance`` test, and so on. Function calls are in ``calls.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import nullcontext

from the_loop.jmes import calls
from the_loop.jmes.emitter import Emitter, NodeCompiler
from the_loop.jmes.ir import Fn, Node, Unsupported, Val, pending
from the_loop.jmes.jtypes import (
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
    jtypes,
)
from the_loop.jmes.semantics import ORDERING, ORDERING_PY, eq, get_index, truthy


def literal(e: Emitter, node: Node, cur: Val, fn: Fn) -> Val:
    return e.const(node["value"])


def current(e: Emitter, node: Node, cur: Val, fn: Fn) -> Val:
    return cur


def field(e: Emitter, node: Node, cur: Val, fn: Fn) -> Val:
    key = node["value"]
    if cur.is_literal:
        return e.const(cur.literal.get(key) if isinstance(cur.literal, dict) else None)
    if OBJ not in cur.jtypes:
        return discard(e, cur, fn)
    if cur.root:
        bound = e.bind((key,), fn)
        if bound is not None:
            return bound[0]
    may_be = ANY
    if cur.root and key in e.field_types:
        may_be = DECLARED[e.field_types[key]]
    c, k = cur.code, e.global_("_k", key)
    if e.optimistic or cur.jtypes == K_OBJ:
        # Optimistic: a value without .get raises AttributeError, and the whole evaluation
        # is redone by the guarded code (see compile_expression).
        code = f"{c}.get({k})"
    else:
        code = f"{c}.get({k}) if {c}.__class__ is dict else _getf({c}, {k})"
    return pending(code, may_be)


def subexpression(e: Emitter, node: Node, cur: Val, fn: Fn) -> Val:
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
        bound = e.bind(tuple(names), fn) if names else None
        if bound is not None:
            result, used = bound
            children = children[lead + used :]
    for child in children:
        if not (e.optimistic and child["type"] == "field"):
            result = e.simple(result, fn)  # an optimistic field embeds its operand once
        result = e.expr(child, result, fn)
    return result


def index(e: Emitter, node: Node, cur: Val, fn: Fn) -> Val:
    i: int = node["value"]
    if cur.is_literal:
        return e.const(get_index(cur.literal, i))
    if ARR not in cur.jtypes:
        return e.const(None)
    c = cur.code
    fits = f"len({c}) > {i}" if i >= 0 else f"len({c}) >= {-i}"
    if cur.jtypes == K_ARR:
        return pending(f"{c}[{i}] if {fits} else None", ANY)
    code = f"({c}[{i}] if {fits} else None) if {c}.__class__ is list else _index({c}, {i})"
    return pending(code, ANY)


def slice_(e: Emitter, node: Node, cur: Val, fn: Fn) -> Val:
    if ARR not in cur.jtypes or (cur.is_literal and not isinstance(cur.literal, list)):
        return e.const(None)
    parts = ["" if part is None else str(int(part)) for part in node["children"]]
    c = cur.code
    sliced = f"{c}[{':'.join(parts)}]"
    if cur.jtypes == K_ARR:
        return pending(sliced, jtypes(ARR))
    return pending(f"{sliced} if isinstance({c}, list) else None", jtypes(ARR, NULL))


def comparator(e: Emitter, node: Node, cur: Val, fn: Fn) -> Val:
    op: str = node["value"]
    a, b = e.in_order([(child, cur) for child in node["children"]], fn)
    if a.is_literal and b.is_literal:
        if op == "eq":
            return e.const(eq(a.literal, b.literal))
        if op == "ne":
            return e.const(not eq(a.literal, b.literal))
        return e.const(ORDERING[op](a.literal, b.literal))
    if op in ("eq", "ne"):
        return pending(equality(e, a, b, fn, negate=op == "ne"), jtypes(BOOL))
    py = ORDERING_PY[op]
    if a.jtypes == K_NUM and b.jtypes == K_NUM:
        return pending(f"{a.code} {py} {b.code}", jtypes(BOOL))
    if NUM not in a.jtypes or NUM not in b.jtypes:
        # Never both numbers: null (both sides were still evaluated, in order).
        for v in (a, b):
            if not v.simple:
                fn.emit(v.code)
        return e.const(None)
    a = e.simple(a, fn)
    b = e.simple(b, fn)
    guards = " and ".join(f"{v.code}.__class__ in _NUMS" for v in (a, b) if v.jtypes != {NUM})
    slow = f"_{ORDERING[op].__name__.lstrip('_')}({a.code}, {b.code})"
    code = f"({a.code} {py} {b.code}) if {guards} else {slow}"
    return pending(code, jtypes(BOOL, NULL))


def equality(e: Emitter, a: Val, b: Val, fn: Fn, *, negate: bool) -> str:
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
                x = e.simple(x, fn)
                boolean = "False" if lit == 0 else "True"
                return f"{not_}({x.code} == {y.code} and {x.code} is not {boolean})"
            return f"{a.code} {eq} {b.code}"
    for x in (a, b):
        if x.jtypes <= K_STR_NULL:
            return f"{a.code} {eq} {b.code}"
        if x.jtypes <= K_BOOL_NULL:
            return f"{a.code} {is_} {b.code}"
    return f"{not_}_eq({a.code}, {b.code})"


def and_expression(e: Emitter, node: Node, cur: Val, fn: Fn) -> Val:
    return logical(e, node, cur, fn, is_and=True)


def or_expression(e: Emitter, node: Node, cur: Val, fn: Fn) -> Val:
    return logical(e, node, cur, fn, is_and=False)


def logical(e: Emitter, node: Node, cur: Val, fn: Fn, *, is_and: bool) -> Val:
    left, right = node["children"]
    a = e.expr(left, cur, fn)
    if a.is_literal:
        if truthy(a.literal) is not is_and:
            return a
        return e.expr(right, cur, fn)
    mark = len(fn.lines)
    t = e.name("t")
    fn.emit(f"{t} = {a.code}")
    held = a._replace(code=t, simple=True)
    test = e.truth(held, fn)
    with fn.block(f"if {test}:" if is_and else f"if not {test}:"):
        inner = len(fn.lines)
        b = e.expr(right, cur, fn)
        emitted = len(fn.lines) > inner
        fn.emit(f"{t} = {b.code}")
    may_be = a.jtypes | b.jtypes
    if not emitted and NUM not in a.jtypes:
        # Python's and/or return the same operand as JMESPath's when truth agrees.
        del fn.lines[mark:]
        op = "and" if is_and else "or"
        return pending(f"({a.code} {op} {b.code})", may_be)
    return Val(t, may_be)


def not_expression(e: Emitter, node: Node, cur: Val, fn: Fn) -> Val:
    a = e.expr(node["children"][0], cur, fn)
    if a.is_literal:
        return e.const(not truthy(a.literal))
    return pending(f"not {e.truth(a, fn)}", jtypes(BOOL))


def multi_select_list(e: Emitter, node: Node, cur: Val, fn: Fn) -> Val:
    return multi_select(e, node, cur, fn, is_dict=False)


def multi_select_dict(e: Emitter, node: Node, cur: Val, fn: Fn) -> Val:
    return multi_select(e, node, cur, fn, is_dict=True)


def multi_select(e: Emitter, node: Node, cur: Val, fn: Fn, *, is_dict: bool) -> Val:
    if cur.is_literal and cur.literal is None:
        return e.const(None)
    may_be = jtypes(OBJ if is_dict else ARR)
    nullable = NULL in cur.jtypes and not cur.is_literal
    children = node["children"]
    if is_dict:
        items = [(child["children"][0], cur) for child in children]
    else:
        items = [(child, cur) for child in children]
    mark = len(fn.lines)
    t = e.name("t")
    if nullable:
        fn.emit(f"{t} = None")
    with fn.block(f"if {cur.code} is not None:") if nullable else nullcontext():
        inner = len(fn.lines)
        values = e.in_order(items, fn)
        emitted = len(fn.lines) > inner
        if is_dict:
            keys = [e.global_("_k", child["value"]) for child in children]
            parts = [f"{k}: {v.code}" for k, v in zip(keys, values, strict=True)]
            display = "{" + ", ".join(parts) + "}"
        else:
            display = "[" + ", ".join(v.code for v in values) + "]"
        fn.emit(f"{t} = {display}")
    if not emitted:
        del fn.lines[mark:]
        if nullable:
            return pending(f"{display} if {cur.code} is not None else None", may_be | K_NULL)
        return pending(display, may_be)
    return Val(t, may_be | K_NULL if nullable else may_be)


def key_val_pair(e: Emitter, node: Node, cur: Val, fn: Fn) -> Val:
    """A pair's value (``multi_select`` reads its pairs itself; this mirrors the reference)."""
    return e.expr(node["children"][0], cur, fn)


def project(e: Emitter, base: Val, right: Node, fn: Fn, condition: Node | None = None) -> Val:
    """A projection (or filter) loop over the simple iterable ``base``; drops nulls."""
    x = e.name("e")
    element = Val(x, ANY)
    if condition is None and right["type"] == "identity":
        return pending(f"[{x} for {x} in {base.code} if {x} is not None]", jtypes(ARR))
    t = e.name("t")
    fn.emit(f"{t} = []")
    with fn.block(f"for {x} in {base.code}:", loop=True):
        if condition is None:
            e.collect(fn, t, e.expr(right, element, fn))
        else:
            test = e.truth(e.expr(condition, element, fn), fn)
            with fn.block(f"if {test}:"):
                e.collect(fn, t, e.expr(right, element, fn))
    return Val(t, jtypes(ARR))


def guarded(e: Emitter, base: Val, fn: Fn, body: Callable[[Val], Val]) -> Val:
    """``body(base)`` when ``base`` is a list, else null (``base`` is made simple)."""
    base = e.simple(base, fn)
    if base.jtypes == K_ARR:
        return body(base)
    mark = len(fn.lines)
    t = e.name("t")
    fn.emit(f"{t} = None")
    with fn.block(f"if isinstance({base.code}, list):"):
        inner_mark = len(fn.lines)
        inner = body(base)
        emitted = len(fn.lines) > inner_mark
        fn.emit(f"{t} = {inner.code}")
    if not emitted:
        del fn.lines[mark:]
        code = f"({inner.code}) if isinstance({base.code}, list) else None"
        return pending(code, inner.jtypes | K_NULL)
    return Val(t, inner.jtypes | K_NULL)


def projection(e: Emitter, node: Node, cur: Val, fn: Fn) -> Val:
    left, right = node["children"]
    base = e.expr(left, cur, fn)
    if ARR not in base.jtypes or (base.is_literal and not isinstance(base.literal, list)):
        return discard(e, base, fn)
    return guarded(e, base, fn, lambda b: project(e, b, right, fn))


def filter_projection(e: Emitter, node: Node, cur: Val, fn: Fn) -> Val:
    left, right, condition = node["children"]
    base = e.expr(left, cur, fn)
    if ARR not in base.jtypes or (base.is_literal and not isinstance(base.literal, list)):
        return discard(e, base, fn)
    return guarded(e, base, fn, lambda b: project(e, b, right, fn, condition))


def value_projection(e: Emitter, node: Node, cur: Val, fn: Fn) -> Val:
    left, right = node["children"]
    base = e.expr(left, cur, fn)
    if OBJ not in base.jtypes or (base.is_literal and not isinstance(base.literal, dict)):
        return discard(e, base, fn)
    b = e.simple(base, fn).code
    values = e.simple(
        pending(f"{b}.values() if {b}.__class__ is dict else _values({b})", ANY),
        fn,
    )
    t = e.name("t")
    fn.emit(f"{t} = None")
    with fn.block(f"if {values.code} is not None:"):
        inner = project(e, values, right, fn)
        fn.emit(f"{t} = {inner.code}")
    return Val(t, jtypes(ARR, NULL))


def flatten(e: Emitter, node: Node, cur: Val, fn: Fn) -> Val:
    base = e.expr(node["children"][0], cur, fn)
    if ARR not in base.jtypes or (base.is_literal and not isinstance(base.literal, list)):
        return discard(e, base, fn)
    may_be = jtypes(ARR) if base.jtypes == K_ARR else jtypes(ARR, NULL)
    return pending(f"_flatten({base.code})", may_be)


def discard(e: Emitter, v: Val, fn: Fn) -> Val:
    """Evaluate ``v`` for its errors only; the result is null."""
    if not v.simple:
        fn.emit(v.code)
    return e.const(None)


def expref(e: Emitter, node: Node, cur: Val, fn: Fn) -> Val:
    raise Unsupported("an expression reference used as a value")


#: Which function compiles which node type: the emitter's one dispatch table (one entry per
#: type in ``ir.NODE_TYPES``).
NODES: dict[str, NodeCompiler] = {
    "literal": literal,
    "current": current,
    "identity": current,
    "field": field,
    "subexpression": subexpression,
    "index_expression": subexpression,
    "pipe": subexpression,
    "index": index,
    "slice": slice_,
    "comparator": comparator,
    "and_expression": and_expression,
    "or_expression": or_expression,
    "not_expression": not_expression,
    "multi_select_list": multi_select_list,
    "multi_select_dict": multi_select_dict,
    "key_val_pair": key_val_pair,
    "projection": projection,
    "filter_projection": filter_projection,
    "value_projection": value_projection,
    "flatten": flatten,
    "expref": expref,
    "function_expression": calls.function_call,
}
