"""Issue 20 item 7: `glob_match` is bounded like `regex_match` (RE2, a size limit with a clear
failure), and `policy check` warns about a pattern that is not a literal."""

from __future__ import annotations

import fnmatch
import json
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from the_loop.cli import main
from the_loop.hooks.policy.functions import glob_match

REVERSED = """\
rules:
  - name: acme-only
    on: input_received
    when: "glob_match(text, 'acme/*')"
    set: {proceed: false, reason: "acme"}
"""


SILENCE = " [pattern-not-literal: silence it with `silence: [pattern-not-literal]` on the rule]"


def _loop(tmp_path: Path, rules: str) -> Path:
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "rules.yaml").write_text(textwrap.dedent(rules), "utf-8")
    config = tmp_path / "cli-config.yaml"
    config.write_text("loop: acme\nstateDir: state\nhooks:\n  - {name: house, policy: "
                      "policies}\n", encoding="utf-8")
    return config


def _run(config: Path, context: dict[str, object], capsys: pytest.CaptureFixture[str]
         ) -> dict[str, object]:
    path = config.parent / "context.json"
    path.write_text(json.dumps(context), encoding="utf-8")
    assert main(["--config", str(config), "hooks", "run", "input_received", "--context",
                 str(path), "--json"]) == 0
    out: dict[str, object] = json.loads(capsys.readouterr().out)
    return out


def test_glob_match_given_an_800kb_fact_as_its_pattern_fails_that_rule_naming_the_slip(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The reversed-arguments slip with a long comment: the rule fails at once with a
    sentence naming the fix (it took 23 s and 430 MB on fnmatch), the chain goes on."""
    config = _loop(tmp_path, REVERSED)
    out = _run(config, {"text": "fix *.py in acme/* " * 40_000 + "done"}, capsys)
    [step] = out["trace"]  # type: ignore[misc]
    assert step["status"] == "failed"
    assert step["error"].endswith(
        "In function glob_match(), a pattern of 760,004 characters; at most 10,000 (the "
        "pattern comes first: glob_match(pattern, subject))")
    assert out["context"]["proceed"] is True  # type: ignore[index]


def test_glob_match_with_two_thousand_stars_answers_as_fnmatch_does(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`*a` 2,000 times (a literal) against a subject that cannot match: RE2 answers
    (linearly); the answer is fnmatch's."""
    pattern = "*a" * 2_000 + "b"
    config = _loop(tmp_path, f"""\
        rules:
          - name: stars
            on: input_received
            when: "glob_match('{pattern}', text)"
            set: {{proceed: false}}
    """)
    text = "a" * 2_500
    out = _run(config, {"text": text}, capsys)
    assert out["context"]["proceed"] is True  # type: ignore[index]
    assert glob_match(pattern, text + "b") is fnmatch.fnmatchcase(text + "b", pattern) is True


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="ab-!^[]\\*?&~|/\n:é", max_size=8),
       st.text(alphabet="ab-!^[]\\/\n:é&", max_size=8))
def test_glob_match_means_what_fnmatchcase_means(pattern: str, subject: str) -> None:
    """Sets (`[!…]`, ranges, a leading `]`, empty and reversed ranges), stars over newlines,
    escapes that are literals in a glob: RE2's answer is fnmatch's."""
    assert glob_match(pattern, subject) is fnmatch.fnmatchcase(subject, pattern)


def test_a_literal_glob_pattern_past_the_limit_is_a_load_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _loop(tmp_path, f"""\
        rules:
          - name: huge
            on: input_received
            when: "glob_match('{"x" * 10_001}', text)"
            set: {{proceed: false}}
    """)
    assert main(["policy", "check", str(tmp_path / "policies")]) == 1
    err = capsys.readouterr().err
    assert "rule 'huge' → when: " in err
    assert ("at column 1: a pattern of 10,001 characters; at most 10,000 (the pattern comes "
            "first: glob_match(pattern, subject))") in err


def test_policy_check_warns_about_a_pattern_that_is_not_a_literal_with_the_fix(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The reversed arguments, for both functions, in `when` and in a template; a literal
    pattern gets no warning; the folder still loads (exit 0)."""
    _loop(tmp_path, """\
        rules:
          - name: no-bots
            on: input_received
            when: "regex_match(actor, '^bot-') || glob_match(work_item.repository, 'acme/*')"
            set: {proceed: false, reason: "{{ glob_match(actor, text) }}"}
          - name: fine
            on: input_received
            when: "regex_match('^bot-', actor) && glob_match('acme/*', text)"
            set: {proceed: false}
    """)
    folder = tmp_path / "policies"
    assert main(["policy", "check", str(folder)]) == 0
    where = f"{folder / 'rules.yaml'}: rule 'no-bots'"
    assert capsys.readouterr().err.splitlines() == [
        f"the-loop: warning: {where} → when: regex_match(actor, '^bot-') takes its pattern "
        "from actor, not a literal: the pattern comes first; did you mean "
        "regex_match('^bot-', actor)? (leave it if the field holds a pattern on purpose)" + SILENCE,
        f"the-loop: warning: {where} → when: glob_match(work_item.repository, 'acme/*') takes "
        "its pattern from work_item.repository, not a literal: the pattern comes first; did "
        "you mean glob_match('acme/*', work_item.repository)? (leave it if the field holds a "
        "pattern on purpose)" + SILENCE,
        f"the-loop: warning: {where} → set → reason: glob_match(actor, text) takes its pattern "
        "from actor, not a literal: the pattern comes first; leave it if actor holds a "
        "pattern on purpose (one that glob_match cannot use fails the rule at that point)"
        + SILENCE,
    ]
    assert main(["policy", "check", str(folder), "--json"]) == 0
    [doc] = json.loads(capsys.readouterr().out)["folders"]
    assert len(doc["warnings"]) == 3 and doc["ok"] is True


def test_glob_match_with_a_fact_as_pattern_and_a_long_subject_fails_that_rule(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Both arguments from facts: `*a` 4,999 times against 65,536 characters (one input's
    most) took 17 s in RE2 (its DFA gives up within its memory budget and the NFA walks every
    pattern position for every character). The rule fails at once, naming both sizes; a
    pattern with no `*` and a short one with stars still match a long subject."""
    config = _loop(tmp_path, """\
        rules:
          - name: actor-glob
            on: input_received
            when: "glob_match(actor, text)"
            set: {proceed: false, reason: "matched"}
    """)
    out = _run(config, {"actor": "*a" * 4_999, "text": "a" * 65_536}, capsys)
    [step] = out["trace"]  # type: ignore[misc]
    assert step["status"] == "failed"
    assert step["error"].endswith(
        "In function glob_match(), a pattern of 9,998 characters with a '*' against a subject "
        "of 65,536: at most 20,000,000 pattern characters times subject characters")
    assert out["context"]["proceed"] is True  # type: ignore[index]
    assert glob_match("*a*", "b" * 1_000_000 + "a") is True
    assert glob_match("a" * 9_000, "a" * 9_000) is True
