"""Issue 25 item 3: `policy test --coverage` reports which parts of each condition were ever true
and ever false; `--coverage-of branches` gates on it; `--run PATTERN` picks cases."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from the_loop.cli import main

RULES = """\
rules:
  - name: issues-need-label
    on: work_item_start
    when: "work_item.kind == 'issue' && !contains(labels, 'loop')"
    set: {proceed: false}
  - name: bots-or-docs
    on: work_item_start
    when: "actor == 'dependabot' || work_item.repository == 'acme/docs'"
    set: {proceed: false}
  - name: always
    on: session_spawn
    set: {prompt_prefix: "x "}
"""

HALF = """\
cases:
  - name: an issue without the label
    point: work_item_start
    facts: {work_item: {kind: issue}, labels: []}
    expect: {proceed: false}
  - name: an issue with the label
    point: work_item_start
    facts: {work_item: {kind: issue}, labels: [loop]}
    expect: {proceed: true}
  - name: a bot
    point: work_item_start
    facts: {actor: dependabot, work_item: {kind: issue}, labels: [loop]}
    expect: {proceed: false}
  - name: a session
    point: session_spawn
    facts: {prompt: p}
    expect: {prompt: "x p"}
"""

REST = """\
  - name: a pull request by a person on docs
    point: work_item_start
    facts: {actor: alice, work_item: {kind: pull-request, repository: acme/docs}}
    expect: {proceed: false}
  - name: a pull request by a person on app
    point: work_item_start
    facts: {actor: alice, work_item: {kind: pull-request, repository: acme/app}}
    expect: {proceed: true}
"""


def _folder(tmp_path: Path, cases: str) -> Path:
    folder = tmp_path / "policies"
    (folder / "tests").mkdir(parents=True)
    (folder / "rules.yaml").write_text(RULES, "utf-8")
    (folder / "tests" / "cases.yaml").write_text(textwrap.dedent(cases), "utf-8")
    return folder


def test_coverage_names_each_part_never_false_or_never_true(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _folder(tmp_path, HALF)
    assert main(["policy", "test", str(folder), "--coverage"]) == 0
    lines = capsys.readouterr().out.splitlines()
    branch_lines = [line for line in lines if line.startswith("branches:")]
    # `a || b` short-circuits: for the bot, repository was never looked at; for the others
    # it was false; actor == 'dependabot' was true once, false twice.
    assert branch_lines == [
        "branches: issues-need-label: `work_item.kind == 'issue'` was never false",
        "branches: bots-or-docs: `work_item.repository == 'acme/docs'` was never true",
        "branches: 75.0% of condition outcomes seen (6 of 8: each part of a condition true "
        "and false)",
    ]


def test_min_coverage_of_branches_gates_and_full_branch_coverage_passes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _folder(tmp_path, HALF)
    assert main(["policy", "test", str(folder), "--min-coverage", "100",
                 "--coverage-of", "branches"]) == 1
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == (
        f"branch coverage 75.0% is below --min-coverage 100: add cases to {folder / 'tests'} "
        "that make each part above true and false")
    # the rule measure is at 100 % with the same cases: the default gate passes
    assert main(["policy", "test", str(folder), "--min-coverage", "100"]) == 0
    capsys.readouterr()
    (folder / "tests" / "cases.yaml").write_text(HALF + REST, "utf-8")
    assert main(["policy", "test", str(folder), "--min-coverage", "100",
                 "--coverage-of", "branches"]) == 0
    out = capsys.readouterr().out
    assert "branches: 100.0% of condition outcomes seen (8 of 8" in out


def test_coverage_json_carries_every_part_with_its_counts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _folder(tmp_path, HALF)
    assert main(["policy", "test", str(folder), "--json", "--min-coverage", "80",
                 "--coverage-of", "branches"]) == 1
    [doc] = json.loads(capsys.readouterr().out)["folders"]
    coverage = doc["coverage"]
    assert coverage["of"] == "branches" and coverage["ok"] is False
    assert coverage["branches"]["percent"] == 75.0
    assert coverage["branches"]["rules"]["issues-need-label"] == [
        {"part": "work_item.kind == 'issue'", "true": 3, "false": 0},
        {"part": "contains(labels, 'loop')", "true": 2, "false": 1},
    ]
    assert "always" not in coverage["branches"]["rules"]  # no condition, no parts


def test_run_pattern_runs_only_the_matching_cases(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _folder(tmp_path, HALF)
    assert main(["policy", "test", str(folder), "--run", "an issue"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split(": ", 1)[1] for line in out if line.startswith("PASS")] == [
        "an issue without the label  (work_item_start)",
        "an issue with the label  (work_item_start)"]
    assert out[-1] == "2 passed, 0 failed"
    assert main(["policy", "test", str(folder), "--run", "^nothing$"]) == 1
    assert (f"ERROR {folder / 'tests'}: no case's name matches --run '^nothing$'"
            in capsys.readouterr().out)


def test_run_with_a_bad_pattern_is_a_usage_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _folder(tmp_path, HALF)
    with pytest.raises(SystemExit) as exited:
        main(["policy", "test", str(folder), "--run", "a("])
    assert exited.value.code == 2
    assert "--run: not a regular expression (missing ), unterminated subpattern at " \
           "position 1): 'a('" in capsys.readouterr().err
