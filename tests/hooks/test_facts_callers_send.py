"""The facts each caller sends (issue 36.3-36.5): the other loop's own fields reach served
rules under their names; a fact a caller did not send is unknown, and a rule reading it is
never decided on a guess; `policy check --dialect` checks a folder against one caller."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from any_loop_data import PARAMS, upstream_request
from serving_helpers import Served, post
from the_loop.hooks import load_chain
from the_loop.hooks.engine.callers import OTHER_LOOP_FACTS, OTHER_LOOP_RECORD
from the_loop.hooks.engine.dialect import read_params
from the_loop.hooks.engine.points import (
    SPECS,
    WORK_ITEM_FIELDS,
    SessionSpawn,
    WorkItem,
    WorkItemStart,
    context_from_json,
)

DOCS = Path(__file__).parents[2] / "docs"
SKIP = "--dangerously-skip-permissions"
RULES = f"""\
rules:
  - name: no-skipped-permissions
    on: session_spawn
    when: "contains(harness_args, '{SKIP}')"
    set: {{proceed: false, reason: "no {SKIP} ({{{{ effort }}}} effort)"}}
  - name: forks-need-ok-to-test
    on: session_spawn
    when: "work_item.fork"
    set: {{proceed: false, reason: "forks need ok-to-test"}}
"""


def _folder(tmp_path: Path, text: str = RULES, name: str = "rules") -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "rules.yaml").write_text(text, encoding="utf-8")
    return folder


def _spawn(**item: Any) -> dict[str, Any]:
    request = upstream_request("session_spawn")
    request["params"]["effort"] = "high"
    request["params"]["work_item"].update(item)
    return request


def test_a_served_rule_reads_harness_args_from_the_other_loops_request(
        tmp_path: Path) -> None:
    """Their request shape, with and without the flag: refused, then allowed (the work item
    says it is an issue, so the fork rule has nothing unknown to read)."""
    served = Served(["hooks", "serve", "--policy", str(_folder(tmp_path)), "--port", "0"],
                    tmp_path)
    try:
        flagged = _spawn(kind="issue")
        flagged["params"]["harness_args"] = ["--model", "x", SKIP]
        assert post(served.url, flagged)[1]["result"] == {
            "proceed": False, "reason": f"no {SKIP} (high effort)"}
        plain = _spawn(kind="issue")
        plain["params"]["harness_args"] = ["--model", "x"]
        assert post(served.url, plain)[1]["result"] is None
    finally:
        served.kill()


def test_a_fork_rule_served_to_a_caller_that_never_sends_fork_fails_never_passes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Their pull request carries no `fork`: the call fails naming the rule and the fact (a
    `required` caller refuses); sent, it decides both ways."""
    served = Served(["hooks", "serve", "--policy", str(_folder(tmp_path)), "--port", "0"],
                    tmp_path)
    try:
        error = post(served.url, _spawn(kind="pull-request"))[1]["error"]
        assert error["code"] == -32000
        assert ("policy rule 'forks-need-ok-to-test' (rules.yaml) reads work_item.fork at "
                "session_spawn, which the caller did not send") in error["message"]
        assert post(served.url, _spawn(kind="pull-request", fork=True))[1]["result"] == {
            "proceed": False, "reason": "forks need ok-to-test"}
        assert post(served.url, _spawn(kind="pull-request", fork=False))[1]["result"] is None
        # Our own client sends unknown_facts: a context that does not know fork is refused
        # by a required url: entry, never let through as "not a fork".
        config = tmp_path / "cli-config.yaml"
        config.write_text(f"loop: acme\nstateDir: state\nhooks:\n  - name: house\n    url: "
                          f"{served.url}\n    required: true\n", encoding="utf-8")
        pr = WorkItem(ref="local:acme/app#2", kind="pull-request")
        out = load_chain(config).run(SessionSpawn(work_item=pr, unknown_facts=["work_item.fork"]))
        assert out.proceed is False and "reads work_item.fork" in out.reason
        assert load_chain(config).run(SessionSpawn(work_item=pr, unknown_facts=[])).proceed
    finally:
        served.kill()


def test_other_loop_facts_are_what_their_recorded_requests_carry() -> None:
    """The dialect table against tests/data/upstream-wire: every key they send is read as a
    fact (none ignored but work_item_complete's kind, which says the record's), and what
    they never send is listed unknown."""
    for point, params in PARAMS.items():
        ctx, ignored = read_params(point, params)
        assert ignored == (["kind"] if point == "work_item_complete" else []), point
        facts = {f.name for f in SPECS[point].facts} - {"unknown_facts"}
        records = {f"{r}.{f}" for r in ("work_item", "endpoint") for f in WORK_ITEM_FIELDS}
        assert set(ctx.unknown_facts) - records == facts - set(OTHER_LOOP_FACTS[point]), point
        assert set(params["work_item"]) - {"provider"} | {"tracker"} == set(OTHER_LOOP_RECORD)


def test_any_loop_table_lists_each_fact_only_the_other_loop_sends() -> None:
    """docs/any-loop.md's "sent only by that loop" rows are the catalog's other-loop facts,
    and each is a key of their recorded request at that point."""
    text = (DOCS / "any-loop.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (`[^|]+`) \| `(\w+)` \| a fact of its own", text, re.M)
    documented = {(point, name) for names, point in rows
                  for name in re.findall(r"`(\w+)`", names)}
    catalog = {(p, f.name) for p, spec in SPECS.items() for f in spec.facts
               if f.sent_by == "other-loop"}
    assert documented == catalog
    assert all(name in PARAMS[point] for point, name in catalog)


def test_this_loops_contexts_list_the_facts_its_runtime_never_fills() -> None:
    assert SessionSpawn().unknown_facts == ["effort", "harness_args"]
    assert WorkItemStart().unknown_facts == ["command", "harness", "instance"]
    given = context_from_json("session_spawn", {"harness_args": ["--x"]})
    assert given.unknown_facts == ["effort"]  # a fact given is known
    assert context_from_json("session_spawn", {"unknown_facts": []}).unknown_facts == []


def _check(tmp_path: Path, name: str, text: str, *args: str
           ) -> subprocess.CompletedProcess[str]:
    folder = _folder(tmp_path, text, name)
    return subprocess.run([sys.executable, "-m", "the_loop", "policy", "check", str(folder),
                           *args], capture_output=True, text=True, timeout=30, cwd=tmp_path)


def test_policy_check_dialect_names_rules_a_caller_cannot_decide_and_values_it_never_sends(
        tmp_path: Path) -> None:
    done = _check(tmp_path, "rules", RULES + """\
  - name: quiet-replies
    on: input_received
    when: "source == 'reply' && contains(labels, 'quiet')"
    set: {text_prefix: "[quiet] "}
""", "--dialect", "other-loop", "--json")
    assert done.returncode == 1
    doc = json.loads(done.stdout)["folders"][0]
    assert doc["errors"] == [
        "rule 'forks-need-ok-to-test' (rules.yaml) reads work_item.fork at session_spawn, "
        "which the open-source the-loop never sends: served to it, every call of this rule "
        "fails (a fact not sent is never read as a guess); leave the rule out of the folder "
        "served to it",
        "rule 'quiet-replies' (rules.yaml) reads labels at input_received, which the "
        "open-source the-loop never sends: served to it, every call of this rule fails (a "
        "fact not sent is never read as a guess); leave the rule out of the folder served "
        "to it"]
    assert ("rule 'quiet-replies' (rules.yaml) compares source with 'reply' at "
            "input_received, but the open-source the-loop sends 'comment' or 'verb': always "
            "false for it") in doc["warnings"]
    ours = _check(tmp_path, "ours", RULES, "--dialect", "the-loop")
    assert ours.returncode == 1
    assert ("rule 'no-skipped-permissions' (rules.yaml) reads effort, harness_args at "
            "session_spawn, which this loop's runtime never sends") in ours.stderr
    assert _check(tmp_path, "any", RULES).returncode == 0  # no caller: every fact readable


@pytest.mark.parametrize(("when", "said"), [
    ("work_item.frok", "reads 'work_item.frok' at column 1, but the context at session_spawn "
                       "has no field 'work_item.frok'; did you mean 'work_item.fork'?"),
    ("work_item.fork == 'yes'", "so it is always false"),
    ("endpoint.draft && work_item.author == 'eve'", ""),
])
def test_the_new_work_item_facts_are_typed_and_checked_at_load(
        tmp_path: Path, when: str, said: str) -> None:
    from the_loop.errors import PolicyError
    from the_loop.hooks.executors.policy import load_policy

    folder = _folder(tmp_path, f'rules:\n  - name: r\n    on: session_spawn\n    when: "{when}"\n'
                                "    set: {proceed: false}\n")
    if not said:
        load_policy("p", folder)
        return
    with pytest.raises(PolicyError) as caught:
        load_policy("p", folder)
    assert said in str(caught.value)
