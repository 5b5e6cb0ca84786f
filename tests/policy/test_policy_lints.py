"""Issue 25 item 5: `policy check` lints what type checking cannot see, and names the slips a
syntax error comes from; a rule's `silence:` drops a lint (in-process `main`)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from the_loop.cli import main


def _folder(tmp_path: Path, rules: str, data: str = "") -> Path:
    folder = tmp_path / "policies"
    folder.mkdir()
    (folder / "rules.yaml").write_text(textwrap.dedent(rules), "utf-8")
    if data:
        (folder / "data").mkdir()
        (folder / "data" / "d.yaml").write_text(data, "utf-8")
    return folder


def _warnings(folder: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    assert main(["policy", "check", str(folder)]) == 0  # advice: the folder still loads
    return [line.removeprefix("the-loop: warning: ")
            for line in capsys.readouterr().err.splitlines()]


def _errors(folder: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    assert main(["policy", "check", str(folder)]) == 1
    lines = capsys.readouterr().err.splitlines()
    if " errors in policy folder " in lines[0]:
        return [line.strip() for line in lines[1:]]
    return [line.removeprefix("the-loop: ") for line in lines]


def silence(name: str) -> str:
    return f" [{name}: silence it with `silence: [{name}]` on the rule]"


def test_a_rule_data_makes_never_match_is_a_warning_naming_the_deciding_part(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _folder(tmp_path, """\
        rules:
          - name: flagged
            on: input_received
            when: "contains(data.maintainers, actor) && data.enabled"
            set: {proceed: false}
          - name: nobody
            on: input_received
            when: "control == 'approve' && contains(data.bots, actor)"
            set: {text: "x"}
    """, data="maintainers: [alice]\nenabled: false\nbots: []\n")
    where = folder / "rules.yaml"
    assert _warnings(folder, capsys) == [
        f"{where}: rule 'flagged' → when: contains(data.maintainers, actor) && data.enabled "
        "is always false with this data because data.enabled is always false: the rule can "
        "never match; check the data it reads, or remove the rule" + silence("never-matches"),
        f"{where}: rule 'nobody' → when: control == 'approve' && contains(data.bots, actor) is "
        "always false with this data because contains(data.bots, actor) is always false: the "
        "rule can never match; check the data it reads, or remove the rule"
        + silence("never-matches"),
    ]


def test_two_rules_with_one_condition_setting_one_decision_differently_are_flagged(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _folder(tmp_path, """\
        rules:
          - name: quiet-a
            on: phase_changed
            when: "contains(labels, 'quiet')"
            set: {notify: false}
          - name: quiet-b
            on: [phase_changed]
            when: "contains(labels,'quiet')"
            set: {notify: true}
          - name: prefixes-compose
            on: session_spawn
            set: {prompt_prefix: "a"}
          - name: prefixes-compose-too
            on: session_spawn
            set: {prompt_prefix: "b"}
          - name: same-value
            on: phase_changed
            when: "contains(labels, 'quiet')"
            set: {notify: false}
    """)
    assert _warnings(folder, capsys) == [
        f"{folder / 'rules.yaml'}: rule 'quiet-b': applies at phase_changed when "
        "contains(labels, 'quiet'), like rule 'quiet-a' "
        f"({folder / 'rules.yaml'}), and sets notify to true where it sets false: only one "
        "can take effect (the later rule wins); merge them or make their conditions differ"
        + silence("conflicting-rules"),
        f"{folder / 'rules.yaml'}: rule 'same-value': applies at phase_changed when "
        "contains(labels, 'quiet'), like rule 'quiet-b' "
        f"({folder / 'rules.yaml'}), and sets notify to false where it sets true: only one "
        "can take effect (the later rule wins); merge them or make their conditions differ"
        + silence("conflicting-rules"),
    ]


def test_silence_drops_a_lint_and_an_unknown_lint_name_is_a_load_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _folder(tmp_path, """\
        rules:
          - name: pattern-from-the-fact
            on: input_received
            when: "regex_match(text, 'ghp_')"
            silence: [pattern-not-literal]
            set: {text: "x"}
          - name: off-switch
            on: input_received
            when: "data.enabled && actor == 'x'"
            silence: never-matches
            set: {proceed: false}
    """, data="enabled: false\n")
    assert _warnings(folder, capsys) == []
    assert main(["policy", "check", str(folder), "--json"]) == 0
    [doc] = json.loads(capsys.readouterr().out)["folders"]
    assert doc["warnings"] == []
    (folder / "rules.yaml").write_text((folder / "rules.yaml").read_text("utf-8").replace(
        "silence: never-matches", "silence: [never-match]"), "utf-8")
    [error] = _errors(folder, capsys)
    assert error.startswith(f"{folder / 'rules.yaml'}: rule 'off-switch' → silence")
    assert "did you mean 'never-matches'?" in error, error


def test_a_reversed_pattern_with_a_literal_subject_from_data_names_the_swap(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The subject read from data is a literal: the swapped call is named, by its data name;
    a pattern read from data is a literal pattern and no warning."""
    folder = _folder(tmp_path, """\
        rules:
          - name: reversed
            on: input_received
            when: "glob_match(work_item.repository, data.repo)"
            set: {proceed: false}
          - name: fine
            on: input_received
            when: "regex_match(data.token, text)"
            set: {text: "x"}
    """, data="repo: acme/app\ntoken: ghp_\n")
    assert _warnings(folder, capsys) == [
        f"{folder / 'rules.yaml'}: rule 'reversed' → when: glob_match(work_item.repository, "
        "data.repo) takes its pattern from work_item.repository, not a literal: the pattern "
        "comes first; did you mean glob_match(data.repo, work_item.repository)? (leave it if "
        "the field holds a pattern on purpose)" + silence("pattern-not-literal")]


def test_a_single_equals_is_a_load_error_with_the_fixed_expression(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _folder(tmp_path, """\
        rules:
          - name: approve
            on: input_received
            when: "control = 'approve' && text != 'a=b'"
            set: {proceed: false}
    """)
    assert _errors(folder, capsys) == [
        f"{folder / 'rules.yaml'}: rule 'approve' → when: syntax error in \"control = "
        "'approve' && text != 'a=b'\" at column 9: Unknown token '='. A single '=' (column 9) "
        "is not an operator: JMESPath compares with '=='; write control == 'approve' && "
        "text != 'a=b'"]


def test_an_unbalanced_parenthesis_names_where_it_opened_or_closed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _folder(tmp_path, """\
        rules:
          - name: opened
            on: input_received
            when: "contains(labels, 'a' && (kind == ')')"
            set: {proceed: false}
          - name: closed
            on: input_received
            when: "actor == 'x')"
            set: {proceed: false}
    """)
    where = folder / "rules.yaml"
    assert _errors(folder, capsys) == [
        f"{where}: rule 'opened' → when: \"contains(labels, 'a' && (kind == ')')\" is "
        "incomplete: it ends at column 38 where more was expected. The '(' at column 9 is "
        "never closed",
        f"{where}: rule 'closed' → when: syntax error in \"actor == 'x')\" at column 13: "
        "unexpected ')'. The ')' at column 13 closes no '('",
    ]


def test_a_constant_condition_without_data_stays_a_load_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _folder(tmp_path, """\
        rules:
          - name: never
            on: input_received
            when: "contains(`[]`, actor)"
            set: {proceed: false}
    """)
    [error] = _errors(folder, capsys)
    assert "is always false whatever the context" in error


def test_i30_15_contradictions_and_values_a_fact_never_takes_are_never_matches(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 30.15: each of these loaded without a word; only a coverage gate found them."""
    folder = _folder(tmp_path, """\
        rules:
          - name: both-kinds
            on: session_spawn
            when: "work_item.kind == 'pull-request' && work_item.kind == 'issue'"
            set: {proceed: false}
          - name: terminal-and-not
            on: phase_changed
            when: "terminal && !terminal"
            set: {notify: false}
          - name: pr-typo
            on: [session_spawn, input_received]
            when: "work_item.kind == 'pr'"
            set: {proceed: false}
          - name: no-such-input-kind
            on: input_received
            when: "kind == 'approval' || (kind == 'command' && kind == 'answer')"
            set: {proceed: false}
          - name: fine
            on: input_received
            when: "kind != 'pr' && (control == 'stop' || !node)"
            set: {proceed: false}
    """)
    where = folder / "rules.yaml"
    advice = "; fix the condition, or remove the rule" + silence("never-matches")
    assert _warnings(folder, capsys) == [
        f"{where}: rule 'both-kinds' → when: work_item.kind == 'pull-request' && "
        "work_item.kind == 'issue' can never be true: work_item.kind == 'pull-request' and "
        "work_item.kind == 'issue' cannot both be true" + advice,
        f"{where}: rule 'terminal-and-not' → when: terminal && !terminal can never be true: "
        "terminal and !terminal cannot both be true" + advice,
        f"{where}: rule 'pr-typo' → when: work_item.kind == 'pr' can never be true at "
        "session_spawn, input_received: work_item.kind == 'pr' is never true: "
        "work_item.kind is always one of 'issue', 'pull-request'" + advice,
        f"{where}: rule 'no-such-input-kind' → when: kind == 'approval' || (kind == "
        "'command' && kind == 'answer') can never be true: kind == 'approval' is never true: "
        "kind is always one of 'answer', 'command', 'comment', 'review'; kind == 'command' "
        "and kind == 'answer' cannot both be true" + advice,
    ]


def test_i30_15_policy_check_json_carries_the_contradiction(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _folder(tmp_path, """\
        rules:
          - name: terminal-and-not
            on: phase_changed
            when: "terminal && !terminal"
            set: {notify: false}
    """)
    assert main(["policy", "check", str(folder), "--json"]) == 0
    [warning] = json.loads(capsys.readouterr().out)["folders"][0]["warnings"]
    assert "terminal and !terminal cannot both be true" in warning


def test_i30_15_a_value_only_the_other_loop_sends_is_not_called_impossible(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The closed sets are the catalog's, with the other loop's where they differ: its
    `source: verb` can match; `email` comes from no caller."""
    folder = _folder(tmp_path, """\
        rules:
          - name: verbs
            on: input_received
            when: "source == 'verb'"
            set: {proceed: false}
          - name: mail
            on: input_received
            when: "source == 'email'"
            set: {proceed: false}
    """)
    [warning] = _warnings(folder, capsys)
    assert "rule 'mail'" in warning and "source is always one of 'api', 'comment', 'reply', " \
        "'verb'" in warning


def test_i30_15_the_record_kinds_are_the_catalogs_words() -> None:
    from the_loop.hooks.engine.points import WORK_ITEM_DOCS
    from the_loop.hooks.engine.values import RECORD_VALUES

    for name, values in RECORD_VALUES.items():
        assert all(v in WORK_ITEM_DOCS[name] for v in values), name
