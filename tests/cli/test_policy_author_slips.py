"""Issue 30.18: what a newcomer building a policy tripped on — a test case's work item given
by its ref, a policy folder one letter off, the rule count `init` reports, a branch line
printed twice, and (runtime) the loop's state in `items show --json` (in-process `main`)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from the_loop.cli import main
from the_loop.hooks.policy.rules import read_policy
from the_loop.scaffold import FILES

RULES = """\
rules:
  - name: enterprise-only
    on: work_item_start
    when: "work_item.repository != 'ghe.corp.example/octo/repo'"
    set: {proceed: false, reason: "{{ work_item.repository }} #{{ work_item.number }}"}
"""


def _folder(tmp_path: Path, rules: str, cases: str) -> Path:
    folder = tmp_path / "policies"
    (folder / "tests").mkdir(parents=True)
    (folder / "rules.yaml").write_text(rules, "utf-8")
    (folder / "tests" / "cases.yaml").write_text(textwrap.dedent(cases), "utf-8")
    return folder


def test_a_case_gives_its_work_item_by_the_ref_string_facts_take(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--facts work_item=REF` fills the record from the ref; a case's `work_item: REF` was
    refused (a WorkItem must be an object)."""
    folder = _folder(tmp_path, RULES, """\
        cases:
          - name: another repository is refused
            point: work_item_start
            facts: {work_item: "github:ghe.corp.example/octo/other#4"}
            expect: {proceed: false, reason: "ghe.corp.example/octo/other #4"}
          - name: the enterprise repository starts
            point: work_item_start
            facts: {work_item: "github:ghe.corp.example/octo/repo#3"}
            expect: {proceed: true}
    """)
    assert main(["policy", "test", str(folder)]) == 0, capsys.readouterr()
    assert capsys.readouterr().out.endswith("2 passed, 0 failed\n")


def test_a_policy_folder_one_letter_off_gets_a_did_you_mean(tmp_path: Path) -> None:
    (tmp_path / "policies").mkdir()
    with pytest.raises(Exception) as info:
        read_policy(tmp_path / "polices")
    assert str(info.value) == (
        f"{tmp_path / 'polices'}: no such folder. Did you mean policies/ (beside it)? A policy "
        "entry names a folder of rule files, relative to the folder of cli-config.yaml")


def test_init_says_how_many_rules_it_wrote(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["init", str(tmp_path / "loop")]) == 0
    rules = len(read_policy(tmp_path / "loop" / "policies").rules)
    files = len([n for n in FILES if n.count("/") == 1 and n.startswith("policies/")])
    assert rules > files  # it counted the files: "4 rules" for five (six now)
    assert f"policies/ ({rules} rules, each with a test case" in capsys.readouterr().out


def test_a_part_the_condition_holds_twice_is_named_by_its_use_not_printed_twice(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _folder(tmp_path, """\
rules:
  - name: urgent
    on: phase_changed
    when: "contains(labels, 'urgent') || (terminal && contains(labels, 'urgent'))"
    set: {notify: false}
""", """\
        cases:
          - name: an urgent phase change is quiet
            point: phase_changed
            facts: {labels: [urgent]}
            expect: {notify: false}
    """)
    assert main(["policy", "test", str(folder), "--coverage"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines()
             if line.startswith("branches: urgent:")]
    assert lines == [
        "branches: urgent: `contains(labels, 'urgent')` (use 1 of 2 in the condition) was "
        "never false",
        "branches: urgent: `terminal` was never evaluated",
        "branches: urgent: `contains(labels, 'urgent')` (use 2 of 2 in the condition) was "
        "never evaluated",
    ]
    assert len(set(lines)) == len(lines)


def test_items_show_json_says_where_the_loop_has_the_item(ld: object) -> None:
    """A script reading `items show --json` had no node and no gate state."""
    from runtime_helpers import LoopDir

    assert isinstance(ld, LoopDir)
    ld.write_config()
    fresh = ld.add("Never armed")
    shown = json.loads(ld.ok("items", "show", fresh, "--json"))
    assert (shown["work_state"], shown["node"], shown["at_gate"]) == (None, None, False)
    gate = ld.add("At the gate")
    ld.start(gate)
    ld.poll()
    ld.complete(gate)
    shown = json.loads(ld.ok("items", "show", gate, "--json"))
    assert shown["ref"] == gate and shown["state"] == "open"
    assert (shown["work_state"], shown["at_gate"]) == ("gate", True)
    assert shown["node"]
    text = ld.ok("items", "show", gate)
    assert (f"loop:   gate at {shown['node']} (a human gate: it waits for /approve or "
            "/reject)") in text
