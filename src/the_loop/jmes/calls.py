"""Compiling function calls: argument order, expression references, and per-function fast paths.

``function_call`` compiles any call to the ``_f_<name>``/``_pf_<name>`` helpers (``helpers.py``:
the reference's type checks included). ``SPECIALISED`` lists the built-ins with a fast path
(``length``, ``contains``, ``starts_with`` ...), used when the arguments' jtypes prove that a plain
Python operation gives the same result; a fast path returns None to keep the generic call. A
caller's function (``library.FunctionSpec``) is called directly when its arguments' jtypes pass
its checks, and inlined when it declares a ``str_method`` or a ``pattern_matcher``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from the_loop.jmes.emitter import Emitter
from the_loop.jmes.ir import Fn, Node, Unsupported, Val, pending
from the_loop.jmes.jtypes import (
    ANY,
    BOOL,
    EXPREF,
    K_SIZED,
    K_STR,
    K_STR_ARR,
    NULL,
    NUM,
    RETURNS,
    STR,
    JTypes,
    jtypes,
)
from the_loop.jmes.library import FunctionSpec

__all__ = ["SPECIALISED", "function_call"]

#: A fast path: ``special(emitter, args, fn, nodes, cur)``, or None for the generic call.
Special = Callable[[Emitter, list[Val], Fn, list[Node], Val], "Val | None"]


def function_call(e: Emitter, node: Node, cur: Val, fn: Fn) -> Val:
    name: str = node["value"]
    declared = e.library.table[name]["signature"]
    children = node["children"]
    items: list[tuple[Node, Val]] = []
    for position, child in enumerate(children):
        types = declared[min(position, len(declared) - 1)]["types"]
        wants_expref = types == ["expref"]
        if (child["type"] == "expref") != wants_expref:
            what = "an expression reference" if not wants_expref else "a value"
            raise Unsupported(f"{what} passed to {name}() where it does not belong")
        if not wants_expref:
            items.append((child, cur))
    literal_set = name == "contains" and string_literals(children[0]) is not None
    if literal_set:  # a list of string literals has nothing to evaluate: see contains
        items = items[1:]
    values = iter(e.in_order(items, fn))
    args = [
        expref(e, child)
        if child["type"] == "expref"
        else e.const(None)
        if literal_set and position == 0
        else next(values)
        for position, child in enumerate(children)
    ]
    spec = e.library.extra.get(name)
    if spec is not None:
        return _extra(e, spec, args, fn)
    special = SPECIALISED.get(name)
    if special is not None:
        result = special(e, args, fn, children, cur)
        if result is not None:
            return result
    if name not in RETURNS:  # pragma: no cover - every built-in is listed
        raise Unsupported(f"no compiled form for {name}()")
    codes = ", ".join(a.code for a in args)
    return pending(f"_f_{name}({codes})", RETURNS[name])


def expref(e: Emitter, node: Node) -> Val:
    """An expression reference: a function of its own, passed by name."""
    sub = Fn(e.name("_x"), "c")
    value = e.expr(node["children"][0], Val("c", ANY), sub)
    e.defs.append(sub.source(value.code))
    return Val(sub.name, EXPREF)


def _extra(e: Emitter, spec: FunctionSpec, args: list[Val], fn: Fn) -> Val:
    """A call of a caller's function: inlined, direct, or through its checks (``_pf_``)."""
    if spec.str_method is not None and len(args) == 1:
        return _str_method(e, args, fn, spec.name, spec.str_method)
    if spec.pattern_matcher is not None and len(args) == 2:
        found = _pattern(e, args, fn, spec.name, spec.pattern_matcher)
        if found is not None:
            return found
    codes = ", ".join(a.code for a in args)
    may_be = frozenset(spec.returns) or ANY
    if not spec.variadic and all(
        not types or all(allowed_jtype(t, a) for t in types)
        for types, a in zip(spec.arg_types, args, strict=True)
    ):
        impl = e.global_("_impl_", spec.impl)
        return pending(f"{impl}({codes})", may_be)
    return pending(f"_pf_{spec.name}({codes})", may_be)


def _simples(e: Emitter, args: list[Val], fn: Fn) -> list[Val]:
    return [e.simple(a, fn) for a in args]


def _length(e: Emitter, args: list[Val], fn: Fn, nodes: list[Node], cur: Val) -> Val | None:
    (a,) = args
    if a.jtypes <= K_SIZED:
        return pending(f"len({a.code})", jtypes(NUM))
    (a,) = _simples(e, args, fn)
    code = f"len({a.code}) if {a.code}.__class__ in _LEN_TYPES else _f_length({a.code})"
    return pending(code, jtypes(NUM))


def _contains(e: Emitter, args: list[Val], fn: Fn, nodes: list[Node], cur: Val) -> Val | None:
    literals = string_literals(nodes[0])
    if literals is not None:
        # contains(['a', 'b'], x): a frozenset lookup; the list is null when @ is.
        (search,) = _simples(e, args[1:], fn)
        members = e.global_("_set", frozenset(literals))
        fast = f"({search.code} in {members}) if {search.code}.__class__ is str else False"
        if NULL not in cur.jtypes:
            return pending(fast, jtypes(BOOL))
        slow = f"_f_contains(None, {search.code})"
        return pending(f"({fast}) if {cur.code} is not None else {slow}", jtypes(BOOL))
    subject, search = _simples(e, args, fn)
    s, x = subject.code, search.code
    guards = []
    if not subject.jtypes <= K_STR_ARR:
        guards.append(f"{s}.__class__ in _STR_LIST")
    if not search.jtypes <= K_STR:
        guards.append(f"{x}.__class__ is str")
    if not guards:
        return pending(f"{x} in {s}", jtypes(BOOL))
    code = f"({x} in {s}) if {' and '.join(guards)} else _f_contains({s}, {x})"
    return pending(code, jtypes(BOOL))


def _string_method(e: Emitter, args: list[Val], fn: Fn, method: str, name: str) -> Val:
    subject, other = _simples(e, args, fn)
    guards = [f"{v.code}.__class__ is str" for v in (subject, other) if not v.jtypes <= K_STR]
    call = f"{subject.code}.{method}({other.code})"
    if not guards:
        return pending(call, jtypes(BOOL))
    slow = f"_f_{name}({subject.code}, {other.code})"
    return pending(f"{call} if {' and '.join(guards)} else {slow}", jtypes(BOOL))


def _starts_with(e: Emitter, args: list[Val], fn: Fn, nodes: list[Node], cur: Val) -> Val | None:
    return _string_method(e, args, fn, "startswith", "starts_with")


def _ends_with(e: Emitter, args: list[Val], fn: Fn, nodes: list[Node], cur: Val) -> Val | None:
    return _string_method(e, args, fn, "endswith", "ends_with")


def _not_null(e: Emitter, args: list[Val], fn: Fn, nodes: list[Node], cur: Val) -> Val | None:
    args = _simples(e, args, fn)  # every argument is evaluated, whatever comes first
    tested: list[Val] = []
    tail = e.const(None)
    for a in args:
        if a.is_literal:
            if a.literal is None:
                continue
            tail = a
            break
        tested.append(a)
    if not tested:
        return tail
    may_be: JTypes = tail.jtypes.union(*(a.jtypes for a in tested))
    code = " else ".join(f"{a.code} if {a.code} is not None" for a in tested)
    return pending(f"{code} else {tail.code}", may_be)


def _to_string(e: Emitter, args: list[Val], fn: Fn, nodes: list[Node], cur: Val) -> Val | None:
    (a,) = args
    if a.jtypes <= K_STR:
        return a
    (a,) = _simples(e, args, fn)
    code = f"{a.code} if {a.code}.__class__ is str else _f_to_string({a.code})"
    return pending(code, jtypes(STR))


SPECIALISED: dict[str, Special] = {
    "length": _length,
    "contains": _contains,
    "starts_with": _starts_with,
    "ends_with": _ends_with,
    "not_null": _not_null,
    "to_string": _to_string,
}


def _str_method(e: Emitter, args: list[Val], fn: Fn, name: str, method: str) -> Val:
    """``x.<method>()`` for a string ``x``, else the checked call (which raises)."""
    (a,) = args
    if a.jtypes <= K_STR:
        return pending(f"{a.code}.{method}()", jtypes(STR))
    (a,) = _simples(e, args, fn)
    code = f"{a.code}.{method}() if {a.code}.__class__ is str else _pf_{name}({a.code})"
    return pending(code, jtypes(STR))


def _pattern(
    e: Emitter,
    args: list[Val],
    fn: Fn,
    name: str,
    matcher: Callable[[str], Callable[[str], Any] | None],
) -> Val | None:
    """A literal pattern compiled once: ``m(subject) is not None`` for a string subject."""
    pattern, subject = args
    if not (pattern.is_literal and isinstance(pattern.literal, str)):
        return None
    match = matcher(pattern.literal)
    if match is None:
        return None  # the generic call raises the function's error when evaluated
    m = e.global_("_m", match)
    if subject.jtypes <= K_STR:
        return pending(f"{m}({subject.code}) is not None", jtypes(BOOL))
    s = e.simple(subject, fn).code
    slow = f"_pf_{name}({pattern.code}, {s})"
    code = f"({m}({s}) is not None) if {s}.__class__ is str else {slow}"
    return pending(code, jtypes(BOOL))


def string_literals(node: Node) -> list[str] | None:
    """The strings of a multi-select list made only of string literals (else None)."""
    if node["type"] != "multi_select_list":
        return None
    values = [child.get("value") for child in node["children"] if child["type"] == "literal"]
    if len(values) != len(node["children"]) or not all(isinstance(v, str) for v in values):
        return None
    return values


def allowed_jtype(jmespath_type: str, value: Val) -> bool:
    """True when every value of ``value``'s jtypes passes the check for ``jmespath_type``."""
    return "-" not in jmespath_type and value.jtypes <= {jmespath_type}
