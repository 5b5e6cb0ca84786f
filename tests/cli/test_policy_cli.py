"""`the-loop policy check` and `the-loop policy test` as real processes (issue 5, items 6-8)."""

from __future__ import annotations

import json
import re
import shutil
import textwrap
from pathlib import Path
from typing import Any

from the_loop.hooks.policy.files import revision

ROOT = Path(__file__).resolve().parents[2]

RULES = """\
rules:
  - name: trusted-prs-only
    description: pull requests need the trusted label
    on: session_spawn
    when: "work_item.kind == 'pull-request' && !contains(labels, 'trusted')"
    set: {proceed: false, reason: "needs trusted ({{ work_item.ref }})"}
  - name: preamble
    on: [session_spawn]
    set: {prompt_prefix: "House rules. "}
  - name: quiet
    on: phase_changed
    mode: audit
    when: "contains(labels, 'quiet')"
    set: {notify: false}
"""

CASES = """\
cases:
  - name: untrusted pr refused
    point: session_spawn
    facts:
      work_item: {ref: "local:acme/app#2", kind: pull-request}
      prompt: "go"
    expect: {proceed: false, reason: "needs trusted (local:acme/app#2)"}
    rules: [trusted-prs-only, preamble]
  - name: issue gets the preamble
    point: session_spawn
    facts: {prompt: "go"}
    expect: {proceed: true, prompt: "House rules. go"}
  - name: quiet is only audited
    point: phase_changed
    facts: {labels: [quiet]}
    expect: {notify: true}
    audit: [quiet]
"""


def folder(tmp_path: Path, cases: str = CASES, rules: str = RULES) -> Path:
    where = tmp_path / "policies"
    (where / "tests").mkdir(parents=True, exist_ok=True)
    (where / "rules.yaml").write_text(rules, encoding="utf-8")
    (where / "tests" / "cases.yaml").write_text(textwrap.dedent(cases), encoding="utf-8")
    return where


# ------------------------------------------------------------------ check


def test_check_lines_up_descriptions_across_files_of_different_name_lengths(
    tmp_path: Path, run_cli: Any
) -> None:
    (tmp_path / "p").mkdir()
    for name, rule in (("10-a.yaml", "short"), ("50-much-longer.yaml", "other")):
        (tmp_path / "p" / name).write_text(
            f"rules:\n  - name: {rule}\n    description: the {rule} one\n"
            "    on: work_item_start\n    set: {reason: x}\n", "utf-8")
    done = run_cli("policy", "check", "p")
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if " one" in line]
    assert len(rows) == 2 and len({row.index("the ") for row in rows}) == 1, rows


def test_i5_6_check_lists_the_rules_per_point(tmp_path: Path, run_cli: Any) -> None:
    folder(tmp_path)
    done = run_cli("policy", "check", "policies")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == (
        "policies: 3 rule(s) in 1 file(s), all compiled and checked; 0 expression(s) fell "
        f"back to the reference interpreter; revision {revision(tmp_path / 'policies')}"
    )
    assert lines[1] == "session_spawn:"
    assert lines[2].split() == ["trusted-prs-only", "enforce", "rules.yaml", "pull", "requests",
                                "need", "the", "trusted", "label"]
    assert lines[3].split() == ["preamble", "enforce", "rules.yaml"]
    assert lines[4:6] == ["phase_changed:", "  quiet             audit    rules.yaml"]
    assert lines[6].startswith("no rules at: work_item_start, session_spawned")


def test_i5_6_check_json(tmp_path: Path, run_cli: Any) -> None:
    folder(tmp_path)
    done = run_cli("policy", "check", "policies", "--json")
    [data] = json.loads(done.stdout)["folders"]
    assert data["rules"] == 3 and data["compile_stats"]["fallback"] == 0
    assert data["revision"] == revision(tmp_path / "policies") and data["mask"] == []
    assert [r["name"] for r in data["points"]["session_spawn"]] == ["trusted-prs-only",
                                                                    "preamble"]


def test_i5_6_check_fails_listing_every_error(tmp_path: Path, run_cli: Any) -> None:
    where = folder(tmp_path, rules="rules:\n"
                   "  - {name: a, on: session_spawn, when: \"lables\", set: {proceed: false}}\n"
                   "  - {name: b, on: work_item_start, set: {prompt: x}}\n")
    (where / "z.yaml").write_text("rules: [", encoding="utf-8")
    done = run_cli("policy", "check", "policies")
    assert done.returncode == 1 and done.stdout == ""
    err = done.stderr.splitlines()
    assert err[0] == "the-loop: 3 errors in policy folder policies:"
    assert err[1].startswith("  policies/rules.yaml: rule 'a' → when: 'lables' reads 'lables'")
    assert err[2].startswith("  policies/rules.yaml: rule 'b' → set.prompt: work_item_start")
    assert err[3].startswith("  policies/z.yaml: not valid YAML at line")


def test_i5_6_check_json_lists_every_error_for_ci(tmp_path: Path, run_cli: Any) -> None:
    folder(tmp_path, rules="rules:\n  - {name: a, on: session_spawn, set: {proceed: true}}\n"
                           "  - {name: b, on: session_spawn, set: {}}\n")
    for command in ("check", "test"):
        done = run_cli("policy", command, "policies", "--json")
        assert done.returncode == 1
        data = json.loads(done.stdout)
        assert data["ok"] is False and len(data["folders"][0]["errors"]) == 2


def test_i5_6_check_defaults_to_policies_next_to_the_config(
    tmp_path: Path, run_cli: Any, write_config: Any
) -> None:
    where = tmp_path / "conf"
    folder(where)
    config = write_config("loop: acme\n", folder=where)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = run_cli("--config", str(config), "policy", "check", cwd=elsewhere)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{where / 'policies'}: 3 rule(s)")


def test_i5_6_check_without_config_uses_dot_policies(tmp_path: Path, run_cli: Any) -> None:
    folder(tmp_path)
    done = run_cli("policy", "check")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("policies: 3 rule(s)")


def test_a_folder_named_relative_to_the_config_not_here_says_which_path_to_pass(
    tmp_path: Path, run_cli: Any
) -> None:
    """Right after `init`, `policy check policies` from the project folder: the folder is
    in .the-loop/, and the sentence says so (it is what the guide writes)."""
    assert run_cli("init").returncode == 0
    done = run_cli("policy", "check", "policies")
    assert done.returncode == 1
    assert done.stderr == (
        f"the-loop: policies: nothing at {tmp_path / 'policies'}; paths on the command line "
        "resolve against the working directory. Beside the config in effect it is "
        ".the-loop/policies: pass .the-loop/policies, or leave DIR out to use every policy: "
        "entry of the config in effect\n")
    assert run_cli("policy", "check", ".the-loop/policies").returncode == 0


def test_json_without_any_policy_folder_is_still_one_json_document(
    tmp_path: Path, run_cli: Any
) -> None:
    """A CI step parses stdout: with nothing to check it gets ok: false and the reason."""
    for command in ("check", "test"):
        done = run_cli("policy", command, "--json")
        assert done.returncode == 1
        doc = json.loads(done.stdout)
        assert doc["ok"] is False and doc["folders"] == []
        assert doc["error"].startswith("no policy folder: pass DIR")


def test_i5_6_check_missing_folder(tmp_path: Path, run_cli: Any) -> None:
    done = run_cli("policy", "check", "nowhere")
    assert done.returncode == 1
    assert done.stderr == (f"the-loop: nowhere: nothing at {tmp_path / 'nowhere'} (a path on "
                           "the command line is relative to the working directory); leave DIR "
                           "out to use every policy: entry of the config in effect\n")


# ------------------------------------------------------------------ test


def test_i5_7_test_passes_prints_one_line_per_case_and_a_summary(
    tmp_path: Path, run_cli: Any
) -> None:
    folder(tmp_path)
    done = run_cli("policy", "test", "policies")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == [
        "PASS  cases.yaml: untrusted pr refused  (session_spawn)",
        "PASS  cases.yaml: issue gets the preamble  (session_spawn)",
        "PASS  cases.yaml: quiet is only audited  (phase_changed)",
        "3 passed, 0 failed",
    ]


def test_an_expectation_of_the_wrong_type_says_so_once_with_the_fix(
    tmp_path: Path, run_cli: Any
) -> None:
    folder(tmp_path, cases="""\
        cases:
          - name: starts
            point: session_spawn
            facts: {prompt: "go"}
            expect: {proceed: yes}
    """)
    done = run_cli("policy", "test", "policies")
    assert done.returncode == 1
    [line] = [x for x in (done.stdout + done.stderr).splitlines() if "expect.proceed" in x]
    assert line.endswith("case 'starts' → expect.proceed: must be bool (got 'yes' that is str); "
                         "write true or false (yes, no, on and off are strings here)")


def test_i5_7_test_exits_non_zero_on_a_wrong_expectation(tmp_path: Path, run_cli: Any) -> None:
    folder(tmp_path, cases="""\
        cases:
          - name: wrongly expects a pull request to start
            point: session_spawn
            facts: {work_item: {kind: pull-request}}
            expect: {proceed: true}
          - name: wrong rules
            point: session_spawn
            facts: {prompt: "go"}
            expect: {prompt: "House rules. go"}
            rules: [trusted-prs-only]
    """)
    done = run_cli("policy", "test", "policies")
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        "FAIL  cases.yaml: wrongly expects a pull request to start  (session_spawn)",
        "      proceed: expected true, got false",
        "FAIL  cases.yaml: wrong rules  (session_spawn)",
        "      rules applied: expected ['trusted-prs-only'], got ['preamble']",
        "note: no case exercised: quiet",
        "0 passed, 2 failed",
    ]


def test_i5_7_test_file_naming_unknown_point_fact_or_rule_fails(
    tmp_path: Path, run_cli: Any
) -> None:
    folder(tmp_path, cases="""\
        cases:
          - name: ok
            point: session_spawn
            expect: {proceed: true}
          - name: bad point
            point: session_start
            expect: {proceed: true}
          - name: bad fact
            point: session_spawn
            facts: {lables: [x]}
            expect: {proceed: true}
          - name: bad rule
            point: session_spawn
            expect: {proceed: true}
            rules: [preambel]
          - name: bad decision
            point: work_item_start
            expect: {prompt: x}
          - name: expects nothing
            point: work_item_start
    """)
    done = run_cli("policy", "test", "policies")
    assert done.returncode == 1
    out = done.stdout
    assert "PASS  cases.yaml: ok  (session_spawn)" in out
    assert "case 'bad point' → point: 'session_start' is not a lifecycle point" in out
    assert "case 'bad fact' → facts: session_spawn has no field 'lables' (did you mean " \
        "'labels'?)" in out
    assert "case 'bad rule' → rules: no rule named 'preambel' in the folder (did you mean " \
        "'preamble'?)" in out
    assert "case 'bad decision' → expect.prompt: not a decision at work_item_start" in out
    assert "case 'expects nothing' → expect: missing" in out
    assert out.splitlines()[-1] == "1 passed, 0 failed, 5 test file error(s)"


def test_i5_7_test_json_for_ci(tmp_path: Path, run_cli: Any) -> None:
    folder(tmp_path)
    done = run_cli("policy", "test", "policies", "--json")
    assert done.returncode == 0
    assert json.loads(done.stdout)["ok"] is True
    [data] = json.loads(done.stdout)["folders"]
    assert (data["ok"], data["passed"], data["failed"]) == (True, 3, 0)
    assert data["cases"][0]["rules"] == ["trusted-prs-only", "preamble"]
    assert data["cases"][2]["audit"] == ["quiet"]


def test_i5_7_test_without_test_files_fails(tmp_path: Path, run_cli: Any) -> None:
    where = folder(tmp_path)
    (where / "tests" / "cases.yaml").unlink()
    done = run_cli("policy", "test", "policies")
    assert done.returncode == 1
    assert "no test files" in done.stdout and "0 passed, 0 failed" in done.stdout


def test_i5_7_test_on_a_folder_that_does_not_load_fails(tmp_path: Path, run_cli: Any) -> None:
    folder(tmp_path, rules="rules:\n  - {name: a, on: session_spawn, set: {proceed: true}}\n")
    done = run_cli("policy", "test", "policies")
    assert done.returncode == 1
    assert "set.proceed: a policy may only refuse" in done.stderr


def test_i5_8_shipped_policies_pass_their_tests(run_cli: Any) -> None:
    done = run_cli("policy", "test", "policies", cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1].endswith("passed, 0 failed")
    assert "note: no case exercised" not in done.stdout
    check = run_cli("policy", "check", "policies", cwd=ROOT)
    assert check.returncode == 0 and "0 expression(s) fell back" in check.stdout


# ------------------------------------------------------------------ the guide (item 9)

GUIDE = ROOT / "docs" / "policy-guide.md"


def _table_after(marker: str) -> list[list[str]]:
    lines = GUIDE.read_text(encoding="utf-8").split(marker, 1)[1].splitlines()[1:]
    rows = []
    for line in lines[2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def _names(cell: str) -> list[str]:
    return re.findall(r"`([a-z_]+)`", cell)


def test_i5_9_guide_table_of_readable_and_settable_fields_matches_the_catalog() -> None:
    from the_loop.hooks.engine.points import SPECS
    from the_loop.hooks.policy.rules import settable

    rows = _table_after("<!-- policy-settable")
    assert [_names(r[0])[0] for r in rows] == list(SPECS)
    common = {"work_item", "loop", "labels", "unknown_facts"}
    for point_cell, reads, sets in rows:
        point = _names(point_cell)[0]
        assert _names(reads) == [f.name for f in SPECS[point].facts if f.name not in common]
        assert _names(sets) == list(settable(point))


def test_i5_5_guide_documents_every_function_with_an_example_that_loads() -> None:
    from the_loop.hooks.engine.points import POINTS
    from the_loop.hooks.policy.checks import check_fields
    from the_loop.hooks.policy.expressions import compile_expression
    from the_loop.hooks.policy.functions import POLICY_FUNCTIONS
    from the_loop.hooks.policy.rules import field_types
    from the_loop.jmes import root_paths

    rows = _table_after("<!-- policy-functions")
    documented = {r[0].strip("`"): r[2].strip("`") for r in rows}
    assert sorted(documented) == sorted(signature for signature, _, _ in
                                        POLICY_FUNCTIONS.values())
    for example in documented.values():
        ok = [p for p in POINTS
              if not check_fields(root_paths(compile_expression(
                  example, field_types=field_types(p)).ast), (p,))]
        assert ok, f"{example!r} reads a field no point has"


def test_i5_9_guide_rule_examples_load_and_match_the_shipped_files(tmp_path: Path) -> None:
    import yaml

    from the_loop.hooks.executors.policy import load_policy

    blocks = re.findall(r"```yaml\n(.*?)```", GUIDE.read_text(encoding="utf-8"), re.S)
    rule_blocks = [b for b in blocks if "\nrules:" in "\n" + b]
    assert len(rule_blocks) >= 4
    for i, block in enumerate(rule_blocks):
        where = tmp_path / str(i)
        shutil.copytree(ROOT / "policies" / "data", where / "data")  # the examples' data
        (where / "rules.yaml").write_text(block, encoding="utf-8")
        load_policy("guide", where)  # raises on any error
        first = block.splitlines()[0]
        if first.startswith("# ") and first.endswith(".yaml"):
            shipped = ROOT / "policies" / first[2:]
            assert yaml.safe_load(block) == yaml.safe_load(shipped.read_text(encoding="utf-8"))


# ------------------------------------------------- a newcomer's walk through issue 15, round 2


def test_one_policy_entry_gets_a_header_naming_the_entry_and_its_on(
    tmp_path: Path, run_cli: Any, write_config: Any
) -> None:
    folder(tmp_path)
    write_config("loop: acme\nhooks:\n"
                 "  - {name: house, policy: policies, on: [session_spawn, phase_changed]}\n")
    for command in ("check", "test"):
        done = run_cli("policy", command)
        assert done.returncode == 0, done.stdout + done.stderr
        assert done.stdout.splitlines()[0] == (
            "== policy entry 'house' (policies; on: session_spawn, phase_changed)")
    write_config("loop: acme\nhooks:\n  - {name: house, policy: policies}\n")
    assert run_cli("policy", "check").stdout.splitlines()[0] == (
        "== policy entry 'house' (policies)")  # relative to where it was run
    assert run_cli("policy", "check", "policies").stdout.startswith("policies: 3 rule(s)")


def test_json_has_one_shape_whatever_the_number_of_policy_entries(
    tmp_path: Path, run_cli: Any, write_config: Any
) -> None:
    folder(tmp_path)
    for command in ("check", "test"):
        given_dir = json.loads(run_cli("policy", command, "policies", "--json").stdout)
        assert set(given_dir) == {"ok", "folders"} and given_dir["ok"] is True
        assert [(f["entry"], f["folder"]) for f in given_dir["folders"]] == [
            (None, "policies")]
    write_config("loop: acme\nhooks:\n  - {name: one, policy: policies}\n")
    one = json.loads(run_cli("policy", "test", "--json").stdout)
    write_config("loop: acme\nhooks:\n  - {name: one, policy: policies}\n"
                 "  - {name: two, policy: policies}\n")
    two = json.loads(run_cli("policy", "test", "--json").stdout)
    assert set(one) == set(two) == {"ok", "folders"}
    assert [f["entry"] for f in one["folders"]] == ["one"]
    assert [f["entry"] for f in two["folders"]] == ["one", "two"]
    assert set(one["folders"][0]) == set(two["folders"][1])


def test_json_ok_is_false_whenever_the_exit_code_is_not_zero(
    tmp_path: Path, run_cli: Any
) -> None:
    folder(tmp_path, cases=CASES.split("  - name: issue gets")[0])  # only one rule matched
    done = run_cli("policy", "test", "policies", "--min-coverage", "100", "--json")
    assert done.returncode == 1
    data = json.loads(done.stdout)
    [only] = data["folders"]
    assert (data["ok"], only["ok"], only["failed"]) == (False, False, 0)
    assert only["coverage"]["ok"] is False and only["coverage"]["min"] == 100
    passing = run_cli("policy", "test", "policies", "--min-coverage", "60%", "--json")
    assert passing.returncode == 0 and json.loads(passing.stdout)["ok"] is True


def test_min_coverage_takes_0_to_100_with_or_without_a_percent_sign(
    tmp_path: Path, run_cli: Any
) -> None:
    folder(tmp_path, cases=CASES.split("  - name: issue gets")[0])  # 2 of 3 rules: 66.67%
    for floor, code in (("100%", 1), ("100", 1), ("66%", 0), ("0", 0), ("0%", 0),
                        ("66.6 %", 0), ("66.7", 1)):
        done = run_cli("policy", "test", "policies", "--min-coverage", floor)
        assert done.returncode == code, (floor, done.stdout, done.stderr)
    below = run_cli("policy", "test", "policies", "--min-coverage", "100%")
    assert below.stdout.splitlines()[-1] == (
        "coverage 66.6% is below --min-coverage 100: no case matched quiet; add a case to "
        "policies/tests that each of them matches")


def test_min_coverage_outside_0_to_100_is_a_usage_error_in_one_sentence(
    tmp_path: Path, run_cli: Any
) -> None:
    folder(tmp_path)
    for floor in ("150", "-5", "100.5", "abc", "50%%", "nan", "inf", ""):
        done = run_cli("policy", "test", "policies", f"--min-coverage={floor}")
        assert done.returncode == 2 and done.stdout == "", floor
        assert done.stderr.splitlines()[-1] == (
            "the-loop policy test: error: argument --min-coverage: expected a percentage from "
            f"0 to 100 (e.g. 100 or 80%), got {floor!r}")


def test_a_case_reports_every_problem_of_its_facts_at_once_each_with_did_you_mean(
    tmp_path: Path, run_cli: Any
) -> None:
    folder(tmp_path, cases="""\
        cases:
          - name: typos
            point: session_spawn
            facts: {lables: [x], work_item: {numbr: 3, kind: 5}, respawn: "yes"}
            expect: {proceed: true}
        """)
    done = run_cli("policy", "test", "policies")
    assert done.returncode == 1
    where = "ERROR policies/tests/cases.yaml: case 'typos' → facts: session_spawn"
    errors = [line for line in done.stdout.splitlines() if line.startswith("ERROR")]
    assert errors == [
        f"{where} has no field 'lables' (did you mean 'labels'?); valid fields: work_item, "
        "loop, labels, unknown_facts, actor, harness, model, command, cwd, respawn, endpoint, "
        "node, phase, effort, harness_args, prompt, proceed, reason",
        f"{where}.work_item has no field 'numbr' (did you mean 'number'?); valid fields: ref, "
        "tracker, host, owner, repo, repository, number, kind, url, id, author, base, head, "
        "head_repository, fork, draft",
        f"{where}.work_item.kind must be str (got 5 that is int)",
        f"{where}.respawn must be bool (got 'yes' that is str)",
    ]


def test_a_coverage_share_is_never_shown_rounded_up_to_the_floor_it_misses() -> None:
    from the_loop.hooks.policy.testing import TestReport

    report = TestReport("p", coverage={f"r{i}": [1, 0] for i in range(2000)},
                        unexercised=["r0"])
    assert report.covered_percent > 99.9 and report.shown_percent == 99.9
    assert report.to_json()["coverage"]["percent"] == 99.9


def test_a_broken_entry_does_not_hide_the_entries_after_it(
    tmp_path: Path, run_cli: Any, write_config: Any
) -> None:
    folder(tmp_path)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "r.yaml").write_text(
        "rules:\n  - {name: a, on: session_spawn, when: \"lables\", set: {proceed: false}}\n",
        "utf-8")
    write_config("loop: acme\nhooks:\n  - {name: first, policy: broken}\n"
                 "  - {name: second, policy: policies}\n")
    done = run_cli("policy", "check")
    assert done.returncode == 1
    assert done.stderr.startswith(f"the-loop: {broken / 'r.yaml'}: rule 'a' → when: 'lables'")
    assert done.stdout.splitlines()[:3] == [
        "== policy entry 'first' (broken)", "",
        "== policy entry 'second' (policies)",
    ]
    assert f"{tmp_path / 'policies'}: 3 rule(s)" in done.stdout


def test_two_rules_with_the_same_invalid_name_are_also_called_duplicates(
    tmp_path: Path, run_cli: Any
) -> None:
    """A name that breaks the pattern is still a name: the second `Bad_Name` is a duplicate."""
    rule = "  - name: Bad_Name\n    on: session_spawn\n    set: {proceed: false}\n"
    folder(tmp_path, rules="rules:\n" + rule + rule)
    done = run_cli("policy", "check", "policies")
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert lines[0] == "the-loop: 3 errors in policy folder policies:"
    assert lines[3] == ("  policies/rules.yaml: rule 'Bad_Name' → name: duplicate: a rule named "
                        "'Bad_Name' is already in policies/rules.yaml; rule names must be "
                        "unique across the folder")


def test_check_shows_a_revision_that_follows_rule_and_data_files_not_tests(
    tmp_path: Path, run_cli: Any
) -> None:
    folder(tmp_path)
    policies = tmp_path / "policies"

    def shown() -> str:
        done = run_cli("policy", "check", "policies", "--json")
        return str(json.loads(done.stdout)["folders"][0]["revision"])

    first = shown()
    assert re.fullmatch(r"[0-9a-f]{64}", first)
    (policies / "tests").mkdir(exist_ok=True)
    (policies / "tests" / "cases.yaml").write_text("cases: []\n", encoding="utf-8")
    assert shown() == first  # a test case decides nothing
    (policies / "data").mkdir()
    (policies / "data" / "teams.yaml").write_text("teams: [a, b]\n", encoding="utf-8")
    with_data = shown()
    assert with_data != first
    rules = policies / "rules.yaml"
    rules.write_text(rules.read_text(encoding="utf-8") + "\n", encoding="utf-8")
    assert shown() not in (first, with_data)


def test_a_mask_list_in_a_rule_file_is_checked_and_shown(tmp_path: Path, run_cli: Any) -> None:
    folder(tmp_path)
    mask = tmp_path / "policies" / "mask.yaml"
    mask.write_text("mask:\n  - input_received.text\n  - '*.prompt'\n", encoding="utf-8")
    done = run_cli("policy", "check", "policies")
    assert done.returncode == 0, done.stderr
    assert ("a hook server's decision log masks: input_received.text, *.prompt"
            in done.stdout)
    mask.write_text("mask:\n  - input_received.txt\n", encoding="utf-8")
    done = run_cli("policy", "check", "policies")
    assert done.returncode == 1
    assert "mask: mask path 'input_received.txt': no text field 'txt' at input_received; " \
           "did you mean 'text'?" in done.stderr


def test_i31_1_check_reads_a_rule_file_whose_name_is_not_utf8(
        tmp_path: Path, run_cli: Any) -> None:
    """A file name is bytes on POSIX: `b'r\\xff.yaml'` is a rule file like any other. The
    check crashed hashing it ("UnicodeEncodeError ... This is a bug"); it loads, and the
    name is shown escaped."""
    import os

    where = folder(tmp_path)
    before = revision(where)
    odd = os.fsdecode(bytes(where) + b"/r\xff.yaml")
    Path(odd).write_text(RULES.replace("trusted-prs-only", "odd-one")
                         .replace("preamble", "odd-two").replace("quiet", "odd-three"),
                         encoding="utf-8")
    done = run_cli("policy", "check", "policies")
    assert done.returncode == 0, done.stderr
    assert "6 rule(s) in 2 file(s)" in done.stdout and "bug" not in done.stderr
    assert "odd-one" in done.stdout and "r\\udcff.yaml" in done.stdout
    assert revision(where) != before  # the odd file is part of the revision
    as_json = run_cli("policy", "check", "policies", "--json")
    assert as_json.returncode == 0, as_json.stderr
    [data] = json.loads(as_json.stdout)["folders"]
    assert data["files"] == ["rules.yaml", "r\\udcff.yaml"]
