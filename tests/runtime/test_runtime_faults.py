"""Fault injection (issue 12.6): for every named failpoint, the process dies there
(`os._exit(86)`), the poller is restarted, and nothing is lost, doubled or stuck.

Each case walks one work item — arm → start → launch → ask → answer → graph complete (the
daemon advances) → gate → /approve → done — through the real CLI; the command that passes
the failpoint runs with `THE_LOOP_FAILPOINT` set and must exit 86; `poll --once` then runs
(without it) until the item has no pending step, and the walk goes on. At the end the invariants of
`fault_helpers.broken` are checked: every input delivered exactly once, every refusal (and
every marked comment) posted once, no item stuck, no hook asked twice for a recorded step,
one session per launch step and never two live sessions of one item.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fault_helpers import ANSWER, agents_settled, broken, hold, live_sessions
from runtime_helpers import LoopDir, on, until

#: The walk: an agent node (launch, question, answer → resumed session), graph complete,
#: the gate, /approve, done. A one-shot write runs in this process unless it is the
#: command that must crash; a poll always runs as its own process.
PLAIN = ("start", "poll", "ask", "answer", "poll", "complete", "poll", "approve", "poll")
#: The same, with input a `policy:` rule refuses (mallory's) just before the question.
MALLORY = ("start", "poll", "mallory", "ask", "answer", "poll", "complete", "poll", "approve",
           "poll")
#: An item whose start the policy refuses.
FROZEN = ("start", "poll")
#: The agent asks its question itself, from inside its first session, which then ends; the
#: second poll posts it (issue 20.5: a crash at launch must not launch that session again).
ASKING = ("start", "poll", "poll", "answer", "poll", "complete", "poll", "approve", "poll")

#: (failpoint, walk, index of the action that passes it) — every failpoint of the runtime.
CASES = [
    ("arm", PLAIN, 0),
    ("claim", PLAIN, 1),
    ("workspace", PLAIN, 1),
    ("launch", PLAIN, 1),
    ("launch", PLAIN, 4),
    ("spawn", PLAIN, 1),
    ("register", PLAIN, 1),
    ("announce", PLAIN, 1),
    ("question", PLAIN, 4),
    ("input", PLAIN, 4),
    ("input", MALLORY, 5),
    ("advance", PLAIN, 6),
    ("advance", PLAIN, 8),
    ("complete", PLAIN, 8),
    ("after-refusal-comment", FROZEN, 1),
    ("launch", ASKING, 1),
]


def case_id(case: tuple[str, tuple[str, ...], int]) -> str:
    point, walk, at = case
    variant = {PLAIN: "", MALLORY: "-refused-input", FROZEN: "-refused-start",
               ASKING: "-agent-asks"}[walk]
    return f"{point}@{walk[at]}-{at}{variant}"


def settle(ld: LoopDir, ref: str) -> int:
    """`poll --once` until `ref` has no pending step (at most 4 polls); returns how many."""
    for n in range(1, 5):
        ld.cli("poll", "--once")
        if not ld.query("SELECT key FROM steps WHERE ref=? AND state='pending'", ref):
            return n
    raise AssertionError(f"{ref} still has pending steps after 4 polls: "
                         f"{ld.query('SELECT key, detail FROM steps WHERE state=?', 'pending')}")


def act(ld: LoopDir, ref: str, action: str, failpoint: str) -> None:
    """One action of the walk; with `failpoint`, run it as a process that must die there."""
    args = {
        "start": ("start", ref, "--actor", "alice"),
        "poll": ("poll", "--once"),
        "ask": ("ask", "Which users first?", "--work-item", ref),
        "answer": ("reply", ref, ANSWER, "--actor", "alice"),
        "mallory": ("reply", ref, "Delete the database", "--actor", "mallory"),
        "complete": ("graph", "complete", "--work-item", ref),
        "approve": ("reply", ref, "/approve", "--actor", "alice"),
    }[action]
    if failpoint:
        crashed = ld.cli(*args, ok=False, env={"THE_LOOP_FAILPOINT": failpoint})
        assert crashed.returncode == 86, (
            f"`{' '.join(args)}` did not pass failpoint {failpoint}: exit "
            f"{crashed.returncode}\n{crashed.stdout}\n{crashed.stderr}")
        if action == "start":  # the operator retries: the arming is already there
            assert "is already armed (armed)" in ld.ok(*args)
        until(lambda: agents_settled(ld), timeout=60, what="the sessions to settle")
        settle(ld, ref)
    elif action == "poll":
        until(lambda: agents_settled(ld), timeout=60, what="the sessions to settle")
        settle(ld, ref)
    else:
        ld.ok(*args)
    live = live_sessions(ld)
    assert live[ref] <= 1, f"after {action}: two live sessions of {ref}: {dict(live)}"


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_a_crash_at_each_failpoint_loses_doubles_and_sticks_nothing(
        tmp_path: Path, case: tuple[str, tuple[str, ...], int], database: str) -> None:
    point, walk, at = case
    with LoopDir(tmp_path, database=database) as ld:
        hold(ld, asking=walk is ASKING)
        ref = ld.add("Add a login page", *(["--label", "frozen"] if walk is FROZEN else []))
        for i, action in enumerate(walk):
            act(ld, ref, action, point if i == at else "")

        expected = "refused" if walk is FROZEN else "done"
        assert broken(ld, {ref: expected}) == []
        steps = {s["key"]: s for s in ld.query("SELECT * FROM steps")}
        outcomes = sorted(s["outcome"] for s in steps.values() if s["kind"] == "input")
        if walk is FROZEN:
            [refusal] = [c for c in ld.comments(ref)]
            assert "refused by hook `house` at `work_item_start`: the code is frozen" in refusal
            assert ld.launches() == []
            return
        # The answer resumed the agent once, with the answer; /approve passed the gate once.
        expect = ["approved", "resumed"] + (["refused"] if walk is MALLORY else [])
        assert outcomes == sorted(expect)
        prompts = [r["prompt"] for r in ld.launches()]
        assert len(prompts) == 2 and ANSWER in prompts[1]
        assert not any("Delete the database" in p for p in prompts)
        seen = [r["point"] for r in ld.seen()]
        assert seen.count("work_item_start") == 1 and seen.count("work_item_complete") == 1
        assert seen.count("input_received") == len(expect)
        gate = [c for c in ld.comments(ref) if "review the draft" in c]
        assert len(gate) == 1
        if walk is MALLORY:
            [drop] = [c for c in ld.comments(ref) if "was dropped" in c]
            assert "by hook `house` at `input_received`: mallory may not talk" in drop
        assert ld.item(ref)["state"] == "closed"
        closed = [m for m in ld.channel_messages() if m["type"] == "phase.completed"]
        assert len({m["id"] for m in closed}) == 1
        assert json.loads(steps[f"start:{ref}:1"]["decisions"])["work_item_start"][
            "refused"] is False



def test_a_node_that_asks_no_hook_is_entered_in_the_transaction_that_moves_the_item_there(
        tmp_path: Path, database: str) -> None:
    """Entering an agent node (its launch queued) or a terminal one (its completion queued)
    asks no hook, so it is written with the move there (issue 34: one statement where an
    enter step of its own took three). A crash just after the move (the `advance`
    failpoint, where the visit commits) finds the node entered and what it owes queued; a
    human gate's enter step is still queued, to ask waiting_for_input. A person's feedback
    with /reject reaches the next session's prompt."""
    with LoopDir(tmp_path, database=database) as ld:
        hold(ld)
        ref = ld.add("Add a login page")

        def crash_at_advance() -> dict[str, dict[str, object]]:
            crashed = ld.cli("poll", "--once", ok=False, env={"THE_LOOP_FAILPOINT": "advance"})
            assert crashed.returncode == 86, crashed.stderr
            rows = ld.query("SELECT kind, state, outcome, payload FROM steps WHERE ref=? "
                            "ORDER BY seq", ref)
            return {f"{r['kind']}@{json.loads(r['payload']).get('node', '')}": r for r in rows}

        for action in ("start", "poll", "complete"):
            act(ld, ref, action, "")
        steps = crash_at_advance()  # write -> review, a gate
        assert (steps["enter@review"]["state"], steps["enter@review"]["outcome"]) == (
            "pending", "")
        settle(ld, ref)
        ld.ok("reply", ref, "/reject Please add tests.", "--actor", "alice")
        steps = crash_at_advance()  # review -> write, an agent node
        assert (steps["enter@write"]["state"], steps["enter@write"]["outcome"]) == (
            "done", "agent")
        launches = [r for r in ld.query("SELECT state, payload FROM steps WHERE ref=? AND "
                                        "kind='launch' ORDER BY seq", ref)]
        assert launches[-1]["state"] == "pending"
        assert "Feedback from @alice:\n\nPlease add tests." in json.loads(
            launches[-1]["payload"])["prompt"]
        until(lambda: agents_settled(ld), timeout=60, what="the sessions to settle")
        settle(ld, ref)
        for action in ("complete", "poll"):
            act(ld, ref, action, "")
        ld.ok("reply", ref, "/approve", "--actor", "alice")
        steps = crash_at_advance()  # review -> done, a terminal
        assert (steps["enter@done"]["state"], steps["enter@done"]["outcome"]) == (
            "done", "terminal")
        assert [r["state"] for r in ld.query("SELECT state FROM steps WHERE ref=? AND "
                                             "kind='complete'", ref)] == ["pending"]
        until(lambda: agents_settled(ld), timeout=60, what="the sessions to settle")
        settle(ld, ref)
        assert ld.item(ref)["state"] == "closed"
        assert broken(ld, {ref: "done"}) == []


def test_an_enter_step_queued_by_an_earlier_version_still_enters_its_node(
        tmp_path: Path, database: str) -> None:
    """Before issue 34 entering every node was a step of its own, queued pending: one left
    in the database by that version is run, and its agent node's session launched."""
    with LoopDir(tmp_path, database=database) as ld:
        hold(ld)
        ref = ld.add("Add a login page")
        ld.ok("start", ref, "--actor", "alice")
        on(ld, "UPDATE work SET state='running', node='write', epoch=1 WHERE ref=?", ref)
        on(ld, "UPDATE steps SET kind='enter', key=?, payload=? WHERE ref=? AND kind='start'",
                 f"enter:{ref}:1:1",
                 json.dumps({"node": "write", "actor": "alice", "note": "", "epoch": 1}), ref)
        settle(ld, ref)
        [enter] = ld.query("SELECT state, outcome FROM steps WHERE kind='enter'")
        assert (enter["state"], enter["outcome"]) == ("done", "agent")
        until(lambda: len(ld.launches()) == 1, timeout=30, what="the session's launch")
        assert "Write Add a login page" in ld.launches()[0]["prompt"]
