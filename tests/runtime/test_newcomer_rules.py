"""The newcomer's two rules in a real `poll` (issue 36, done-when): "pull requests from forks
need the ok-to-test label" and "no sessions on main", as the shipped policies/ write them
(and `the-loop policy test policies` tests them), against the local tracker's facts."""

from __future__ import annotations

import shutil
from pathlib import Path

from runtime_helpers import LoopDir

POLICIES = Path(__file__).parents[2] / "policies"


def test_a_fork_pull_request_without_ok_to_test_and_a_session_on_main_get_no_session(
        ld: LoopDir) -> None:
    shutil.copytree(POLICIES, ld.root / "policies")
    ld.write_config("hooks:\n  - {name: house-rules, policy: policies, required: true}\n")
    pr = ("--kind", "pull-request", "--label", "trusted")
    fork = ld.add("Fix from a fork", *pr, "--head", "fix", "--head-repository", "eve/app")
    on_main = ld.add("Hotfix", *pr, "--head", "main")
    labelled = ld.add("Fork, checked", *pr, "--head", "f2", "--head-repository", "eve/app",
                      "--label", "ok-to-test")
    plain = ld.add("Tidy", *pr, "--head", "tidy")
    for ref in (fork, on_main, labelled, plain):
        ld.start(ref)
    ld.poll()
    launched = sorted(r["env"]["THE_LOOP_WORK_ITEM"] for r in ld.launches())
    assert launched == sorted([labelled, plain])
    assert any("pull requests from forks need the ok-to-test label (eve/app)" in c
               for c in ld.comments(fork)), ld.comments(fork)
    assert any(f"no sessions on main: {on_main} has main as its head branch" in c
               for c in ld.comments(on_main)), ld.comments(on_main)
    refused = {e["work_item"] for e in ld.events("hooks.refused")}
    assert {fork, on_main} <= refused and not {labelled, plain} & refused
