"""One work item from arming to close through real processes, read back from the event log:
the seven points fire in lifecycle order, each before the thing it decides (issue 7; R1.2).

The harness is the scripted demo agent (it asks once, then completes each node with
`the-loop graph complete`); `start`, `poll --once` and `reply` run as subprocesses; the
reviewer is this test, answering the question and approving each gate.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from runtime_helpers import LoopDir
from the_loop.hooks.engine.points import POINTS
from the_loop.runtime.graph import PHASES

ANSWER = "Admins first, then everyone else."

#: point → the runtime's own events that record the thing it decides (each must follow
#: its own firing of the point, in the same process).
EFFECTS: dict[str, set[str]] = {
    "work_item_start": {"loop.started"},
    "session_spawn": {"session.launched"},
    "session_spawned": {"session.announced"},
    "waiting_for_input": {"question.posted", "gate.entered"},
    "input_received": {"input.delivered"},
    "phase_changed": {"phase.published"},
    "work_item_complete": {"item.announced"},
}


def pairs(events: list[dict[str, Any]], point: str, effects: set[str]) -> int:
    """Every effect is preceded, in its process, by a firing of `point` not yet used by an
    earlier effect; returns how many effects there were (and no firing is left over)."""
    pending: Counter[int] = Counter()
    seen = 0
    for r in events:
        if r["event"] == "lifecycle.point" and r["point"] == point:
            pending[r["pid"]] += 1
        elif r["event"] in effects:
            assert pending[r["pid"]] > 0, f"{r['event']} without {point} before it: {r}"
            pending[r["pid"]] -= 1
            seen += 1
    assert sum(pending.values()) == 0, f"{point} fired without its effect"
    return seen


def drive(ld: LoopDir, ref: str) -> list[str]:
    """The scripted reviewer: poll, answer the question, approve each gate, until done."""
    actions = []
    for _ in range(30):
        state = ld.work(ref)["state"]
        if state == "done":
            return actions
        if state == "waiting":
            actions.append(ld.reply(ref, ANSWER))
        elif state == "gate":
            actions.append(ld.reply(ref, "/approve"))
        else:
            ld.poll()
            actions.append(f"poll ({state})")
    raise AssertionError(f"not done after 30 steps: {actions}")


def test_r1_2_e2e_arming_to_close_seven_points_in_order_each_before_what_it_decides(
        tmp_path: Path, database: str) -> None:
    with LoopDir(tmp_path, harness="demo", graph="builtin", database=database) as ld:
        ld.write_config("hooks:\n" + ld.add_recorder(), harness="demo", graph="builtin")
        ref = ld.add("Add a login page", "--body", "Users sign in with email.")
        assert "armed" in ld.cli("start", ref, "--actor", "operator").stdout
        actions = drive(ld, ref)
        events = ld.events()

    # The walk: one poll starts it, one answer, one approval per phase; after each
    # `graph complete` a poll enters the gate (the daemon does it).
    assert actions == ["poll (armed)", f"{ref}: resumed", "poll (running)"] + [
        f"{ref}: approved", "poll (running)"] * 3 + [f"{ref}: approved"]
    item = ld.item(ref)
    assert (item["state"], item["labels"]) == ("closed", ["loop:done"])
    assert [(m["type"], m.get("to_phase")) for m in ld.channel_messages()] == [
        ("phase.changed", "design"), ("phase.changed", "testing-plan"),
        ("phase.changed", "tasks"), ("phase.completed", "done"), ("item.closed", None)]

    # Lifecycle order: the first firing of each point comes in catalog order.
    fired = [r["point"] for r in events if r["event"] == "lifecycle.point"]
    assert list(dict.fromkeys(fired)) == list(POINTS)
    assert Counter(fired) == {
        "work_item_start": 1, "session_spawn": 5, "session_spawned": 5,
        "waiting_for_input": 5, "input_received": 5, "phase_changed": 4,
        "work_item_complete": 1}
    assert all(r["hooks"] == ["recorder"] for r in events if r["event"] == "lifecycle.point")

    # Each point before the thing it decides, firing by firing, in the process that acts.
    for point, effects in EFFECTS.items():
        assert pairs(events, point, effects) == Counter(fired)[point], point
    names = [r["event"] for r in events]
    start = names.index("lifecycle.point")
    assert events[start]["point"] == "work_item_start"
    assert start < names.index("workspace.prepared") < names.index("session.launched")
    for launched in (r for r in events if r["event"] == "session.launched"):
        i = events.index(launched)
        spawned = next(r for r in events[i:] if r["event"] == "lifecycle.point"
                       and r["point"] == "session_spawned" and r["pid"] == launched["pid"])
        announced = next(r for r in events[i:] if r["event"] == "session.announced"
                         and r["pid"] == launched["pid"])
        assert announced["session_id"] == launched["session_id"]
        assert events.index(spawned) < events.index(announced)

    # The comments a point decides are posted after it fired (tracker time vs log time):
    # the session announcements, the agent's question, the gates' request text.
    def posted_after(point: str, firings: list[dict[str, Any]], marker: str) -> None:
        comments = [c for c in item["comments"] if c["author"] == "the-loop"
                    and marker in c["body"]]
        assert len(firings) == len(comments) > 0, point
        for fired_at, comment in zip(firings, comments, strict=True):
            assert fired_at["ts"] <= comment["created"], (point, comment["body"])

    def firings(point: str) -> list[dict[str, Any]]:
        return [r for r in events if r["event"] == "lifecycle.point" and r["point"] == point]

    posted_after("session_spawned", firings("session_spawned"), "started at")
    waits = firings("waiting_for_input")
    posted_after("waiting_for_input", [w for w in waits if w["decisions"]["question"]],
                 "**Question from the agent**")
    posted_after("waiting_for_input", [w for w in waits if not w["decisions"]["question"]],
                 "ready for review")
    gates = [r for r in ld.seen("waiting_for_input") if r["kind"] == "gate"]
    assert [g["node"] for g in gates] == [f"{p}-review" for p in PHASES]

    # What the hooks saw matches what happened.
    assert {r["point"]: r["work_item"] for r in ld.seen()}["work_item_complete"] == {
        "ref": ref, "tracker": "local", "host": "", "owner": "acme", "repo": "app",
        "repository": "acme/app", "number": 1, "kind": "issue", "url": "local://acme/app/1",
        "id": "1", "author": "", "base": "", "head": "", "head_repository": "", "fork": False,
        "draft": False}
    assert all(r["loop"] == "acme" for r in ld.seen())
    [question] = [r for r in ld.seen("waiting_for_input") if r["kind"] == "question"]
    assert (question["node"], question["question"]) == (
        "requirements", "Which users should the first version serve?")
    answers = [(r["kind"], r["actor"], r["text"]) for r in ld.seen("input_received")]
    assert answers == [("answer", "alice", ANSWER)] + [("command", "alice", "/approve")] * 4
    assert [(r["from_phase"], r["to_phase"], r["terminal"]) for r in ld.seen("phase_changed")] \
        == [("requirements", "design", False), ("design", "testing-plan", False),
            ("testing-plan", "tasks", False), ("tasks", "done", True)]
    [complete] = ld.seen("work_item_complete")
    assert (complete["source"], complete["node"], complete["state"]) == (
        "graph", "done", "closed")
    respawns = [(r["node"], r["respawn"]) for r in ld.seen("session_spawn")]
    assert respawns == [("requirements", False), ("requirements", True), ("design", False),
                        ("testing-plan", False), ("tasks", False)]
    workspace = ld.state / "workspaces" / "acme-app-1"
    assert sorted(p.name for p in workspace.iterdir()) == sorted(f"{p}.md" for p in PHASES)
