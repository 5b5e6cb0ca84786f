"""`--explain` on `hooks run` and `policy test`; `policy test --coverage` and
`--min-coverage` (issue 15, items 4 and 5)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

RULES = """\
rules:
  - name: trusted-prs-only
    on: session_spawn
    when: "work_item.kind == 'pull-request' && !contains(labels, 'trusted')"
    set: {proceed: false, reason: "needs trusted ({{ work_item.ref }})"}
  - name: preamble
    on: session_spawn
    set: {prompt_prefix: "Rules. "}
  - name: either
    on: session_spawn
    when: "respawn || actor == 'bob'"
    set: {prompt_suffix: " (again)"}
  - name: trial
    on: session_spawn
    mode: audit
    when: "contains(labels, 'quiet')"
    set: {proceed: false, reason: "quiet {{ work_item.ref }}"}
  - name: quiet
    on: phase_changed
    when: "contains(labels, 'quiet')"
    set: {notify: false}
"""
CASES = """\
cases:
  - name: an issue gets the preamble
    point: session_spawn
    facts: {prompt: "go", labels: [quiet]}
    expect: {prompt: "Rules. go"}
  - name: an untrusted pr is refused
    point: session_spawn
    facts: {work_item: {kind: pull-request, ref: "r#2"}, prompt: "go"}
    expect: {proceed: false}
"""


def setup(tmp_path: Path, write_config: Any, cases: str = CASES) -> None:
    where = tmp_path / "policies"
    (where / "tests").mkdir(parents=True)
    (where / "rules.yaml").write_text(RULES, "utf-8")
    (where / "tests" / "cases.yaml").write_text(textwrap.dedent(cases), "utf-8")
    write_config("loop: acme\nhooks:\n  - {name: house, policy: policies}\n")


def test_hooks_run_explain_says_per_rule_why_with_the_false_part_and_its_fields(
    tmp_path: Path, run_cli: Any, write_config: Any
) -> None:
    setup(tmp_path, write_config)
    done = run_cli("hooks", "run", "session_spawn", "--context", "-", "--explain",
                   stdin='{"work_item": {"kind": "pull-request", "ref": "r#1"}, '
                         '"labels": ["trusted", "quiet"], "prompt": "p"}')
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1].split()[:2] == ["house", "changed"]
    assert lines[1].endswith("rules: preamble  audit rules matched: trial")
    assert lines[2:6] == [
        "      trusted-prs-only: not matched: !contains(labels, 'trusted') is false "
        '(labels = ["trusted", "quiet"])',
        '      preamble: matched; sets prompt_prefix="Rules. "',
        "      either: not matched: respawn is false and actor == 'bob' is false "
        '(actor = "")',
        '      trial (audit): matched; would set proceed=false, reason="quiet r#1"',
    ]


def test_hooks_run_explain_json_puts_each_rule_under_its_hook(
    tmp_path: Path, run_cli: Any, write_config: Any
) -> None:
    setup(tmp_path, write_config)
    done = run_cli("hooks", "run", "session_spawn", "--context", "-", "--explain", "--json",
                   stdin='{"work_item": {"kind": "issue"}}')
    [step] = json.loads(done.stdout)["trace"]
    first = step["explain"][0]
    assert first == {
        "rule": "trusted-prs-only", "file": "rules.yaml", "mode": "enforce",
        "outcome": "not matched",
        "false": [{"condition": "work_item.kind == 'pull-request'", "value": False,
                   "fields": {"work_item.kind": "issue"}}],
    }
    assert [r["outcome"] for r in step["explain"]] == [
        "not matched", "matched", "not matched", "not matched"]


def test_policy_test_explain_shows_each_rule_under_each_case(
    tmp_path: Path, run_cli: Any, write_config: Any
) -> None:
    setup(tmp_path, write_config)
    done = run_cli("policy", "test", "--explain")
    assert done.returncode == 0, done.stdout
    lines = done.stdout.splitlines()[1:]  # after the entry's header
    assert lines[0] == "PASS  cases.yaml: an issue gets the preamble  (session_spawn)"
    assert lines[1] == ("      · trusted-prs-only: not matched: work_item.kind == "
                        "'pull-request' is false (work_item.kind = \"issue\")")
    assert '      · trial (audit): matched; would set proceed=false, reason="quiet "' in lines


def test_coverage_counts_per_rule_the_cases_that_matched_and_did_not(
    tmp_path: Path, run_cli: Any, write_config: Any
) -> None:
    setup(tmp_path, write_config)
    done = run_cli("policy", "test", "--coverage")
    assert done.returncode == 0, done.stdout
    table = [line.split() for line in done.stdout.splitlines() if line.startswith(" " * 10)]
    assert table[:5] == [
        ["trusted-prs-only", "1", "1"], ["preamble", "2", "0"],
        ["either", "0", "2", "<-", "no", "case", "matches", "this", "rule"],
        ["trial", "1", "1"],
        ["quiet", "0", "0", "<-", "no", "case", "matches", "this", "rule"],
    ]
    assert "coverage: 60.0% of rules matched by a case (3 of 5)" in done.stdout


def test_min_coverage_fails_below_the_floor_naming_the_rules_no_case_matched(
    tmp_path: Path, run_cli: Any, write_config: Any
) -> None:
    setup(tmp_path, write_config)
    below = run_cli("policy", "test", "--min-coverage", "100")
    assert below.returncode == 1
    assert below.stdout.splitlines()[-1] == (
        f"coverage 60.0% is below --min-coverage 100: no case matched either, quiet; add a "
        f"case to {tmp_path / 'policies' / 'tests'} that each of them matches"
    )
    assert run_cli("policy", "test", "--min-coverage", "60").returncode == 0
    data = json.loads(run_cli("policy", "test", "--min-coverage", "100", "--json").stdout)
    assert data["ok"] is False
    [data] = data["folders"]
    assert data["ok"] is False
    assert data["coverage"]["ok"] is False and data["coverage"]["percent"] == 60.0
    assert data["unexercised"] == ["either", "quiet"]
    assert data["coverage"]["rules"]["either"] == {"matched": 0, "not_matched": 2}
