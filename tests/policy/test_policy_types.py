"""Typed conditions: type mistakes are load errors naming the rule, the sub-expression, both
types and the fix; a well-typed rule is never rejected (issue 15, item 3)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jmespath.parser import Parser

from the_loop.hooks.engine.points import POINTS, SPECS, WORK_ITEM_TYPES, context_from_json
from the_loop.hooks.policy import PolicyError, read_policy
from the_loop.hooks.policy.expressions import compile_expression
from the_loop.hooks.policy.exprtext import show
from the_loop.hooks.policy.typecheck import type_problems


def load_error(tmp_path: Path, when: str, on: str = "session_spawn") -> str:
    """The one load error of a rule with this `when`, after the file and rule label."""
    path = tmp_path / "rules.yaml"
    path.write_text(textwrap.dedent(f"""\
        rules:
          - name: r
            on: {on}
            when: {when!r}
            set: {{proceed: false}}
        """).replace("set: {proceed: false}", "set: {proceed: false}"
                     if on != "phase_changed" else "set: {notify: false}"), "utf-8")
    with pytest.raises(PolicyError) as info:
        read_policy(tmp_path)
    [error] = info.value.errors
    prefix = f"{path}: rule 'r' → when: "
    assert error.startswith(prefix), error
    return error[len(prefix):]


def test_a_list_compared_with_a_string_is_a_load_error_suggesting_contains(
    tmp_path: Path,
) -> None:
    assert load_error(tmp_path, "labels == 'draft'") == (
        "\"labels == 'draft'\" compares labels (a list of strings) with 'draft' (a string): "
        "they are never equal, so it is always false. To test whether the list holds it, "
        "write contains(labels, 'draft')."
    )


def test_a_list_compared_unequal_with_a_string_suggests_not_contains(tmp_path: Path) -> None:
    assert load_error(tmp_path, "labels != 'x'") == (
        "\"labels != 'x'\" compares labels (a list of strings) with 'x' (a string): they are "
        "never equal, so it is always true. To test whether the list lacks it, write "
        "!contains(labels, 'x')."
    )
    assert load_error(tmp_path, "'x' != labels").endswith("write !contains(labels, 'x').")
    assert load_error(tmp_path, "'x' == labels").endswith("write contains(labels, 'x').")


@pytest.mark.parametrize(("when", "fix"), [
    ("respawn == 'true'", "test the field itself: respawn."),
    ("respawn != 'true'", "test the field itself: !respawn."),
    ("respawn == 'false'", "test the field itself: !respawn."),
    ("respawn != 'false'", "test the field itself: respawn."),
    ("work_item.number == '5'", "work_item.number == `5`."),
    ("work_item.number != '5'", "work_item.number != `5`."),
    ("actor != `3`", "A string takes single quotes: actor != '3'."),
    ("work_item.number > '5'", "work_item.number > `5`."),
    ("'5' <= work_item.number", "A number literal takes backquotes: `5` <= work_item.number."),
])
def test_every_comparison_fix_keeps_the_operator_and_the_order_as_written(
    tmp_path: Path, when: str, fix: str
) -> None:
    assert load_error(tmp_path, when).endswith(fix)


def test_contains_of_a_value_a_list_of_strings_never_holds_is_a_load_error(
    tmp_path: Path,
) -> None:
    assert load_error(tmp_path, "contains(labels, `5`)") == (
        "'contains(labels, `5`)' asks whether labels (a list of strings) holds `5` (a number): "
        "it never can, so it is always false. A string takes single quotes: "
        "contains(labels, '5')."
    )
    assert load_error(tmp_path, "!contains(labels, work_item.number)").endswith(
        "contains(labels, work_item.number) asks whether labels (a list of strings) holds "
        "work_item.number (a number): it never can, so it is always false. Turn the number "
        "into a string first: contains(labels, to_string(work_item.number)).")
    assert load_error(tmp_path, "contains(actor, `true`)").endswith(
        "asks whether actor (a string) holds `true` (a boolean): it never can, so it is always "
        "false. A string takes single quotes: contains(actor, 'true').")
    assert load_error(tmp_path, "contains(['a', 'b'], `null`)").startswith(
        "\"contains(['a', 'b'], `null`)\" asks whether ['a', 'b'] (a list of strings) holds "
        "`null` (null)")


@pytest.mark.parametrize("word", ["true", "false", "null"])
def test_a_bare_true_false_or_null_is_a_field_and_gets_the_backquote_hint(
    tmp_path: Path, word: str
) -> None:
    assert load_error(tmp_path, f"actor == {word}") == (
        f"'actor == {word}' reads '{word}' at column 10, but the context at session_spawn has "
        f"no field '{word}'. A bare {word} is a field name in JMESPath; a JSON literal takes "
        f"backquotes: `{word}`. Valid: work_item, loop, labels, unknown_facts, actor, harness, "
        "model, command, cwd, respawn, endpoint, node, phase, effort, harness_args, prompt, "
        "proceed, reason (see `the-loop hooks points`)."
    )


def test_an_unknown_field_with_no_close_name_ends_its_sentence_before_the_valid_list(
    tmp_path: Path,
) -> None:
    assert "has no field 'zzz'. Valid: work_item," in load_error(tmp_path, "zzz == 'a'")


def test_a_number_ordered_against_a_string_is_a_load_error_suggesting_backquotes(
    tmp_path: Path,
) -> None:
    assert load_error(tmp_path, "work_item.number > '5'") == (
        "\"work_item.number > '5'\" orders work_item.number (a number) against '5' (a string) "
        "with >, which compares numbers only (anything else gives null, which is false). "
        "A number literal takes backquotes: work_item.number > `5`."
    )


def test_a_boolean_compared_with_a_string_names_the_sub_expression(tmp_path: Path) -> None:
    assert load_error(tmp_path, "contains(labels, 'x') && respawn == 'true'") == (
        "\"contains(labels, 'x') && respawn == 'true'\": respawn == 'true' compares respawn "
        "(a boolean) with 'true' (a string): they are never equal, so it is always false. "
        "A boolean literal takes backquotes (`true`); simpler, test the field itself: respawn."
    )


def test_a_builtin_given_a_field_of_a_type_it_rejects_is_a_load_error(tmp_path: Path) -> None:
    assert load_error(tmp_path, "starts_with(labels, 'x')") == (
        "\"starts_with(labels, 'x')\" calls starts_with() with labels (a list of strings) as "
        "its first argument, but starts_with() takes a string there, so every call fails. "
        "To test one exact label write contains(labels, 'x'); to test every label write "
        "labels[?starts_with(@, 'x')] (a non-empty list when one matches)."
    )
    assert load_error(tmp_path, "length(work_item.number) > `1`").startswith(
        "'length(work_item.number) > `1`': length(work_item.number) calls length() with "
        "work_item.number (a number) as its first argument, but length() takes a string or a "
        "list or an object there"
    )


@pytest.mark.parametrize(("when", "always"), [
    ("work_item.number", "true"), ("length(labels)", "true"), ("`true`", "true"),
    ("'a' == 'b'", "false"), ("!work_item", "false"),
])
def test_a_when_that_is_always_true_or_always_false_is_a_load_error(
    tmp_path: Path, when: str, always: str
) -> None:
    assert f"is always {always} whatever the context" in load_error(tmp_path, when)


def test_a_double_quoted_string_gets_the_single_quote_hint(tmp_path: Path) -> None:
    error = load_error(tmp_path, 'contains(labels, "do-not-automate")', on="work_item_start")
    assert ("has no field 'do-not-automate'. \"do-not-automate\" in double quotes is a field "
            "name in JMESPath; a string takes single quotes: 'do-not-automate'.") in error


def test_a_bare_number_gets_the_backquote_hint(tmp_path: Path) -> None:
    assert load_error(tmp_path, "work_item.number > 5") == (
        "syntax error in 'work_item.number > 5' at column 20: unexpected number 5; a number "
        "literal takes backquotes in JMESPath: `5`"
    )


def test_a_template_is_type_checked_too_but_may_be_any_value(tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(textwrap.dedent("""\
        rules:
          - name: r
            on: session_spawn
            set: {reason: "{{ upper(labels) }} / {{ work_item.number }}"}
        """), "utf-8")
    with pytest.raises(PolicyError) as info:
        read_policy(tmp_path)
    [error] = info.value.errors
    assert "→ set.reason: the placeholder {{ upper(labels) }} calls upper() with labels" in error


# ----------------------------------------------------------------- well typed: never rejected


def _fields(point: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {"str": [], "int": [], "bool": [], "list": []}
    for f in SPECS[point].fields:
        if f.type == "WorkItem":
            for k, t in WORK_ITEM_TYPES.items():
                out[t].append(f"{f.name}.{k}")
        else:
            out[{"str": "str", "int": "int", "bool": "bool", "list[str]": "list"}[f.type]].append(
                f.name)
    return out


WORDS = st.sampled_from(["a", "draft", "acme/app", "pull-request", "", "x y"])
NUMS = st.integers(min_value=-3, max_value=40)


def _quote(word: str) -> str:
    return "'" + word + "'"


@st.composite
def atom(draw: st.DrawFn, point: str) -> str:
    """A well-typed condition that reads at least one field of `point`."""
    f = _fields(point)
    choices = ["str_eq", "str_fn", "contains_lit", "contains_str", "contains_mixed"]
    if f["int"]:
        choices += ["num_cmp"]
    if f["bool"]:
        choices += ["bool", "bool_eq"]
    if f["list"]:
        choices += ["contains", "length", "index", "filter", "list"]
    kind = draw(st.sampled_from(choices))
    s = draw(st.sampled_from(f["str"]))
    w = _quote(draw(WORDS))
    if kind == "str_eq":
        return f"{s} {draw(st.sampled_from(['==', '!=']))} {w}"
    if kind == "str_fn":
        fn = draw(st.sampled_from(["starts_with", "ends_with", "contains"]))
        lowered = draw(st.sampled_from([s, f"lower({s})", f"upper({s})"]))
        return f"{fn}({lowered}, {w})"
    if kind == "contains_lit":
        return f"contains(['a', 'acme/app'], {s})"
    if kind == "contains_str":  # a string field searched for a string, literal or field
        return f"contains({s}, {draw(st.sampled_from([w, *f['str']]))})"
    if kind == "contains_mixed":  # a literal list of strings and numbers holds either
        needle = draw(st.sampled_from([*f["str"], *f["int"], w, f"`{draw(NUMS)}`"]))
        return f"contains(['a', `1`], {needle})"
    if kind == "num_cmp":
        op = draw(st.sampled_from(["==", "!=", "<", "<=", ">", ">="]))
        return f"{draw(st.sampled_from(f['int']))} {op} `{draw(NUMS)}`"
    if kind == "bool":
        return draw(st.sampled_from(f["bool"]))
    if kind == "bool_eq":
        return f"{draw(st.sampled_from(f['bool']))} == `{draw(st.sampled_from(['true', 'false']))}`"
    lst = draw(st.sampled_from(f["list"]))
    if kind == "contains":  # a list of strings searched for a string, a field or an element
        return f"contains({lst}, {draw(st.sampled_from([w, *f['str'], f'{lst}[0]']))})"
    if kind == "length":
        return f"length({lst}) {draw(st.sampled_from(['>', '==', '<=']))} `{draw(NUMS)}`"
    if kind == "index":
        return f"{lst}[0] == {w}"
    if kind == "filter":
        return f"{lst}[?starts_with(@, {w})]"
    return lst


@st.composite
def condition(draw: st.DrawFn, point: str, depth: int = 3) -> str:
    if depth == 0 or draw(st.booleans()):
        return draw(atom(point))
    op = draw(st.sampled_from(["&&", "||", "!"]))
    if op == "!":
        return f"!({draw(condition(point, depth - 1))})"
    return f"({draw(condition(point, depth - 1))}) {op} ({draw(condition(point, depth - 1))})"


@st.composite
def point_and_condition(draw: st.DrawFn) -> tuple[str, str]:
    point = draw(st.sampled_from(list(POINTS)))
    return point, draw(condition(point))


@settings(max_examples=400, deadline=None)
@given(point_and_condition())
def test_a_well_typed_condition_is_never_rejected(case: tuple[str, str]) -> None:
    point, when = case
    ast = Parser().parse(when).parsed
    assert type_problems(ast, point, when=True) == []
    assert Parser().parse(show(ast)).parsed == ast  # messages quote it back faithfully


@st.composite
def mistake(draw: st.DrawFn) -> tuple[str, str, dict[str, object]]:
    """A comparison the checker rejects, and a context of that point to run it on."""
    point = "session_spawn"
    lst = "labels"
    when = draw(st.sampled_from([
        f"{lst} == 'draft'", "work_item.number == '5'", "respawn == 'true'",
        "work_item.number > 'a'", "actor < 'm'", "work_item.kind == `1`",
        "contains(labels, `5`)", "contains(labels, work_item.number)", "contains(actor, `1`)",
        "contains(labels, `null`)", "contains(['5', 'a'], work_item.number)",
    ]))
    facts = {
        "labels": draw(st.lists(st.sampled_from(["draft", "5", "a"]), max_size=3)),
        "work_item": {"number": draw(NUMS), "kind": draw(st.sampled_from(["1", "issue"]))},
        "respawn": draw(st.booleans()), "actor": draw(st.sampled_from(["a", "z"])),
    }
    return point, when, facts


@settings(max_examples=200, deadline=None)
@given(mistake())
def test_what_the_checker_rejects_is_false_on_every_context(
    case: tuple[str, str, dict[str, object]],
) -> None:
    point, when, facts = case
    ast = Parser().parse(when).parsed
    assert type_problems(ast, point, when=True) != []
    from the_loop.hooks.engine.points import context_to_json

    data = context_to_json(context_from_json(point, facts))
    assert compile_expression(when).search(data) in (False, None)
