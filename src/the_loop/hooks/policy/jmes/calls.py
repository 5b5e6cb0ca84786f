"""Compiling function calls: argument order, expression references, and per-function fast paths.

``Calls.n_function_expression`` compiles any call to the ``_f_<name>``/``_pf_<name>`` helpers of
``runtime.py`` (the reference's type checks included); the ``f_<name>`` methods specialise the
common ones (``length``, ``contains``, ``starts_with`` ...) when the argument kinds prove that a
plain Python operation gives the same result, and return None to keep the generic call.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable
from typing import Any

from the_loop.hooks.policy.functions import POLICY_FUNCTION_SPECS, InvalidValueError, regex
from the_loop.hooks.policy.jmes.base import CodegenBase
from the_loop.hooks.policy.jmes.reference import FUNCTION_TABLE
from the_loop.hooks.policy.jmes.values import (
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
    Fn,
    Kind,
    Node,
    Unsupported,
    Val,
    kinds,
    pending,
)

__all__ = ["Calls"]


class Calls(CodegenBase):
    """Function calls (``n_function_expression``) and their specialisations (``f_<name>``)."""

    def expref(self, node: Node) -> Val:
        sub = Fn(self.name("_x"), "c")
        value = self.expr(node["children"][0], Val("c", ANY), sub)
        self.defs.append(sub.source(value.code))
        return Val(sub.name, EXPREF)

    def n_function_expression(self, node: Node, cur: Val, fn: Fn) -> Val:
        name: str = node["value"]
        declared = FUNCTION_TABLE[name]["signature"]
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
        if literal_set:  # a list of string literals has nothing to evaluate: see f_contains
            items = items[1:]
        values = iter(self.in_order(items, fn))
        args = [
            self.expref(child)
            if child["type"] == "expref"
            else self.const(None)
            if literal_set and position == 0
            else next(values)
            for position, child in enumerate(children)
        ]
        special = getattr(self, "f_" + name, None)
        if special is not None:
            result: Val | None = special(args, fn, children, cur)
            if result is not None:
                return result
        codes = ", ".join(a.code for a in args)
        if name in POLICY_FUNCTION_SPECS:
            spec = POLICY_FUNCTION_SPECS[name]
            kind = frozenset(spec.returns) or ANY
            if not spec.variadic and all(
                not types or all(allowed_kind(t, a) for t in types)
                for types, a in zip(spec.arg_types, args, strict=True)
            ):
                impl = self.global_("_impl_", spec.impl)
                return pending(f"{impl}({codes})", kind)
            return pending(f"_pf_{name}({codes})", kind)
        if name not in RETURNS:  # pragma: no cover - every built-in is listed
            raise Unsupported(f"no compiled form for {name}()")
        return pending(f"_f_{name}({codes})", RETURNS[name])

    def simples(self, args: list[Val], fn: Fn) -> list[Val]:
        return [self.simple(a, fn) for a in args]

    def f_length(self, args: list[Val], fn: Fn, nodes: list[Node], cur: Val) -> Val | None:
        (a,) = args
        if a.kind <= K_SIZED:
            return pending(f"len({a.code})", kinds(NUM))
        (a,) = self.simples(args, fn)
        code = f"len({a.code}) if {a.code}.__class__ in _LEN_TYPES else _f_length({a.code})"
        return pending(code, kinds(NUM))

    def f_contains(self, args: list[Val], fn: Fn, nodes: list[Node], cur: Val) -> Val | None:
        literals = string_literals(nodes[0])
        if literals is not None:
            # contains(['a', 'b'], x): a frozenset lookup; the list is null when @ is.
            (search,) = self.simples(args[1:], fn)
            members = self.global_("_set", frozenset(literals))
            fast = f"({search.code} in {members}) if {search.code}.__class__ is str else False"
            if NULL not in cur.kind:
                return pending(fast, kinds(BOOL))
            slow = f"_f_contains(None, {search.code})"
            return pending(f"({fast}) if {cur.code} is not None else {slow}", kinds(BOOL))
        subject, search = self.simples(args, fn)
        s, x = subject.code, search.code
        guards = []
        if not subject.kind <= K_STR_ARR:
            guards.append(f"{s}.__class__ in _STR_LIST")
        if not search.kind <= K_STR:
            guards.append(f"{x}.__class__ is str")
        if not guards:
            return pending(f"{x} in {s}", kinds(BOOL))
        code = f"({x} in {s}) if {' and '.join(guards)} else _f_contains({s}, {x})"
        return pending(code, kinds(BOOL))

    def _string_method(self, args: list[Val], fn: Fn, method: str, name: str) -> Val:
        subject, other = self.simples(args, fn)
        guards = [f"{v.code}.__class__ is str" for v in (subject, other) if not v.kind <= K_STR]
        call = f"{subject.code}.{method}({other.code})"
        if not guards:
            return pending(call, kinds(BOOL))
        slow = f"_f_{name}({subject.code}, {other.code})"
        return pending(f"{call} if {' and '.join(guards)} else {slow}", kinds(BOOL))

    def f_starts_with(
        self, args: list[Val], fn: Fn, nodes: list[Node], cur: Val
    ) -> Val | None:
        return self._string_method(args, fn, "startswith", "starts_with")

    def f_ends_with(self, args: list[Val], fn: Fn, nodes: list[Node], cur: Val) -> Val | None:
        return self._string_method(args, fn, "endswith", "ends_with")

    def f_not_null(self, args: list[Val], fn: Fn, nodes: list[Node], cur: Val) -> Val | None:
        args = self.simples(args, fn)  # every argument is evaluated, whatever comes first
        tested: list[Val] = []
        tail = self.const(None)
        for a in args:
            if a.is_literal:
                if a.literal is None:
                    continue
                tail = a
                break
            tested.append(a)
        if not tested:
            return tail
        kind: Kind = tail.kind.union(*(a.kind for a in tested))
        code = " else ".join(f"{a.code} if {a.code} is not None" for a in tested)
        return pending(f"{code} else {tail.code}", kind)

    def f_to_string(self, args: list[Val], fn: Fn, nodes: list[Node], cur: Val) -> Val | None:
        (a,) = args
        if a.kind <= K_STR:
            return a
        (a,) = self.simples(args, fn)
        code = f"{a.code} if {a.code}.__class__ is str else _f_to_string({a.code})"
        return pending(code, kinds(STR))

    def _case(self, args: list[Val], fn: Fn, method: str) -> Val:
        (a,) = args
        if a.kind <= K_STR:
            return pending(f"{a.code}.{method}()", kinds(STR))
        (a,) = self.simples(args, fn)
        code = f"{a.code}.{method}() if {a.code}.__class__ is str else _pf_{method}({a.code})"
        return pending(code, kinds(STR))

    def f_lower(self, args: list[Val], fn: Fn, nodes: list[Node], cur: Val) -> Val | None:
        return self._case(args, fn, "lower")

    def f_upper(self, args: list[Val], fn: Fn, nodes: list[Node], cur: Val) -> Val | None:
        return self._case(args, fn, "upper")

    def _pattern(
        self, args: list[Val], fn: Fn, name: str, matcher: Callable[[str], Any]
    ) -> Val | None:
        pattern, subject = args
        if not (pattern.is_literal and isinstance(pattern.literal, str)):
            return None
        try:
            match = matcher(pattern.literal)
        except (re.error, InvalidValueError):
            return None  # the generic call raises the invalid-value error when evaluated
        m = self.global_("_m", match)
        if subject.kind <= K_STR:
            return pending(f"{m}({subject.code}) is not None", kinds(BOOL))
        s = self.simple(subject, fn).code
        slow = f"_pf_{name}({pattern.code}, {s})"
        code = f"({m}({s}) is not None) if {s}.__class__ is str else {slow}"
        return pending(code, kinds(BOOL))

    def f_regex_match(
        self, args: list[Val], fn: Fn, nodes: list[Node], cur: Val
    ) -> Val | None:
        # RE2, as the function itself: linear time whatever the pattern (issue 11 rule 6).
        return self._pattern(args, fn, "regex_match", lambda p: regex(p).search)

    def f_glob_match(self, args: list[Val], fn: Fn, nodes: list[Node], cur: Val) -> Val | None:
        return self._pattern(
            args, fn, "glob_match", lambda p: re.compile(fnmatch.translate(p)).match
        )


def string_literals(node: Node) -> list[str] | None:
    """The strings of a multi-select list made only of string literals (else None)."""
    if node["type"] != "multi_select_list":
        return None
    values = [child.get("value") for child in node["children"] if child["type"] == "literal"]
    if len(values) != len(node["children"]) or not all(isinstance(v, str) for v in values):
        return None
    return values


def allowed_kind(jmespath_type: str, value: Val) -> bool:
    """True when every value of ``value``'s kind passes the check for ``jmespath_type``."""
    return "-" not in jmespath_type and value.kind <= {jmespath_type}

