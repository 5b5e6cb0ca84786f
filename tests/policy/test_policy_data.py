"""Issue 25 item 1: a policy folder's `data/*.yaml`, read by rules as `data.<name>`, through
`the-loop policy check` and `policy test` (in-process `main`)."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from the_loop.cli import main
from the_loop.hooks.policy.files import revision
from the_loop.hooks.policy.point_rules import point_rules
from the_loop.hooks.policy.rules import read_policy

RULES = """\
rules:
  - name: approve-needs-maintainer
    on: input_received
    when: "control == 'approve' && !contains(data.maintainers, actor)"
    set:
      proceed: false
      reason: "only {{ join(', ', data.maintainers) }} may approve; {{ actor }} is not one"
  - name: trusted-repos
    on: work_item_start
    when: "!contains(data.repos[?starts_with(@, 'acme/')], work_item.repository)"
    set: {proceed: false, reason: "{{ data.owner.name }} says no"}
"""

CASES = """\
cases:
  - name: mallory may not approve
    point: input_received
    facts: {actor: mallory, control: approve}
    expect: {proceed: false, reason: "only alice, bob may approve; mallory is not one"}
  - name: alice may
    point: input_received
    facts: {actor: alice, control: approve}
    expect: {proceed: true}
  - name: with mallory a maintainer for this case
    point: input_received
    data: {maintainers: [mallory]}
    facts: {actor: mallory, control: approve}
    expect: {proceed: true}
  - name: the allow list from data
    point: work_item_start
    facts: {work_item: {repository: acme/app}}
    expect: {proceed: true}
  - name: off the list
    point: work_item_start
    facts: {work_item: {repository: evil/app}}
    expect: {proceed: false, reason: "carol says no"}
"""


def _folder(tmp_path: Path, rules: str = RULES, cases: str = CASES,
            data: dict[str, str] | None = None) -> Path:
    folder = tmp_path / "policies"
    (folder / "tests").mkdir(parents=True)
    (folder / "data").mkdir()
    (folder / "rules.yaml").write_text(textwrap.dedent(rules), "utf-8")
    (folder / "tests" / "cases.yaml").write_text(textwrap.dedent(cases), "utf-8")
    files = data if data is not None else {
        "people.yaml": "maintainers: [alice, bob]\nowner: {name: carol}\n",
        "repos.yaml": "repos: [acme/app, acme/docs, other/x]\n",
    }
    for name, text in files.items():
        (folder / "data" / name).write_text(text, "utf-8")
    return folder


def _errors(folder: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    assert main(["policy", "check", str(folder)]) == 1
    lines = capsys.readouterr().err.splitlines()
    if " errors in policy folder " in lines[0]:
        return [line.strip() for line in lines[1:]]
    return [line.removeprefix("the-loop: ") for line in lines]


def test_rules_read_data_in_when_templates_and_filters_and_cases_override_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _folder(tmp_path)
    assert main(["policy", "test", str(folder)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == "5 passed, 0 failed", out


def test_data_reads_compile_to_the_literal_they_read(tmp_path: Path) -> None:
    """The condition is the literal's code, and a placeholder of data only is rendered at
    load (the reason's maintainer list is text before any context exists)."""
    policy = read_policy(_folder(tmp_path))
    [rule] = point_rules(policy.rules, "input_received")
    when = rule.when.ast["children"][1]["children"][0]["children"][0]
    assert when["type"] == "literal" and when["value"] == ["alice", "bob"]
    [(key, parts)] = rule.fast
    assert key == "reason" and parts[0] == "only alice, bob may approve; "


def test_a_misspelt_data_name_is_a_load_error_with_a_did_you_mean(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _folder(tmp_path, rules=RULES.replace("data.maintainers, actor",
                                                   "data.maintaners, actor"))
    [error] = _errors(folder, capsys)
    people = folder / "data" / "people.yaml"
    assert error == (
        f"{folder / 'rules.yaml'}: rule 'approve-needs-maintainer' → when: \"control == "
        "'approve' && !contains(data.maintaners, actor)\" reads 'data.maintaners' at column "
        "35, but data has no 'maintaners'; did you mean 'data.maintainers'? data holds: "
        f"maintainers, owner, repos (from {people}, {folder / 'data' / 'repos.yaml'})")


def test_comparing_a_data_list_with_a_string_names_the_contains_fix(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for when, fix in (("data.maintainers == actor", "contains(data.maintainers, actor)"),
                      ("actor != data.maintainers", "!contains(data.maintainers, actor)")):
        folder = _folder(tmp_path / when[:5], rules=f"""\
            rules:
              - name: r
                on: input_received
                when: "{when}"
                set: {{proceed: false}}
        """)
        [error] = _errors(folder, capsys)
        assert "(a list of strings)" in error and f"write {fix}." in error, error
        assert "data.maintainers" in error.split("→ when:")[1].split(":")[1], error


def test_a_name_in_two_data_files_is_a_load_error_naming_both(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _folder(tmp_path, data={"a.yaml": "maintainers: [alice]\n",
                                     "b.yaml": "maintainers: [bob]\n"})
    assert _errors(folder, capsys) == [
        f"{folder / 'data' / 'b.yaml'}: 'maintainers' is defined in "
        f"{folder / 'data' / 'a.yaml'} too; a data name is defined once across the data "
        "files; remove one"]


def test_bad_data_files_are_load_errors_each_naming_the_file_and_fix(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _folder(tmp_path, data={
        "a.yaml": "- alice\n",
        "b.yaml": "maintainers:\n",
        "c.yaml": "my-list: [x]\n",
        "d.yaml": "x: [a, b\n",
        "e.yaml": "repos: {1: x}\n",
    })
    errors = _errors(folder, capsys)
    where = folder / "data"
    assert errors[0].startswith(f"{where / 'a.yaml'}: expected a mapping of names to values")
    assert errors[1] == (f"{where / 'b.yaml'} → maintainers: empty (null); give it a value "
                         "([] for an empty list, '' for an empty string) or remove it")
    assert errors[2].startswith(f"{where / 'c.yaml'}: the name 'my-list' cannot be read as "
                                "data.<name>")
    assert errors[3].startswith(f"{where / 'd.yaml'}: not valid YAML at line 2")
    assert errors[4] == (f"{where / 'e.yaml'} → repos: the key 1 is not a string; quote it "
                         "(\"1\": …)")


def test_a_data_file_linked_from_outside_or_a_linked_data_folder_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _folder(tmp_path)
    outside = tmp_path / "secret.yaml"
    outside.write_text("maintainers: [eve]\n", "utf-8")
    os.symlink(outside, folder / "data" / "zz.yaml")
    assert _errors(folder, capsys) == [
        f"{folder / 'data' / 'zz.yaml'}: resolves to {outside}, outside the policy folder; "
        "copy the rule file into the folder instead of linking to it"]
    (folder / "data" / "zz.yaml").unlink()
    elsewhere = tmp_path / "shared"
    (folder / "data").rename(elsewhere)
    os.symlink(elsewhere, folder / "data")
    [error] = _errors(folder, capsys)
    assert error.startswith(f"{folder / 'data'}: a link to {elsewhere}; a policy's data")


def test_a_case_overriding_an_unknown_data_name_is_an_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _folder(tmp_path, cases="""\
        cases:
          - name: typo
            point: input_received
            data: {maintainer: [x], repos: [null]}
            facts: {actor: x, control: approve}
            expect: {proceed: true}
    """)
    assert main(["policy", "test", str(folder)]) == 1
    out = capsys.readouterr().out
    where = f"{folder / 'tests' / 'cases.yaml'}: case 'typo' → data:"
    assert (f"{where} the folder's data has no 'maintainer' (did you mean 'maintainers'?); "
            "data names: maintainers, owner, repos") in out
    assert f"{where} repos[0]: empty (null)" in out


def test_reading_data_in_a_folder_without_data_says_where_to_put_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _folder(tmp_path, data={})
    error, *_others = _errors(folder, capsys)
    assert ("reads 'data.maintainers' at column 35, but the policy folder has no data: put "
            "`maintainers: …` in a file of its data/ folder (data/*.yaml)") in error


def test_the_revision_changes_with_any_rule_or_data_file(tmp_path: Path) -> None:
    folder = _folder(tmp_path)
    first = revision(folder)
    assert revision(folder) == first
    (folder / "tests" / "cases.yaml").write_text("cases: []\n", "utf-8")  # not part of it
    assert revision(folder) == first
    people = folder / "data" / "people.yaml"
    people.write_text(people.read_text("utf-8") + "extra: 1\n", "utf-8")
    second = revision(folder)
    assert second != first
    (folder / "more.yaml").write_text("rules: []\n", "utf-8")
    assert revision(folder) not in (first, second)


def test_policy_check_json_lists_the_data_names(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = _folder(tmp_path)
    assert main(["policy", "check", str(folder), "--json"]) == 0
    [doc] = json.loads(capsys.readouterr().out)["folders"]
    assert doc["data"] == {"maintainers": "people.yaml", "owner": "people.yaml",
                           "repos": "repos.yaml"}


def test_data_files_past_the_total_bound_are_refused_before_reading(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from the_loop.hooks.policy import data

    monkeypatch.setattr(data, "MAX_DATA_BYTES", 100)
    folder = _folder(tmp_path, data={"a.yaml": "a: [" + "x, " * 20 + "y]\n",
                                     "b.yaml": "b: [" + "x, " * 20 + "y]\n"})
    assert _errors(folder, capsys) == [
        f"{folder / 'data'}: the data files hold 134 bytes; at most 100 in all (data is "
        "compiled into every rule that reads it); keep large lists out of the policy"]


def test_explain_shows_the_policy_data_a_false_condition_read(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """issue 25 gap: --explain named the data a condition read without its value."""
    folder = tmp_path / "pol"
    (folder / "data").mkdir(parents=True)
    (folder / "rules.yaml").write_text(
        "rules:\n  - name: maintainers-only\n    on: session_spawn\n"
        "    when: \"contains(data.maintainers, actor)\"\n"
        "    set: {proceed: false, reason: maintainer}\n", encoding="utf-8")
    (folder / "data" / "people.yaml").write_text("maintainers: [ann, bob]\n", encoding="utf-8")
    assert main(["policy", "eval", str(folder), "--point", "session_spawn", "--facts",
                 "actor=carol", "--explain"]) == 0
    out = capsys.readouterr().out
    assert ('contains(data.maintainers, actor) is false (actor = "carol"; '
            'data.maintainers = ["ann", "bob"])') in out
    assert main(["policy", "eval", str(folder), "--point", "session_spawn", "--facts",
                 "actor=carol", "--explain", "--json"]) == 0
    [rule] = json.loads(capsys.readouterr().out)["explain"]
    assert rule["false"][0]["fields"] == {"actor": "carol", "data.maintainers": ["ann", "bob"]}
