"""Load-time type checks of rule expressions against the catalog's field types.

A mistake the types prove is a load error naming the sub-expression, the types on both sides
and the fix: a comparison that can only be false (`labels == 'draft'`: a list never equals a
string) or only null (`work_item.number > '5'`: `<` compares numbers only), a function given
a value it always rejects (`starts_with(labels, 'x')`), and a `when` that is always true or
always false. Anything the types do not decide is accepted: the checker only speaks when
every value the catalog allows gives the same wrong outcome, so a well-typed rule is never
rejected (`tests/policy/test_policy_types.py` generates them to prove it).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from the_loop.hooks.policy.data import reads_data
from the_loop.hooks.policy.expressions import COMPILER
from the_loop.hooks.policy.exprtext import OPS, literal, show
from the_loop.hooks.policy.functions import POLICY_FUNCTION_RECORDS, POLICY_FUNCTION_SPECS
from the_loop.hooks.policy.typemodel import (
    UNKNOWN,
    T,
    describe,
    of_literal,
    root_type,
    truth_of,
)
from the_loop.jmes.ir import NO_LITERAL
from the_loop.jmes.jtypes import (
    ANY,
    ARR,
    BOOL,
    EXPREF,
    NULL,
    NUM,
    OBJ,
    RETURNS,
    STR,
    jtypes,
)
from the_loop.jmes.semantics import eq

Node = Mapping[str, Any]
FUNCTION_TABLE = COMPILER.library.table  # every function a policy expression may call


@dataclass
class Checker:
    """Infers each node's type over a point's context; collects one message per mistake."""

    problems: list[tuple[str, str]] = field(default_factory=list)

    def infer(self, node: Node, cur: T) -> T:
        """The type of `node` applied to a value of type `cur` (its handler in `INFER`)."""
        return INFER.get(str(node.get("type")), Checker._opaque)(self, node, cur)

    # ------------------------------------------------------------------ one per node type

    def _field(self, node: Node, cur: T) -> T:
        if OBJ not in cur.jtypes:
            return T(jtypes(NULL), truth=False)
        if cur.fields is None:
            return UNKNOWN
        return cur.fields.get(str(node["value"]), UNKNOWN)

    def _subexpression(self, node: Node, cur: T) -> T:
        for child in _children(node):
            cur = self.infer(child, cur)
        return cur

    def _current(self, node: Node, cur: T) -> T:
        return cur

    def _literal(self, node: Node, cur: T) -> T:
        return of_literal(node["value"])

    def _comparator(self, node: Node, cur: T) -> T:
        ch = _children(node)
        return self._compare(node, self.infer(ch[0], cur), self.infer(ch[1], cur))

    def _not(self, node: Node, cur: T) -> T:
        t = self.infer(_children(node)[0], cur)
        return T(jtypes(BOOL), truth=None if t.truth is None else not t.truth)

    def _and_or(self, node: Node, cur: T) -> T:
        ch = _children(node)
        return self._logic(node["type"], self.infer(ch[0], cur), self.infer(ch[1], cur))

    def _pipe(self, node: Node, cur: T) -> T:
        ch = _children(node)
        return self.infer(ch[1], self.infer(ch[0], cur))

    def _function(self, node: Node, cur: T) -> T:
        return self._call(node, [self.infer(c, cur) for c in _children(node)])

    def _expref(self, node: Node, cur: T) -> T:
        self.infer(_children(node)[0], UNKNOWN)
        return T(EXPREF)

    def _index_expression(self, node: Node, cur: T) -> T:
        left = self.infer(_children(node)[0], cur)
        if left.elem is not None and ARR in left.jtypes:
            ks = left.elem | jtypes(NULL)
            return T(ks, truth=truth_of(ks))
        return UNKNOWN

    def _projection(self, node: Node, cur: T) -> T:  # and filter_projection
        ch = _children(node)
        left = self.infer(ch[0], cur)
        each = T(left.elem, truth=truth_of(left.elem)) if left.elem else UNKNOWN
        if node["type"] == "filter_projection":
            self.infer(ch[2], each)
        self.infer(ch[1], each)
        return T(jtypes(ARR, NULL))

    def _flatten(self, node: Node, cur: T) -> T:
        self.infer(_children(node)[0], cur)
        return T(jtypes(ARR, NULL))

    def _multi_select_list(self, node: Node, cur: T) -> T:
        """[a, b]: a list of their values; null on null."""
        ch = _children(node)
        elem = frozenset().union(*(self.infer(c, cur).jtypes for c in ch))
        ks = jtypes(ARR) if cur.jtypes <= jtypes(OBJ, ARR, STR, NUM, BOOL) else jtypes(ARR, NULL)
        return T(ks, elem=elem, truth=True if ks == jtypes(ARR) and ch else None)

    def _parts_unknown(self, node: Node, cur: T) -> T:  # value_projection, multi_select_dict
        for child in _children(node):
            if isinstance(child, Mapping):
                self.infer(child, UNKNOWN if node["type"] == "value_projection" else cur)
        return UNKNOWN

    def _key_val_pair(self, node: Node, cur: T) -> T:
        return self.infer(_children(node)[0], cur)

    def _opaque(self, node: Node, cur: T) -> T:
        """Nothing known (an index or slice, read by its index_expression, or a type unknown)."""
        return UNKNOWN

    # ------------------------------------------------------------------ the rules

    def _logic(self, node_type: str, a: T, b: T) -> T:
        ks = a.jtypes | b.jtypes
        if node_type == "and_expression":  # a when a is falsy, else b
            truth = False if a.truth is False or b.truth is False else (
                True if a.truth is True and b.truth is True else None)
        else:  # a when a is truthy, else b
            truth = True if a.truth is True or b.truth is True else (
                False if a.truth is False and b.truth is False else None)
        return T(ks, truth=truth)

    def _compare(self, node: Node, a: T, b: T) -> T:
        op = str(node["value"])
        if a.literal is not NO_LITERAL and b.literal is not NO_LITERAL and op in ("eq", "ne"):
            same = eq(a.literal, b.literal)
            return T(jtypes(BOOL), truth=same if op == "eq" else not same)
        if a.jtypes >= ANY or b.jtypes >= ANY or a.jtypes >= EXPREF or b.jtypes >= EXPREF:
            return T(jtypes(BOOL, NULL) if op not in ("eq", "ne") else jtypes(BOOL))
        if op in ("eq", "ne"):
            if not a.jtypes & b.jtypes:
                always = "false" if op == "eq" else "true"
                self._fail(node, f"compares {self._side(node, 0, a)} with "
                           f"{self._side(node, 1, b)}: they are never equal, so it is always "
                           f"{always}. {_equality_fix(node, a, b)}")
            return T(jtypes(BOOL))
        if NUM not in a.jtypes or NUM not in b.jtypes:
            self._fail(node, f"orders {self._side(node, 0, a)} against "
                       f"{self._side(node, 1, b)} with {OPS[op]}, which compares numbers only "
                       f"(anything else gives null, which is false). {_ordering_fix(node, a, b)}")
            return T(jtypes(NULL), truth=False)
        return T(jtypes(BOOL, NULL))

    def _call(self, node: Node, args: list[T]) -> T:
        name = str(node["value"])
        spec = FUNCTION_TABLE.get(name)
        if spec is not None:
            declared = spec["signature"]
            for i, (arg, t) in enumerate(zip(node.get("children", []), args, strict=False)):
                param = declared[min(i, len(declared) - 1)] if declared else {"types": []}
                self._check_arg(node, name, i, arg, t, tuple(param.get("types", ())))
        if name == "contains" and len(args) == 2 and self._never_holds(node, *args):
            return T(jtypes(BOOL), truth=False)
        if name == "contains" and len(args) == 2 and args[0].literal == []:  # an empty list
            return T(jtypes(BOOL), truth=False)
        if name in POLICY_FUNCTION_SPECS:
            ks = frozenset(POLICY_FUNCTION_SPECS[name].returns)
        else:
            ks = RETURNS.get(name, ANY)
        return T(ks, truth=truth_of(ks))

    def _check_arg(
        self, node: Node, name: str, i: int, arg: Node, t: T, allowed: tuple[str, ...]
    ) -> None:
        if not allowed or t.jtypes >= ANY:
            return
        bases = {a.split("-", 1)[0] for a in allowed}
        fits = t.jtypes & bases
        if fits and ARR in fits and fits == {ARR} and t.elem is not None:
            subs = {a.split("-", 1)[1] for a in allowed if a.startswith("array-")}
            if subs and "array" not in allowed and t.elem and not t.elem & subs:
                fits = frozenset()
        if fits:
            return
        want = " or ".join(_TYPE_WORDS.get(a, a) for a in allowed)
        ordinal = ("first", "second", "third", "fourth")[min(i, 3)]
        self._fail(node, f"calls {name}() with {show(arg)} ({describe(t)}) as its {ordinal} "
                   f"argument, but {name}() takes {want} there, so every call fails. "
                   f"{_argument_fix(node, name, arg, t)}")

    def _never_holds(self, node: Node, subject: T, search: T) -> bool:
        """`contains(subject, search)` where the types say search can never be in subject:
        a list whose elements are all of other types, or a string searched for a non-string."""
        if search.jtypes >= ANY or search.jtypes >= EXPREF:
            return False
        if subject.jtypes == jtypes(ARR) and subject.elem:
            held = subject.elem
        elif subject.jtypes == jtypes(STR):
            held = jtypes(STR)
        else:
            return False
        if search.jtypes & held:
            return False
        self._fail(node, f"asks whether {self._side(node, 0, subject)} holds "
                   f"{self._side(node, 1, search)}: it never can, so it is always false. "
                   f"{_contains_fix(node, search)}")
        return True

    def _side(self, node: Node, i: int, t: T) -> str:
        return f"{show(node['children'][i])} ({describe(t)})"

    def _fail(self, node: Node, message: str) -> None:
        self.problems.append((show(node), message))


#: The policy functions that take strings only: given a list, the fix is to map them over it.
_ON_STRINGS = frozenset(
    r.name for r in POLICY_FUNCTION_RECORDS if all(p.types == ("string",) for p in r.params)
)
#: How the checker infers each node type: the one dispatch table (`Checker.infer`).
INFER: dict[str, Callable[[Checker, Node, T], T]] = {
    "field": Checker._field,
    "subexpression": Checker._subexpression,
    "identity": Checker._current,
    "current": Checker._current,
    "literal": Checker._literal,
    "comparator": Checker._comparator,
    "not_expression": Checker._not,
    "and_expression": Checker._and_or,
    "or_expression": Checker._and_or,
    "pipe": Checker._pipe,
    "function_expression": Checker._function,
    "expref": Checker._expref,
    "index_expression": Checker._index_expression,
    "index": Checker._opaque,
    "slice": Checker._opaque,
    "projection": Checker._projection,
    "filter_projection": Checker._projection,
    "flatten": Checker._flatten,
    "multi_select_list": Checker._multi_select_list,
    "multi_select_dict": Checker._parts_unknown,
    "value_projection": Checker._parts_unknown,
    "key_val_pair": Checker._key_val_pair,
}


def _children(node: Node) -> Any:
    return node.get("children", [])


_TYPE_WORDS = {"string": "a string", "number": "a number", "array": "a list",
               "object": "an object", "boolean": "a boolean", "null": "null",
               "expref": "an &expression", "array-string": "a list of strings",
               "array-number": "a list of numbers"}


def _lit_side(node: Node, a: T, b: T) -> tuple[Node, T, Node, T]:
    """(the non-literal side, its type, the literal side, its type), literal second if any."""
    left, right = node["children"]
    if _written(left, a) and not _written(right, b):
        return right, b, left, a
    return left, a, right, b


def _written(node: Node, t: T) -> bool:
    """Whether `node` is a literal as written (a read of the policy data is not: it is
    shown by its name, like a field)."""
    return t.literal is not NO_LITERAL and "data_path" not in node


def _number_text(value: Any) -> str | None:
    if isinstance(value, str):
        try:
            float(value)
        except ValueError:
            return None
        return value
    return None


def _equality_fix(node: Node, a: T, b: T) -> str:
    x, tx, y, ty = _lit_side(node, a, b)
    if not _written(y, ty):  # no fix that rewrites a literal applies to data
        ty = dataclasses.replace(ty, literal=NO_LITERAL)
    sx, sy = show(x), show(y)
    if ARR in ty.jtypes and STR in tx.jtypes and not _written(y, ty):  # actor == data.people
        x, tx, y, ty = y, ty, x, tx
        sx, sy = sy, sx
    if ARR in tx.jtypes and STR in ty.jtypes:
        neg = "" if node["value"] == "eq" else "!"
        what = "holds" if node["value"] == "eq" else "lacks"
        return f"To test whether the list {what} it, write {neg}contains({sx}, {sy})."
    if NUM in tx.jtypes and _number_text(ty.literal):
        return f"A number literal takes backquotes: {sx} {OPS[node['value']]} `{ty.literal}`."
    if BOOL in tx.jtypes and ty.literal in ("true", "false"):
        neg = "" if (ty.literal == "true") == (node["value"] == "eq") else "!"
        return (f"A boolean literal takes backquotes (`{ty.literal}`); simpler, test the "
                f"field itself: {neg}{sx}.")
    if STR in tx.jtypes and ty.literal is not NO_LITERAL and not isinstance(ty.literal, str):
        return f"A string takes single quotes: {sx} {OPS[node['value']]} " \
               f"{literal(json_text(ty.literal))}."
    if NULL in ty.jtypes and len(ty.jtypes) == 1:
        return f"{sx} is never null; test it directly, or remove the comparison."
    return "Compare values of the same type (`the-loop hooks points` lists each field's type)."


def json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _ordering_fix(node: Node, a: T, b: T) -> str:
    x, tx, y, ty = _lit_side(node, a, b)
    if not _written(y, ty):
        ty = dataclasses.replace(ty, literal=NO_LITERAL)
    op = OPS[node["value"]]
    if NUM in tx.jtypes and _number_text(ty.literal):
        left, right = (show(x), f"`{ty.literal}`")
        if x is not node["children"][0]:  # the literal was written first: keep the order
            left, right = right, left
        return f"A number literal takes backquotes: {left} {op} {right}."
    if STR in tx.jtypes:
        return (f"{show(x)} is a string: compare it with == or !=, or test it with "
                "starts_with() / ends_with() / contains().")
    return "Order numbers only (`the-loop hooks points` lists each field's type)."


def _contains_fix(node: Node, search: T) -> str:
    subject, needle = (show(c) for c in node["children"])
    if search.literal is not NO_LITERAL:
        return (f"A string takes single quotes: contains({subject}, "
                f"{literal(json_text(search.literal))}).")
    if search.jtypes <= jtypes(NUM, NULL) and NUM in search.jtypes:
        return f"Turn the number into a string first: contains({subject}, to_string({needle}))."
    return ("Look for a value of the elements' type (`the-loop hooks points` lists each "
            "field's type).")


def _argument_fix(node: Node, name: str, arg: Node, t: T) -> str:
    s = show(arg)
    rest = [show(c) for c in node["children"][1:]]
    if ARR in t.jtypes and t.elem == jtypes(STR) and name in ("starts_with", "ends_with"):
        other = rest[0] if rest else "'x'"
        return (f"To test one exact label write contains({s}, {other}); to test every "
                f"label write {s}[?{name}(@, {other})] (a non-empty list when one matches).")
    if ARR in t.jtypes and name in _ON_STRINGS:
        return f"Apply it to each element instead: {s}[?…] or map(&{name}(@), {s})."
    if NUM in t.jtypes:
        return f"Turn the number into a string first: to_string({s})."
    if STR in t.jtypes:
        return f"If the string holds a number, convert it first: to_number({s})."
    return "`the-loop hooks points` lists each field's type; docs/policy-guide.md each function's."


def type_problems(ast: Node, point: str, *, when: bool) -> list[tuple[str, str]]:
    """(sub-expression, message) for each type mistake of `ast` at `point`.

    `when`: the expression is a rule's condition, which must not be always true or false.
    """
    checker = Checker()
    t = checker.infer(ast, root_type(point))
    found = list(checker.problems)
    if when and not found and t.truth is not None and not reads_data(ast):  # else a lint
        what = "true" if t.truth else "false"
        why = (" (a number is always true in JMESPath, even 0)" if t.jtypes <= jtypes(NUM)
               else "")
        found.append((show(ast), f"is always {what} whatever the context{why}, so the rule "
                      f"{'always' if t.truth else 'never'} applies. Compare a field with a "
                      "value, or remove `when` to apply the rule always"))
    return found


def type_messages(asts: Mapping[str, Node], shown: str, *, when: bool) -> list[str]:
    """One message per type mistake of an expression compiled per point (`asts`), naming
    the expression as `shown` and the points where the mistake holds when not all."""
    at: dict[str, list[str]] = {}
    for point, ast in asts.items():
        problems = type_problems(ast, point, when=when)
        whole = show(ast) if problems else ""  # rendered only to word a mistake
        for sub, message in problems:
            text = f"{shown} {message}" if sub == whole else f"{shown}: {sub} {message}"
            at.setdefault(text, []).append(point)
    return [text if len(points) == len(asts) else f"{text} (at {', '.join(points)})"
            for text, points in at.items()]
