"""Replay of points recorded before the pull-request facts existed (issue 36.3): the report
names each rule that reads a fact the record lacks, and such a rule is never decided on a
guessed value there."""

from __future__ import annotations

from pathlib import Path

from the_loop.decisions.layout import Recorded
from the_loop.runtime.replay import Replayer, policy_chain

RULES = """\
rules:
  - name: forks-need-ok-to-test
    on: session_spawn
    when: "work_item.fork && !contains(labels, 'ok-to-test')"
    set: {proceed: false, reason: "forks need ok-to-test"}
  - name: house-preamble
    on: session_spawn
    set: {prompt_prefix: "House rules. "}
"""
#: A session_spawn context as this loop recorded it before issue 36: no unknown_facts, and
#: a work item without author, base, head, head_repository, fork or draft.
OLD_ITEM = {"ref": "local:acme/app#2", "tracker": "local", "host": "", "owner": "acme",
            "repo": "app", "repository": "acme/app", "number": 2, "kind": "pull-request",
            "url": "local://acme/app/2", "id": "2"}
OLD_CONTEXT = {"work_item": OLD_ITEM, "loop": "acme", "labels": [], "actor": "alice",
               "harness": "demo", "model": "", "command": ["h"], "cwd": "/w", "respawn": False,
               "endpoint": OLD_ITEM, "node": "write", "phase": "write", "prompt": "Go.",
               "proceed": True, "reason": ""}


def _recorded(point_id: int, context: dict[str, object]) -> Recorded:
    return Recorded(id=point_id, at=1.0, point="session_spawn", work_item=OLD_ITEM["ref"],
                    context=context, steps=[], decisions={"prompt": "Go.", "proceed": True,
                                                          "reason": ""})


def test_replay_names_the_rules_that_read_facts_an_old_record_lacks(tmp_path: Path) -> None:
    folder = tmp_path / "policies"
    folder.mkdir()
    (folder / "rules.yaml").write_text(RULES, encoding="utf-8")
    replayer = Replayer(policy_chain(folder), {})
    outcome = replayer.one(_recorded(1, OLD_CONTEXT))
    assert outcome is not None
    report = replayer.report
    assert report.lacking == {"forks-need-ok-to-test": {
        "hook": "policy", "facts": ["work_item.fork"], "points": 1}}
    [step] = outcome.steps
    assert step.status == "failed" and "reads work_item.fork" in step.error
    assert outcome.context.prompt == "Go."  # the policy failed: nothing decided on a guess
    # A record that carries the facts (written after issue 36) is decided as usual.
    new = {**OLD_CONTEXT, "unknown_facts": [],
           "work_item": {**OLD_ITEM, "author": "eve", "base": "main", "head": "fix",
                         "head_repository": "eve/app", "fork": True, "draft": False}}
    decided = replayer.one(_recorded(2, new))
    assert decided is not None and decided.context.proceed is False
    assert report.lacking["forks-need-ok-to-test"]["points"] == 1
