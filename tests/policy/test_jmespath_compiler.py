"""Tests for the JMESPath compiler of the policy engine (the_loop.jmes).

1. The official compliance suite (tests/data/jmespath-compliance, copied from the jmespath.py
   project with its licence), compiled and on the corrected reference interpreter.
2. A hypothesis property: compiled == reference on generated expressions and documents.
3. root_paths, compile-time function checks, the policy functions, field_types, fallbacks.

Where the jmespath package (1.1.0) diverges from the JMESPath specification the compiler follows
the specification (docs/jmespath-divergences.md); those cases are pinned in
``test_divergences_follow_the_specification`` and excluded, one evaluation at a time, from the
comparison with the plain package (see ``_Probe``).
"""

from __future__ import annotations

import json
import math
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import jmespath
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from jmespath import exceptions
from jmespath.visitor import Options, TreeInterpreter

from the_loop import jmes
from the_loop.hooks.policy.expressions import COMPILER as jmes_api
from the_loop.hooks.policy.expressions import compile_expression
from the_loop.hooks.policy.functions import (
    POLICY_FUNCTION_SPECS,
    POLICY_FUNCTIONS,
    InvalidValueError,
    PolicyFunctions,
)
from the_loop.jmes import compile_stats, root_paths
from the_loop.jmes.batch import (
    Condition,
    ConditionFailed,
    RecordType,
    RootType,
    compile_matcher,
    compile_value,
)
from the_loop.jmes.semantics import truthy

SUITE = Path(__file__).parents[1] / "data" / "jmespath-compliance"

# --------------------------------------------------------------------------------------------
# JMESPath equality of results (1 == 1.0, but a boolean never equals a number).
# --------------------------------------------------------------------------------------------


def jeq(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(jeq(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(jeq(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def test_jeq_distinguishes_booleans_from_numbers() -> None:
    assert jeq(1, 1.0) and jeq([1, {"a": 2}], [1.0, {"a": 2.0}])
    assert not jeq(True, 1) and not jeq([0], [False]) and not jeq({"a": 1}, {"a": True})
    assert not jeq(None, []) and not jeq("1", 1)


# --------------------------------------------------------------------------------------------
# 1. The compliance suite.
# --------------------------------------------------------------------------------------------

ERRORS: dict[str, tuple[type[BaseException], ...]] = {
    "syntax": (
        exceptions.ParseError,
        exceptions.LexerError,
        exceptions.IncompleteExpressionError,
        exceptions.EmptyExpressionError,
    ),
    "invalid-type": (exceptions.JMESPathTypeError,),
    "invalid-arity": (exceptions.ArityError, exceptions.VariadictArityError),
    "unknown-function": (exceptions.UnknownFunctionError,),
    "invalid-value": (ValueError,),  # the reference raises a plain ValueError (slice step 0)
}


def _suite() -> Iterator[Any]:
    for path in sorted(SUITE.glob("*.json")):
        index = 0
        for group in json.loads(path.read_text(encoding="utf-8")):
            for case in group["cases"]:
                yield pytest.param(group["given"], case, id=f"{path.stem}-{index}")
                index += 1


SUITE_CASES = list(_suite())


def test_the_suite_is_complete() -> None:
    assert len(SUITE_CASES) == 908
    assert (SUITE / "LICENSE.txt").exists() and (SUITE / "README.md").exists()


def _outcome(run: Any) -> tuple[str, Any]:
    """("ok", result) or ("error", exception class)."""
    try:
        return "ok", run()
    except Exception as exc:  # compared by class
        return "error", type(exc)


def _reference(text: str, data: Any) -> Any:
    """The plain jmespath package with the policy functions: the package, not the spec."""
    options = Options(custom_functions=PolicyFunctions())
    return jmespath.compile(text).search(data, options=options)


def evaluators(text: str) -> dict[str, Any]:
    """Every way the compiler can evaluate ``text``.

    "optimistic" is what compile_expression returns (bare field reads; redone by the guarded
    code on the first AttributeError), "guarded" is the code it falls back to, and "reference"
    the corrected reference interpreter (compile_expression(reference=True)).
    """
    optimistic = compile_expression(text)
    guarded = optimistic.search
    if optimistic.compiled:
        guarded, _source, _settle = jmes_api._build(optimistic.ast, None, optimistic=False)
    return {
        "optimistic": optimistic.search,
        "guarded": guarded,
        "reference": compile_expression(text, reference=True).search,
    }


# The suite's legacy `foo` literals warn (PendingDeprecationWarning) when first parsed.
@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")
@pytest.mark.parametrize(("given", "case"), SUITE_CASES)
def test_compliance(given: Any, case: dict[str, Any]) -> None:
    text = case["expression"]
    if "error" in case:
        expected = ERRORS[case["error"]]
        try:
            runs = evaluators(text)
        except expected as exc:  # syntax, arity and unknown functions: at compile time
            assert case["error"] != "syntax" or not isinstance(exc, exceptions.ArityError)
            return
        for mode, run in runs.items():
            with pytest.raises(expected) as info:
                run(given)
            if case["error"] == "invalid-value":
                reference = _outcome(lambda: _reference(text, given))
                assert reference == ("error", type(info.value)), mode
        return
    # benchmarks.json cases that only time parsing have no result: compare with the package.
    expected_result = case["result"] if "result" in case else _reference(text, given)
    for mode, run in evaluators(text).items():
        result = run(given)
        assert jeq(result, expected_result), (mode, text, result, expected_result)


ORDER_CASES = [
    # Two different errors are possible; the first one evaluated must win, as in the reference.
    ("[length(`1`), a[::0]]", {"a": [1]}),
    ("[a[::0], length(`1`)]", {"a": [1]}),
    ("{x: length(a), y: b[::0]}", {"a": 1, "b": []}),
    ("length(a) == b[::0]", {"a": 1, "b": []}),
    ("b[::0] == length(a)", {"a": 1, "b": []}),
    ("not_null(length(a), b[::0])", {"a": 1, "b": []}),
    ("contains(a[::0], length(a))", {"a": 1}),
    ("contains(length(a), a[::0])", {"a": [1]}),
    ("a[?length(@) > `0`][::0]", {"a": [1]}),
    ("sort_by(a, &length(@))[::0]", {"a": [1, 2]}),
    ("max_by(a, &b[::0])", {"a": [{"b": []}]}),
    ("a.b[::0] || length(a)", {"a": 1}),
    ("a.b[::0] || length(a)", {"a": {"b": [1]}}),
    ("`1` < length(a) && b[::0]", {"a": "xx", "b": [1]}),
    ("length(a) < b[::0]", {"a": 1, "b": []}),
    ("[length(a), b][::0]", {"a": 1}),
    ("(a || length(b))[::0]", {"b": 1}),
    ("contains(['x', 'y'], a[::0])", {"a": [1]}),
    ("`null` | contains(['x', 'y'], a)", {"a": "x"}),
    ("a | contains(['x', 'y'], b)", {"a": None}),
    ("a | contains(['x', 'y'], @)", {"a": "y"}),
    ("a | contains(['x', 'y'], @)", {"a": ["x"]}),
]


@pytest.mark.parametrize(("text", "data"), ORDER_CASES)
def test_evaluation_order_decides_the_error(text: str, data: Any) -> None:
    expected = _outcome(lambda: _reference(text, data))
    for mode, run in evaluators(text).items():
        assert _outcome(lambda r=run: r(data)) == expected, mode


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")
def test_compliance_expressions_compile() -> None:
    """Every valid suite expression is compiled, not handed to the reference interpreter."""
    fallbacks = []
    for param in SUITE_CASES:
        _given, case = param.values
        if "error" in case:
            continue
        compiled = compile_expression(case["expression"])
        if not compiled.compiled:
            fallbacks.append((case["expression"], compiled.fallback_reason))
    assert fallbacks == []


# --------------------------------------------------------------------------------------------
# 1b. The suite through the batch compiler (jmes.batch): the document is an object whose
#     scalar, list-of-string and flat-object members are read straight from its attributes.
# --------------------------------------------------------------------------------------------


def _declared(value: Any) -> str | RecordType | None:
    """The field type of a JSON value (a RecordType for a flat object), or None: not declared."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, str):
        return "str"
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "list[str]"
    if isinstance(value, dict) and value:
        fields = {k: _declared(v) for k, v in value.items()}
        if all(isinstance(t, str) for t in fields.values()):
            return RecordType(SimpleNamespace, cast("dict[str, str]", fields),
                          lambda record, value=value: value)
    return None


def _as_object(given: Any) -> tuple[Any, RootType] | None:
    """`given` as an object (SimpleNamespace) and its RootType; None unless it is an object."""
    if not isinstance(given, dict):
        return None
    fields: dict[str, str | RecordType] = {}
    attrs: dict[str, Any] = {}
    for key, value in given.items():
        declared = _declared(value)
        if declared is not None:
            fields[key] = declared
            attrs[key] = SimpleNamespace(**value) if isinstance(declared, RecordType) else value
    return SimpleNamespace(**attrs), RootType(fields, lambda obj, given=given: given)


def _suite_groups() -> Iterator[Any]:
    for path in sorted(SUITE.glob("*.json")):
        for index, group in enumerate(json.loads(path.read_text(encoding="utf-8"))):
            yield pytest.param(group, id=f"{path.stem}-{index}")


def _parsed(text: str) -> Any:
    try:
        return compile_expression(text, reference=True)
    except exceptions.JMESPathError:  # syntax, arity, unknown function: no evaluation
        return None


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")
@pytest.mark.parametrize("group", list(_suite_groups()))
def test_compliance_through_the_batch_compiler(group: dict[str, Any]) -> None:
    """Each case as a value (compile_value) and all of a group's cases as one matcher, in both
    error modes: the same results, truth and errors as the reference, condition by condition."""
    found = _as_object(group["given"])
    if found is None:
        pytest.skip("the document is not an object")
    obj, shape = found
    given = group["given"]
    conditions: list[Condition] = []
    outcomes: list[tuple[str, Any]] = []
    for case in group["cases"]:
        reference = _parsed(case["expression"])
        if reference is None:
            continue
        expected = _outcome(lambda r=reference: r.search(given))
        value = compile_value(reference.ast, shape, reference.search)
        got = _outcome(lambda v=value: v(obj))
        assert got[0] == expected[0] and (
            jeq(got[1], expected[1]) if got[0] == "ok" else got[1] is expected[1]
        ), (case["expression"], got, expected)
        conditions.append(Condition(reference.ast, len(conditions), reference.search))
        outcomes.append(expected)
    hits, errors = compile_matcher(conditions, shape, collect_errors=True)(obj)
    assert hits == [i for i, (kind, r) in enumerate(outcomes) if kind == "ok" and truthy(r)]
    assert [(i, type(e)) for i, e in errors] == [
        (i, r) for i, (kind, r) in enumerate(outcomes) if kind == "error"
    ]
    first_error = next((i for i, (kind, _) in enumerate(outcomes) if kind == "error"), None)
    matcher = compile_matcher(conditions, shape)
    if first_error is None:
        assert matcher(obj) == hits
    else:
        with pytest.raises(ConditionFailed) as info:
            matcher(obj)
        assert info.value.tag == first_error
        assert type(info.value.error) is outcomes[first_error][1]


# --------------------------------------------------------------------------------------------
# Divergences between the package and the specification (docs/jmespath-divergences.md).
# --------------------------------------------------------------------------------------------

DIVERGENCES: list[tuple[str, Any, Any]] = [
    # (expression, data, specification's answer); "ERR:<class>" = must raise that class
    ("a > '5'", {"a": 1}, None),
    ("a < b", {"a": "a", "b": "b"}, None),
    ("a <= b", {"a": "a", "b": "a"}, None),
    ("`[1]` == `[true]`", {}, False),
    ('`{"a": 0}` != `{"a": false}`', {}, True),
    ("contains(`[1]`, `true`)", {}, False),
    ("contains(`[false]`, `0`)", {}, False),
    ("contains('abc', `1`)", {}, False),
    ("to_number('1_000')", {}, None),
    ("to_number(' 12 ')", {}, None),
    ("to_number('nan')", {}, None),
    ("to_number('Infinity')", {}, None),
    ("to_number('+1')", {}, None),
    ("to_number('.5')", {}, None),
    ("to_number('1.')", {}, None),
    ("to_number('012')", {}, None),
    ("to_number('\u0663')", {}, None),
    ("max_by(@, &k)", [{"k": 1}, {"k": "a"}], "ERR:JMESPathTypeError"),
    ("min_by(@, &k)", [{"k": "a"}, {"k": 1}], "ERR:JMESPathTypeError"),
    ("merge(`{}`, `1`)", {}, "ERR:JMESPathTypeError"),
    ('merge(`{}`, `[["a", 1]]`)', {}, "ERR:JMESPathTypeError"),
]


@pytest.mark.parametrize("mode", ["compiled", "reference"])
@pytest.mark.parametrize(("text", "data", "expected"), DIVERGENCES)
def test_divergences_follow_the_specification(
    text: str, data: Any, expected: Any, mode: str
) -> None:
    expression = compile_expression(text, reference=mode == "reference")
    assert expression.compiled is (mode == "compiled")
    package = _outcome(lambda: _reference(text, data))
    if isinstance(expected, str) and expected.startswith("ERR:"):
        with pytest.raises(getattr(exceptions, expected[4:])):
            expression.search(data)
        assert package[0] == "ok" or package[1] is not getattr(exceptions, expected[4:])
    else:
        assert jeq(expression.search(data), expected)
        assert package[0] == "error" or not jeq(package[1], expected)


SPEC_AGREES = [
    # Things that look like divergences but are not: the package follows the spec here.
    ("`1` == `true`", {}, False),
    ("`0` != `false`", {}, True),
    ("a < b", {"a": 1, "b": 2.5}, True),
    ("a < b", {"a": True, "b": 2}, None),
    ("!`0`", {}, False),
    ("to_number('1e3')", {}, 1000.0),
    ("to_number('-0.5')", {}, -0.5),
    ("contains('abc', 'b')", {}, True),
    ("max_by(@, &k).k", [{"k": "a"}, {"k": "b"}], "b"),
]


@pytest.mark.parametrize(("text", "data", "expected"), SPEC_AGREES)
def test_package_and_spec_agree(text: str, data: Any, expected: Any) -> None:
    assert jeq(_reference(text, data), expected)
    assert jeq(compile_expression(text).search(data), expected)
    assert jeq(compile_expression(text, reference=True).search(data), expected)


# --------------------------------------------------------------------------------------------
# 2. Property: compiled == reference on generated expressions and documents.
# --------------------------------------------------------------------------------------------

_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")


class _Probe:
    """Evaluates with the plain package, noting where the specification would differ.

    The spec side is written here independently of the compiler: ordering only between numbers,
    ``jeq`` equality, ``contains`` with ``jeq``, ``to_number`` on the JSON grammar, consistent
    ``max_by``/``min_by`` keys, object-only ``merge``. When any evaluated operation diverges,
    the plain package is not an oracle for that example (the corrected interpreter still is).
    """

    def __init__(self) -> None:
        self.diverged = False
        probe = self

        def is_num(x: Any) -> bool:
            return isinstance(x, (int, float)) and not isinstance(x, bool)

        class Interpreter(TreeInterpreter):
            def visit_comparator(self, node: Any, value: Any) -> Any:
                left = self.visit(node["children"][0], value)
                right = self.visit(node["children"][1], value)
                op = node["value"]
                if op in ("eq", "ne"):
                    spec: Any = jeq(left, right) == (op == "eq")
                elif is_num(left) and is_num(right):
                    spec = TreeInterpreter.COMPARATOR_FUNC[op](left, right)
                else:
                    spec = None
                try:
                    package = super().visit_comparator(node, value)
                except TypeError:
                    probe.diverged = True
                    raise
                if not jeq(package, spec):
                    probe.diverged = True
                return package

        class Functions(PolicyFunctions):
            def call_function(self, function_name: str, resolved_args: Any) -> Any:
                args = list(resolved_args)
                try:
                    package = super().call_function(function_name, args)
                except TypeError:
                    probe.diverged = True
                    raise
                except ValueError:
                    if function_name == "merge":
                        probe.diverged = True
                    raise
                if function_name == "contains":
                    subject, search = args
                    if isinstance(subject, str):
                        spec = isinstance(search, str) and search in subject
                    else:
                        spec = any(jeq(e, search) for e in subject)
                    probe.diverged |= spec is not package
                elif function_name == "to_number" and isinstance(args[0], str):
                    if _JSON_NUMBER.fullmatch(args[0]) is None:
                        probe.diverged |= package is not None
                elif function_name == "merge":
                    probe.diverged |= not all(isinstance(a, dict) for a in args)
                elif function_name in ("max_by", "min_by"):
                    array, expref = args
                    kinds = {type(expref.visit(expref.expression, e)) for e in array}
                    probe.diverged |= len(kinds - {float}) > 1 and kinds - {float} != {int}
                return package

        self.interpreter = Interpreter(Options(custom_functions=Functions()))

    def search(self, text: str, data: Any) -> Any:
        return self.interpreter.visit(jmespath.compile(text).parsed, data)


FIELDS = ["a", "b", "c", "foo", "bar"]
STRINGS = ["", "a", "b", "foo", "Foo", "1", "2.5", " 3", "ab", "b\u00e9"]

documents = st.recursive(
    st.none()
    | st.booleans()
    | st.sampled_from([0, 1, -1, 2, 3, 0.0, 1.0, 2.5, -0.5])
    | st.sampled_from(STRINGS),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.sampled_from(FIELDS), children, max_size=4)
    ),
    max_leaves=14,
)

LITERALS = [
    "`1`",
    "`0`",
    "`2.5`",
    "`-1`",
    '`"a"`',
    "'b'",
    "''",
    "`true`",
    "`false`",
    "`null`",
    "`[]`",
    "`[1, 2]`",
    '`{"a": 1}`',
    "`{}`",
    "'1'",
    "`[0, false]`",
]


def _expressions(max_leaves: int = 8) -> st.SearchStrategy[str]:
    field = st.sampled_from(FIELDS)
    leaf = field | st.sampled_from(["@", *LITERALS])

    def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        p = inner.map(lambda x: f"({x})")
        two = st.tuples(p, p)
        ops = st.sampled_from(["==", "!=", "<", "<=", ">", ">="])
        return st.one_of(
            st.tuples(p, field).map(lambda t: f"{t[0]}.{t[1]}"),
            st.tuples(field, field, field).map(".".join),
            st.tuples(p, st.sampled_from(["[0]", "[1]", "[-1]", "[5]"])).map("".join),
            st.tuples(
                p, st.sampled_from(["[1:]", "[::-1]", "[:2]", "[::2]", "[-2:]", "[1:3:1]", "[::0]"])
            ).map("".join),
            st.tuples(
                p, st.sampled_from(["[*]", "[]", ".*"]), st.sampled_from(["", ".a", ".b"])
            ).map("".join),
            st.tuples(field, st.sampled_from(["[*].", "[].", "[?@]."]), field).map("".join),
            st.tuples(
                field,
                st.sampled_from(["[*]", "[]", ".*", "[?a]", "[1:]"]),
                st.sampled_from(
                    [
                        ".[a, b]",
                        ".{x: a, y: b}",
                        "[0]",
                        "[*].a",
                        "[].b",
                        ".a[*]",
                        "[?@ == `1`]",
                        "[::-1]",
                        ".*",
                        "[]",
                    ]
                ),
            ).map("".join),
            st.tuples(p, inner, st.sampled_from(["", ".a", "[0]"])).map(
                lambda t: f"{t[0]}[?{t[1]}]{t[2]}"
            ),
            st.tuples(p, ops, p).map(" ".join),
            st.tuples(field, ops, st.sampled_from(LITERALS)).map(" ".join),
            two.map(lambda t: f"{t[0]} && {t[1]}"),
            two.map(lambda t: f"{t[0]} || {t[1]}"),
            p.map(lambda x: f"!{x}"),
            two.map(lambda t: f"[{t[0]}, {t[1]}]"),
            two.map(lambda t: f"{{x: {t[0]}, y: {t[1]}}}"),
            st.tuples(inner, inner).map(lambda t: f"{t[0]} | {t[1]}"),
            st.tuples(field, field, inner).map(lambda t: f"{t[0]}[*].{t[1]} | {t[2]}"),
            st.tuples(
                st.sampled_from(
                    [
                        "length",
                        "sort",
                        "to_string",
                        "type",
                        "to_number",
                        "keys",
                        "values",
                        "reverse",
                        "max",
                        "min",
                        "sum",
                        "avg",
                        "abs",
                        "floor",
                        "to_array",
                        "not_null",
                    ]
                ),
                inner,
            ).map(lambda t: f"{t[0]}({t[1]})"),
            st.tuples(
                st.sampled_from(["contains", "starts_with", "ends_with", "not_null", "merge"]),
                inner,
                inner,
            ).map(lambda t: f"{t[0]}({t[1]}, {t[2]})"),
            st.tuples(st.sampled_from(["sort_by", "max_by", "min_by"]), inner, inner).map(
                lambda t: f"{t[0]}({t[1]}, &{t[2]})"
            ),
            st.tuples(inner, inner).map(lambda t: f"map(&{t[0]}, {t[1]})"),
            st.tuples(inner).map(lambda t: f"join(',', {t[0]})"),
            st.tuples(
                st.sampled_from(
                    ["regex_match('^a', ", "glob_match('a*', ", "contains(['a', 'b', '1'], "]
                ),
                inner,
            ).map(lambda t: f"{t[0]}{t[1]})"),
            st.tuples(st.sampled_from(["lower", "upper"]), inner).map(lambda t: f"{t[0]}({t[1]})"),
        )

    return st.recursive(leaf, extend, max_leaves=max_leaves)


def _same(a: tuple[str, Any], b: tuple[str, Any]) -> bool:
    if a[0] != b[0]:
        return False
    return a[1] is b[1] if a[0] == "error" else jeq(a[1], b[1])


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")
@settings(
    max_examples=400,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(text=_expressions(), data=documents)
def test_compiled_matches_reference(text: str, data: Any) -> None:
    try:
        compiled = compile_expression(text)
    except exceptions.ParseError:
        assume(False)
        return
    assert compiled.compiled, compiled.fallback_reason
    runs = evaluators(text)
    got = _outcome(lambda: runs["optimistic"](data))
    # Always: the guarded code and the corrected reference interpreter (the safety net).
    assert _same(got, _outcome(lambda: runs["guarded"](data))), (text, data, got)
    assert _same(got, _outcome(lambda: runs["reference"](data))), (text, data, got)
    # Unless a divergence from the specification was met: the plain jmespath package.
    probe = _Probe()
    plain = _outcome(lambda: probe.search(text, data))
    if not probe.diverged:
        assert _same(got, plain), (text, data, got, plain)


# --------------------------------------------------------------------------------------------
# 3. root_paths.
# --------------------------------------------------------------------------------------------


def _paths(text: str) -> list[tuple[str, ...]]:
    return root_paths(compile_expression(text).ast)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "work_item.kind == 'x' && contains(labels, 'y')",
            [("work_item", "kind"), ("labels",)],
        ),
        ("labels[?@ == 'x']", [("labels",)]),
        ("items[*].name", [("items",)]),
        ("items[].name", [("items",)]),
        ("items[?state == 'open'].title", [("items",)]),
        ("items[0].name", [("items",)]),
        ("items[1:].name", [("items",)]),
        ("work_item.*.name", [("work_item",)]),
        ("*.name", []),
        ("[*].name", []),
        ("sort_by(items, &name)", [("items",)]),
        ("max_by(items, &age).name", [("items",)]),
        ("map(&x.y, items)", [("items",)]),
        ("work_item | kind", [("work_item", "kind")]),
        ("items[*].a | [0].b", [("items",)]),
        ("items[0] | name", [("items",)]),
        ("@.work_item.kind", [("work_item", "kind")]),
        ("{k: work_item.kind, l: labels}", [("work_item", "kind"), ("labels",)]),
        ("[work_item.kind, `1`]", [("work_item", "kind")]),
        ("work_item.[kind, ref]", [("work_item", "kind"), ("work_item", "ref")]),
        ("work_item && work_item.kind", [("work_item", "kind")]),
        ("(a || b).c", [("a", "c"), ("b", "c")]),
        ("(a && b).c", [("a",), ("b", "c")]),
        ("merge(a, b).c", [("a",), ("b",)]),
        ("not_null(a, b).c", [("a", "c"), ("b", "c")]),
        ("length(labels) > `3`", [("labels",)]),
        ("!contains(labels, 'trusted')", [("labels",)]),
        ('`{"a": 1}`.a', []),
        ("'lit'", []),
        ("sort(labels)[0].x", [("labels",)]),
        ('"quoted key".x', [("quoted key", "x")]),
        ("a.b.c == a.b.d", [("a", "b", "c"), ("a", "b", "d")]),
        ("a[?b == c.d].e", [("a",)]),
        ("items[*][?x].y", [("items",)]),
        ("flat[]", [("flat",)]),
        ("work_item.labels[]", [("work_item", "labels")]),
    ],
)
def test_root_paths(text: str, expected: list[tuple[str, ...]]) -> None:
    assert _paths(text) == expected


def test_root_paths_catches_typos() -> None:
    known = {("work_item", "kind"), ("labels",)}
    paths = _paths("work_item.kindd == 'x' || contains(lables, 'y')")
    assert set(paths) - known == {("work_item", "kindd"), ("lables",)}


# --------------------------------------------------------------------------------------------
# Compile-time function checks.
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("reference", [False, True])
def test_unknown_function_is_a_compile_time_error(reference: bool) -> None:
    with pytest.raises(exceptions.UnknownFunctionError):
        compile_expression("false_field && nope(a)", reference=reference)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("length(a, b)", exceptions.ArityError),
        ("length()", exceptions.ArityError),
        ("regex_match('x')", exceptions.ArityError),
        ("a || lower(a, b)", exceptions.ArityError),
        ("not_null()", exceptions.VariadictArityError),
        ("merge()", exceptions.VariadictArityError),
        ("items[?starts_with(@)]", exceptions.ArityError),
    ],
)
def test_arity_is_checked_at_compile_time(text: str, error: type[Exception]) -> None:
    with pytest.raises(error) as info:
        compile_expression(text)
    assert type(info.value) is error


def test_parse_errors_are_jmespaths_own() -> None:
    with pytest.raises(exceptions.ParseError) as info:
        compile_expression("work_item.kind ==")
    assert isinstance(info.value, exceptions.IncompleteExpressionError)
    with pytest.raises(exceptions.LexerError) as lexer:
        compile_expression("a = b")
    assert lexer.value.lex_position == 2
    with pytest.raises(exceptions.ParseError) as parse:
        compile_expression("a.[")
    assert parse.value.lex_position == 3


# --------------------------------------------------------------------------------------------
# Policy functions, compiled and in the reference.
# --------------------------------------------------------------------------------------------

CONTEXT = {
    "work_item": {
        "kind": "pull-request",
        "repository": "acme/app",
        "ref": "release/1.2",
        "title": "Fix Ünïcode",
    },
    "labels": ["bug", "trusted"],
    "path": "docs/guide.md",
    "pattern": "^rel",
}

FUNCTION_CASES: list[tuple[str, Any]] = [
    ("regex_match('^release/', work_item.ref)", True),
    ("regex_match('1\\.2$', work_item.ref)", True),
    ("regex_match('^1', work_item.ref)", False),
    ("regex_match('elease', work_item.ref)", True),  # search, not match
    ("regex_match(pattern, work_item.ref)", True),
    ("glob_match('docs/*.md', path)", True),
    ("glob_match('*.MD', path)", False),
    ("glob_match('docs/g?ide.[mx]d', path)", True),
    ("glob_match('docs', path)", False),
    ("lower(work_item.title)", "fix ünïcode"),
    ("upper(work_item.kind)", "PULL-REQUEST"),
    ("labels[?regex_match('^t', @)]", ["trusted"]),
    ("lower(work_item.kind) == 'pull-request' && glob_match('acme/*', work_item.repository)", True),
]


@pytest.mark.parametrize("reference", [False, True])
@pytest.mark.parametrize(("text", "expected"), FUNCTION_CASES)
def test_policy_functions(text: str, expected: Any, reference: bool) -> None:
    expression = compile_expression(text, reference=reference)
    assert expression.compiled is not reference
    assert jeq(expression.search(CONTEXT), expected)
    options = Options(custom_functions=PolicyFunctions())
    assert jeq(jmespath.search(text, CONTEXT, options=options), expected)


@pytest.mark.parametrize("reference", [False, True])
@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("regex_match('(', work_item.ref)", InvalidValueError),
        ("regex_match(pattern, work_item.ref)", InvalidValueError),
        ("regex_match('x', missing)", exceptions.JMESPathTypeError),
        ("regex_match(`1`, work_item.ref)", exceptions.JMESPathTypeError),
        ("glob_match('*', labels)", exceptions.JMESPathTypeError),
        ("lower(labels)", exceptions.JMESPathTypeError),
        ("upper(`null`)", exceptions.JMESPathTypeError),
    ],
)
def test_policy_function_errors(text: str, error: type[Exception], reference: bool) -> None:
    context = {**CONTEXT, "pattern": "("} if "pattern" in text else CONTEXT
    expression = compile_expression(text, reference=reference)
    with pytest.raises(error):
        expression.search(context)
    with pytest.raises(error):
        jmespath.search(text, context, options=Options(custom_functions=PolicyFunctions()))


def test_invalid_value_is_a_value_error() -> None:
    assert issubclass(InvalidValueError, exceptions.JMESPathError)
    assert issubclass(InvalidValueError, ValueError)


def test_policy_function_table() -> None:
    assert {"regex_match", "glob_match", "lower", "upper"} <= set(POLICY_FUNCTIONS)
    for name, (signature, doc, example) in POLICY_FUNCTIONS.items():
        assert signature.startswith(f"{name}(") and doc and f"{name}(" in example
        compile_expression(example)  # every documented example compiles
        spec = POLICY_FUNCTION_SPECS[name]
        too_many = ", ".join(["@"] * (len(spec.arg_types) + 1))
        with pytest.raises(exceptions.ArityError):
            compile_expression(f"{name}({too_many})")
    assert POLICY_FUNCTION_SPECS["regex_match"].arg_types == (("string",), ("string",))


# --------------------------------------------------------------------------------------------
# field_types, fallbacks, stats, immutability.
# --------------------------------------------------------------------------------------------

FIELD_TYPES = {
    "kind": "str",
    "draft": "bool",
    "count": "int",
    "labels": "list[str]",
    "work_item": "object",
}


@pytest.mark.parametrize(
    "text",
    [
        "kind == 'pr' && !draft",
        "kind || 'none'",
        "draft == `false`",
        "count > `2` && contains(labels, 'x')",
        "count == `0`",
        "!labels",
        "labels && length(labels)",
        "work_item.kind && work_item.title",
        "kind < 'z'",
        "kind == draft",
    ],
)
@pytest.mark.parametrize(
    "data",
    [
        {"kind": "pr", "draft": False, "count": 3, "labels": ["x"], "work_item": {"kind": "a"}},
        {"kind": "", "draft": True, "count": 0, "labels": [], "work_item": {}},
        {},
        {"kind": None, "draft": None, "count": None, "labels": None, "work_item": None},
    ],
)
def test_field_types_do_not_change_results(text: str, data: dict[str, Any]) -> None:
    typed = compile_expression(text, field_types=FIELD_TYPES)
    assert typed.compiled
    assert jeq(typed.search(data), compile_expression(text).search(data))
    assert jeq(typed.search(data), compile_expression(text, reference=True).search(data))


def test_field_types_object_is_not_trusted_for_field_reads() -> None:
    """Reading a field is guarded even for a declared object: a wrong type gives null, as usual."""
    typed = compile_expression("work_item.kind", field_types={"work_item": "object"})
    assert typed.search({"work_item": ["not", "an", "object"]}) is None
    assert typed.search({"work_item": {"kind": "k"}}) == "k"


def test_field_types_are_validated() -> None:
    with pytest.raises(ValueError, match="unknown type"):
        compile_expression("a", field_types={"a": "string"})


def test_field_types_specialise() -> None:
    plain = compile_expression("kind && !draft")
    typed = compile_expression("kind && !draft", field_types={"kind": "str", "draft": "bool"})
    assert "== 0" in plain.source and "== 0" not in typed.source


def test_fallback_for_an_expression_reference_used_as_a_value() -> None:
    before = compile_stats()
    expression = compile_expression("&foo")
    assert not expression.compiled and "expression reference" in expression.fallback_reason
    assert compile_stats()["fallback"] == before["fallback"] + 1
    for text, data in [("not_null(&a)", {}), ("length(&a)", {}), ("sort_by(@, a)", [1])]:
        fallback = compile_expression(text)
        assert not fallback.compiled
        assert (
            _same(
                _outcome(lambda f=fallback, d=data: f.search(d)),
                _outcome(lambda t=text, d=data: _reference(t, d)),
            )
            or text == "not_null(&a)"
        )


def test_optimistic_code_deoptimizes_once() -> None:
    expression = compile_expression("a.b.c")
    fast = expression.search
    assert "except AttributeError" in expression.source
    assert expression.search({"a": {"b": {"c": 1}}}) == 1
    assert expression.search is fast
    assert expression.search({"a": None}) is None  # None has no .get: redone by guarded code
    assert expression.search is not fast  # ... which is the evaluator from now on
    assert expression.search({"a": {"b": {"c": 2}}}) == 2
    assert expression.search({"a": [1]}) is None
    assert fast({"a": "s"}) is None and fast({"a": {"b": {"c": 3}}}) == 3  # a stale reference
    errors = compile_expression("a.b || length(a.c)")
    with pytest.raises(exceptions.JMESPathTypeError):
        errors.search({"a": {"b": None, "c": 1}})
    with pytest.raises(exceptions.JMESPathTypeError):
        errors.search({"a": None})


def test_reference_is_counted_separately() -> None:
    before = compile_stats()
    compile_expression("a", reference=True)
    compile_expression("a")
    after = compile_stats()
    assert after["reference"] == before["reference"] + 1
    assert after["compiled"] == before["compiled"] + 1
    assert after["fallback"] == before["fallback"]


def test_lazy_expression_generates_its_code_on_first_use() -> None:
    """lazy=True checks now (errors are the same) and generates, and counts, on first use."""
    with pytest.raises(exceptions.UnknownFunctionError):
        compile_expression("nope(a)", lazy=True)
    before = compile_stats()
    lazy = compile_expression("a.b[0] == `1`", lazy=True)
    assert compile_stats() == before and "source" not in lazy.__dict__
    assert lazy.search({"a": {"b": [1]}}) is True and lazy.search({"a": None}) is False
    assert compile_stats()["compiled"] == before["compiled"] + 1
    assert lazy.compiled and lazy.source
    fallback = compile_expression("&a", lazy=True)
    assert not fallback.compiled and "expression reference" in fallback.fallback_reason
    assert compile_stats()["fallback"] == before["fallback"] + 1
    assert not hasattr(compile_expression("a", lazy=True), "nonsense")


def test_compiled_expression_is_immutable() -> None:
    expression = compile_expression("work_item.kind")
    assert expression.text == "work_item.kind" and expression.fallback_reason == ""
    assert expression.ast == jmespath.compile("work_item.kind").parsed
    with pytest.raises(AttributeError):
        expression.text = "x"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del expression.compiled
    assert "work_item.kind" in repr(expression)


def test_deep_nesting_compiles() -> None:
    """Deeply nested projections and parentheses are split into helper functions."""
    text = ".".join(f"f{i}[*]" for i in range(60))
    data: Any = [1]
    for i in reversed(range(60)):
        data = {f"f{i}": [data]}
    expression = compile_expression(text)
    assert expression.compiled
    assert jeq(expression.search(data), _reference(text, data))
    nested = "a" + " || (b" * 60 + ")" * 60
    deep = compile_expression(nested)
    assert deep.search({"b": 2}) == 2


def test_many_distinct_expressions_compile_quickly() -> None:
    import time

    start = time.perf_counter()
    for i in range(200):
        compile_expression(f"work_item.kind == 'k{i}' && length(labels) > `{i}`")
    assert time.perf_counter() - start < 2.0


def test_literal_results_are_fresh_enough() -> None:
    """Literals behave as in the reference (the same object each time)."""
    expression = compile_expression("`[1, 2]`")
    assert expression.search({}) == [1, 2]


def test_no_warnings_from_generated_code() -> None:
    assert frozenset(FIELD_TYPES.values()) == jmes.FIELD_TYPES
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compile_expression("a.b")


@pytest.mark.parametrize(("text", "column"), [
    ("contains(labels 'base:main')", 17),   # a comma missing between two arguments
    ("join('-' labels)", 10),
    ("length(a,)", 9),                      # a comma not followed by an argument
])
def test_function_arguments_are_separated_by_commas_as_the_spec_requires(
    text: str, column: int
) -> None:
    """Issue 30.16: the package parses these (its parser treats each comma as optional); the
    specification's grammar does not, so the compiler refuses them at the separator."""
    import jmespath

    jmespath.compile(text)  # the package accepts it
    with pytest.raises(exceptions.ParseError) as info:
        compile_expression(text)
    assert info.value.lex_position + 1 == column
    with pytest.raises(exceptions.IncompleteExpressionError):
        compile_expression("length(a")  # the end of input is still "incomplete"
