"""Loading a policy folder (issue 5, build items 1-3): every error fails the load, all at once.

Each test writes real rule files in tmp_path and asserts the message names the file, the
rule, the key and, for an expression, the expression and the column. Names: i5_<item>.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from the_loop.errors import HooksConfigError, LoopError
from the_loop.hooks.declaring.loading import load_chain
from the_loop.hooks.executors.policy import load_policy
from the_loop.hooks.policy import PolicyError


def write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def load_errors(folder: Path) -> list[str]:
    with pytest.raises(PolicyError) as info:
        load_policy("house", folder)
    assert isinstance(info.value, LoopError)
    for error in info.value.errors:  # str lists every error, one per line
        assert error in str(info.value)
    return info.value.errors


def only_error(folder: Path) -> str:
    errors = load_errors(folder)
    assert len(errors) == 1, errors
    return errors[0]


def rule(folder: Path, body: str, name: str = "rules.yaml") -> Path:
    return write(folder, name, "rules:\n" + textwrap.indent(textwrap.dedent(body), "  "))


# ------------------------------------------------------------------------ the folder


def test_i5_1_loads_every_yaml_and_yml_file_in_name_order_not_tests(tmp_path: Path) -> None:
    rule(tmp_path, "- {name: second, on: work_item_start, set: {reason: b}}\n", "b.yml")
    rule(tmp_path, "- {name: first, on: work_item_start, set: {reason: a}}\n", "a.yaml")
    write(tmp_path / "tests", "cases.yaml", "not: [a rule file")
    (tmp_path / "notes.txt").write_text("ignored", encoding="utf-8")
    executor = load_policy("house", tmp_path)
    assert executor.rules_at("work_item_start") == ["first", "second"]
    assert executor.points() == ("work_item_start",)


def test_i5_1_missing_folder_fails(tmp_path: Path) -> None:
    error = only_error(tmp_path / "nope")
    assert str(tmp_path / "nope") in error and "no such folder" in error


def test_i5_1_folder_without_rule_files_fails(tmp_path: Path) -> None:
    write(tmp_path, "README.md", "# rules go here")
    assert "no rule files" in only_error(tmp_path)


def test_i5_1_required_policy_entry_with_missing_folder_fails_the_load(
    write_config: object, tmp_path: Path
) -> None:
    config = write_config(  # type: ignore[operator]
        """
        hooks:
          - name: house-rules
            policy: policies
            required: true
        """
    )
    with pytest.raises(HooksConfigError) as info:
        load_chain(config)
    text = str(info.value)
    assert "hooks[0] ('house-rules') → policy:" in text
    assert str(tmp_path / "policies") in text and "no such folder" in text


def test_i5_1_policy_entry_on_narrows_the_points(tmp_path: Path) -> None:
    rule(tmp_path, """
        - {name: a, on: [work_item_start, session_spawn], set: {reason: a}}
        - {name: b, on: [session_spawn, input_received], set: {proceed: false}}
    """)
    executor = load_policy("house", tmp_path, points=("session_spawn", "waiting_for_input"))
    assert executor.points() == ("session_spawn",)


def test_i15_6_a_rule_the_entry_on_leaves_nowhere_to_run_fails_the_load(tmp_path: Path) -> None:
    path = rule(tmp_path, """
        - {name: a, on: work_item_start, set: {reason: a}}
        - {name: b, on: [session_spawn, input_received], set: {proceed: false}}
    """)
    with pytest.raises(PolicyError) as info:
        load_policy("house", tmp_path, points=("session_spawn", "waiting_for_input"))
    assert info.value.errors == [
        f"{path}: rule 'a' runs at work_item_start, which this entry's on: [session_spawn, "
        "waiting_for_input] leaves out, so it would never run; add its point to on:, or move "
        "the rule to another policy folder"
    ]


# ------------------------------------------------------------------------ file shape


def test_i5_3_file_that_is_not_yaml_names_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, "bad.yaml", "rules:\n  - name: x\n    on: [a\n")
    error = only_error(tmp_path)
    assert error.startswith(f"{path}: not valid YAML at line ")
    assert "column" in error


def test_inner_double_quotes_in_a_when_name_the_rule_and_say_strings_take_single_quotes(
    tmp_path: Path,
) -> None:
    path = rule(tmp_path, """
        - name: first
          on: work_item_start
          set: {proceed: false}
        - name: refuse-by-label
          on: work_item_start
          when: "contains(labels, "do-not-automate")"
          set: {proceed: false}
    """)
    assert only_error(tmp_path) == (
        f"{path}: not valid YAML at line 8, column 30: did not find expected key (in rule "
        "'refuse-by-label' → when). JMESPath strings take single quotes: when: "
        "\"contains(labels, 'do-not-automate')\""
    )
    rule(tmp_path, """
        - {name: flow, on: work_item_start, when: "contains(labels, "x")", set: {proceed: false}}
    """)
    assert only_error(tmp_path).endswith(
        "(in rule 'flow' → when). JMESPath strings take single quotes: when: "
        "\"contains(labels, 'x')\"")


@pytest.mark.parametrize(("when", "says"), [
    ('     when: "!terminal"', "mapping values are not allowed in this context (in rule "
     "'quiet' → when). when: is indented 5 space(s), where on: on line 6 is at 4: YAML "
     "places a key by its indentation, so indent when: 4 spaces to line it up with on:"),
    ('   when: "!terminal"', "did not find expected '-' indicator (in rule 'quiet' → when). "
     "when: is indented 3 space(s), where on: on line 6 is at 4: YAML places a key by its "
     "indentation, so indent when: 4 spaces to line it up with on:"),
    ('\twhen: "!terminal"', "(in rule 'quiet' → when). A tab indents this line: YAML "
     "indents with spaces only; use spaces"),
])
def test_i30_18_an_indentation_slip_names_the_rule_and_the_key_to_line_up_with(
    tmp_path: Path, when: str, says: str
) -> None:
    """YAML's own words ("did not find expected key") named no rule and gave no hint."""
    folder = tmp_path / "p"
    folder.mkdir()
    (folder / "r.yaml").write_text(
        "rules:\n  - name: first\n    on: phase_changed\n    set: {notify: false}\n"
        "  - name: quiet\n    on: phase_changed\n" + when + "\n    set: {notify: false}\n",
        encoding="utf-8")
    error = only_error(folder)
    assert error.startswith(f"{folder / 'r.yaml'}: not valid YAML at line 7, column "), error
    assert error.endswith(says), error


def test_i30_18_a_value_indented_short_of_its_siblings_names_the_sibling(tmp_path: Path) -> None:
    path = rule(tmp_path, """
        - name: other
          on: session_spawn
          set:
              proceed: false
            reason: x
    """)
    assert only_error(tmp_path) == (
        f"{path}: not valid YAML at line 7, column 7: did not find expected key (in rule "
        "'other' → reason). reason: is indented 6 space(s), where proceed: on line 6 is at 8: "
        "YAML places a key by its indentation, so indent reason: 8 spaces to line it up with "
        "proceed:")


def test_a_single_quoted_when_holding_single_quoted_strings_says_wrap_it_in_double_quotes(
    tmp_path: Path,
) -> None:
    """The comment `init` writes says JMESPath strings take single quotes; a YAML
    single-quoted condition then ends at the first of them."""
    path = rule(tmp_path, """
        - name: quiet
          on: phase_changed
          when: 'contains(labels, 'quiet') && !terminal'
          set: {notify: false}
    """)
    assert only_error(tmp_path) == (
        f"{path}: not valid YAML at line 5, column 30: did not find expected key (in rule "
        "'quiet' → when). A single-quoted YAML string ends at the next ' (JMESPath strings "
        "inside need them): wrap the value in double quotes: when: \"contains(labels, "
        "'quiet') && !terminal\""
    )


def test_an_unquoted_when_starting_with_bang_is_a_yaml_tag_and_the_error_says_quote_it(
    tmp_path: Path,
) -> None:
    path = rule(tmp_path, """
        - name: not-trusted
          on: work_item_start
          when: !contains(labels, 'trusted')
          set: {proceed: false}
    """)
    assert only_error(tmp_path) == (
        f"{path}: not valid YAML at line 5, column 27: did not find expected whitespace or "
        "line break (in rule 'not-trusted' → when). A value starting with ! is a YAML tag: "
        "quote the condition, e.g. when: \"!contains(labels, 'trusted')\""
    )


def test_a_bang_tag_that_parses_as_yaml_gets_the_same_quote_it_hint(tmp_path: Path) -> None:
    path = rule(tmp_path, """
        - on: work_item_start
          when: !contains x
          name: named-after
          set: {proceed: false}
    """)
    assert only_error(tmp_path) == (
        f"{path}: not valid YAML at line 4, column 11: could not determine a constructor for "
        "the tag '!contains' (in rule 'named-after' → when). A value starting with ! is a YAML "
        "tag: quote the condition, e.g. when: \"!contains x\""
    )


def test_inner_double_quotes_in_another_string_say_how_to_quote_it(tmp_path: Path) -> None:
    rule(tmp_path, """
        - name: r
          on: work_item_start
          set: {proceed: false, reason: "say "no""}
    """)
    assert only_error(tmp_path).endswith(
        "(in rule 'r' → reason). A double-quoted YAML string cannot hold a bare \"; write \\\" "
        "inside it, or quote the whole value with single quotes: reason: 'say \"no\"'")


def test_a_yaml_error_with_no_known_slip_stays_as_it_was(tmp_path: Path) -> None:
    path = rule(tmp_path, """
        - name: r
          on: [work_item_start
    """)
    error = only_error(tmp_path)
    assert error.startswith(f"{path}: not valid YAML at line ") and "(in rule" not in error


def test_i5_3_file_without_rules_list(tmp_path: Path) -> None:
    path = write(tmp_path, "a.yaml", "policies:\n  - name: x\n")
    error = only_error(tmp_path)
    assert error.startswith(f"{path}: expected a mapping with a `rules:` list")


def test_i5_3_rules_that_is_not_a_list(tmp_path: Path) -> None:
    path = write(tmp_path, "a.yaml", "rules: {name: x}\n")
    assert only_error(tmp_path).startswith(f"{path} → rules: expected a non-empty list")


def test_i5_3_duplicate_key_in_a_rule_file(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", "rules:\n  - name: x\n    name: y\n    on: work_item_start\n")
    assert "found the key 'name' twice" in only_error(tmp_path)


# ------------------------------------------------------------------------ expressions


def test_i5_3_syntax_error_names_file_rule_expression_and_column(tmp_path: Path) -> None:
    path = rule(tmp_path, """
        - name: bad-syntax
          on: session_spawn
          when: "actor ~ 'x'"
          set: {proceed: false}
    """)
    assert only_error(tmp_path) == (
        f"{path}: rule 'bad-syntax' → when: syntax error in \"actor ~ 'x'\" at column 7: "
        "Unknown token ~"
    )


def test_i30_16_a_missing_comma_between_arguments_is_refused_with_column_and_fix(
    tmp_path: Path,
) -> None:
    path = rule(tmp_path, """
        - name: base-main
          on: session_spawn
          when: "contains(labels 'base:main')"
          set: {proceed: false}
    """)
    assert only_error(tmp_path) == (
        f"{path}: rule 'base-main' → when: syntax error in \"contains(labels 'base:main')\" "
        "at column 17: expected ',' before 'base:main': the arguments of contains() are "
        "separated by commas; write contains(labels, 'base:main')"
    )


def test_i5_3_incomplete_expression_names_the_column_where_it_ends(tmp_path: Path) -> None:
    path = rule(tmp_path, """
        - name: incomplete
          on: session_spawn
          when: "work_item.kind =="
          set: {proceed: false}
    """)
    assert only_error(tmp_path) == (
        f"{path}: rule 'incomplete' → when: 'work_item.kind ==' is incomplete: it ends at "
        "column 18 where more was expected"
    )


def test_i5_3_parse_error_names_the_unexpected_token(tmp_path: Path) -> None:
    rule(tmp_path, """
        - name: parse
          on: session_spawn
          when: "actor == == 'x'"
          set: {proceed: false}
    """)
    error = only_error(tmp_path)
    assert "rule 'parse' → when: syntax error in \"actor == == 'x'\" at column 10" in error


def test_i5_3_typo_in_a_field_is_refused_with_the_closest_name(tmp_path: Path) -> None:
    path = rule(tmp_path, """
        - name: typo
          on: session_spawn
          when: "contains(lables, 'trusted')"
          set: {proceed: false}
    """)
    error = only_error(tmp_path)
    assert error.startswith(
        f"{path}: rule 'typo' → when: \"contains(lables, 'trusted')\" reads 'lables' at "
        "column 10, but the context at session_spawn has no field 'lables'; did you mean "
        "'labels'?"
    )
    assert "Valid: work_item, loop, labels, unknown_facts, actor" in error


def test_i5_3_typo_in_a_work_item_field_suggests_the_work_item_field(tmp_path: Path) -> None:
    rule(tmp_path, """
        - name: kind-typo
          on: work_item_start
          when: "work_item.kindd == 'issue'"
          set: {proceed: false}
    """)
    error = only_error(tmp_path)
    assert "reads 'work_item.kindd' at column 1" in error
    assert "did you mean 'work_item.kind'?" in error


def test_i5_3_reading_into_a_scalar_is_refused(tmp_path: Path) -> None:
    rule(tmp_path, """
        - name: scalar
          on: work_item_start
          when: "actor.login == 'x'"
          set: {proceed: false}
    """)
    assert "reads 'actor.login' at column 1, but 'actor' has no fields" in only_error(tmp_path)


def test_i5_3_rule_on_several_points_is_checked_against_each(tmp_path: Path) -> None:
    rule(tmp_path, """
        - name: respawn-only
          on: [session_spawn, session_spawned, work_item_start]
          when: "respawn"
          set: {reason: x}
    """)
    # respawn exists at session_spawn and session_spawned, not at work_item_start; reason is
    # a decision only at work_item_start and session_spawn: both problems are reported.
    errors = load_errors(tmp_path)
    assert len(errors) == 2
    assert "reads 'respawn' at column 1, but the context at work_item_start has no field" \
        in errors[0]
    assert "set.reason: session_spawned has no decision 'reason'" in errors[1]


def test_i5_3_decisions_are_readable_in_expressions(tmp_path: Path) -> None:
    rule(tmp_path, """
        - name: long-prompt
          on: session_spawn
          when: "length(prompt) > `10000` || proceed == `false`"
          set: {proceed: false, reason: "prompt too long ({{ length(prompt) }} chars)"}
    """)
    assert load_policy("house", tmp_path).rules_at("session_spawn") == ["long-prompt"]


def test_i5_5_unknown_function_is_refused_with_a_suggestion(tmp_path: Path) -> None:
    rule(tmp_path, """
        - name: fn
          on: input_received
          when: "regex_mach('^x', text)"
          set: {proceed: false}
    """)
    error = only_error(tmp_path)
    assert "rule 'fn' → when: \"regex_mach('^x', text)\" calls unknown function " \
        "regex_mach() at column 1; did you mean regex_match()?" in error


def test_i5_5_wrong_arity_is_refused_at_load(tmp_path: Path) -> None:
    rule(tmp_path, """
        - name: arity
          on: input_received
          when: "actor == 'x' && lower(actor, text) == 'y'"
          set: {proceed: false}
    """)
    assert "calls lower() with 2 argument(s) at column 17; it takes 1" in only_error(tmp_path)


def test_i5_3_when_must_be_a_string(tmp_path: Path) -> None:
    rule(tmp_path, "- {name: w, on: work_item_start, when: true, set: {proceed: false}}\n")
    assert "rule 'w' → when: expected a JMESPath expression as a string (quote it), got " \
        "True (bool)" in only_error(tmp_path)


# ------------------------------------------------------------------------ set


def test_i5_3_decision_the_point_does_not_have(tmp_path: Path) -> None:
    path = rule(tmp_path, "- {name: p, on: work_item_start, set: {prompt: hello}}\n")
    assert only_error(tmp_path) == (
        f"{path}: rule 'p' → set.prompt: work_item_start has no decision 'prompt'; decisions "
        "there: proceed, reason"
    )


def test_i5_3_prefix_only_where_the_point_has_prompt(tmp_path: Path) -> None:
    rule(tmp_path, "- {name: p, on: [session_spawn, work_item_start], set: {prompt_prefix: x}}\n")
    assert "set.prompt_prefix: work_item_start has no decision 'prompt_prefix'" \
        in only_error(tmp_path)


def test_i5_3_setting_a_fact_is_refused(tmp_path: Path) -> None:
    rule(tmp_path, "- {name: f, on: session_spawn, set: {actor: root}}\n")
    assert "set.actor: 'actor' is a fact at session_spawn (read-only)" in only_error(tmp_path)


def test_i5_3_value_of_the_wrong_type(tmp_path: Path) -> None:
    path = rule(tmp_path, "- {name: t, on: work_item_start, set: {proceed: 'no'}}\n")
    assert only_error(tmp_path) == (
        f"{path}: rule 't' → set.proceed: expected false (bool), got 'no' (str)"
    )


def test_i5_3_yaml_1_1_no_is_not_a_boolean(tmp_path: Path) -> None:
    rule(tmp_path, "- {name: t, on: phase_changed, set: {notify: no}}\n")
    assert "set.notify: expected true or false (bool), got 'no' (str)" in only_error(tmp_path)


def test_i5_3_string_decision_given_a_number(tmp_path: Path) -> None:
    rule(tmp_path, "- {name: t, on: session_spawn, set: {prompt: 42}}\n")
    assert "set.prompt: expected a string (quote it), got 42 (int)" in only_error(tmp_path)


def test_i5_3_proceed_true_is_refused(tmp_path: Path) -> None:
    rule(tmp_path, "- {name: allow, on: work_item_start, set: {proceed: true}}\n")
    error = only_error(tmp_path)
    assert "rule 'allow' → set.proceed: a policy may only refuse (proceed: false)" in error
    assert "override another hook's refusal" in error


def test_i5_3_unknown_key_is_refused_with_a_suggestion(tmp_path: Path) -> None:
    rule(tmp_path, "- {name: k, on: work_item_start, whne: 'actor', set: {reason: x}}\n")
    assert "rule 'k' → whne: unknown key (did you mean 'when'?). Allowed keys: name, on, when" \
        in only_error(tmp_path)


def test_i5_3_unknown_top_level_key_in_a_file(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", "rules:\n  - {name: a, on: work_item_start, set: {reason: x}}\n"
                             "rule: []\n")
    assert "unknown top-level key 'rule'" in only_error(tmp_path)


def test_i5_3_duplicate_names_across_files(tmp_path: Path) -> None:
    first = rule(tmp_path, "- {name: same, on: work_item_start, set: {reason: a}}\n", "a.yaml")
    second = rule(tmp_path, "- {name: same, on: session_spawn, set: {reason: b}}\n", "b.yaml")
    assert only_error(tmp_path) == (
        f"{second}: rule 'same' → name: duplicate: a rule named 'same' is already in "
        f"{first}; rule names must be unique across the folder"
    )


def test_i5_3_empty_set(tmp_path: Path) -> None:
    rule(tmp_path, "- {name: e, on: work_item_start, set: {}}\n")
    assert "rule 'e' → set: empty; a rule sets at least one decision" in only_error(tmp_path)


def test_i5_3_missing_set_and_missing_on_and_missing_name(tmp_path: Path) -> None:
    rule(tmp_path, "- {description: nothing}\n")
    errors = load_errors(tmp_path)
    assert [e.split("→ ")[1].split(":")[0] for e in errors] == ["name", "on", "set"]
    assert all("rule #1" in e for e in errors)


def test_i5_3_on_naming_a_non_point(tmp_path: Path) -> None:
    rule(tmp_path, "- {name: o, on: hooks.decided, set: {reason: x}}\n")
    error = only_error(tmp_path)
    assert "rule 'o' → on: 'hooks.decided' is not a lifecycle point (it looks like an event" \
        in error


def test_i5_3_bad_mode(tmp_path: Path) -> None:
    rule(tmp_path, "- {name: m, on: work_item_start, mode: dry-run, set: {reason: x}}\n")
    assert "rule 'm' → mode: expected enforce or audit, got 'dry-run' (str)" \
        in only_error(tmp_path)


def test_i5_2_template_with_a_bad_expression(tmp_path: Path) -> None:
    path = rule(tmp_path, """
        - name: tpl
          on: work_item_start
          set:
            proceed: false
            reason: "refused for {{ work_item.reff }}"
    """)
    error = only_error(tmp_path)
    assert error.startswith(
        f"{path}: rule 'tpl' → set.reason: the placeholder {{{{ work_item.reff }}}} reads "
        "'work_item.reff' at column 1"
    )
    assert "did you mean 'work_item.ref'?" in error


def test_i5_2_template_with_a_syntax_error(tmp_path: Path) -> None:
    rule(tmp_path, "- {name: tpl, on: work_item_start, set: {reason: 'x {{ actor == }}'}}\n")
    assert "set.reason: the placeholder {{ actor == }} is incomplete: it ends at column 9" \
        in only_error(tmp_path)


def test_i5_2_unbalanced_template(tmp_path: Path) -> None:
    rule(tmp_path, "- {name: tpl, on: work_item_start, set: {reason: 'x {{ actor'}}\n")
    assert "set.reason: unbalanced" in only_error(tmp_path)


def test_i5_3_every_error_is_listed_not_just_the_first(tmp_path: Path) -> None:
    rule(tmp_path, """
        - name: one
          on: session_spawn
          when: "lables"
          set: {proceed: 'no'}
        - name: two
          on: work_item_start
          set: {prompt: x}
    """, "a.yaml")
    write(tmp_path, "b.yaml", "rules: [")
    errors = load_errors(tmp_path)
    assert len(errors) == 4
    with pytest.raises(PolicyError) as info:
        load_policy("house", tmp_path)
    assert str(info.value).splitlines()[0] == f"4 errors in policy folder {tmp_path}:"
