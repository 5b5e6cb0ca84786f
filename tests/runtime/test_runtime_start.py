"""Arming and starting a work item through real processes: work_item_start and the first
launch (issue 6: items 3, 4, 6, 7, 8; R2.6, R2.7, R3.6, R7.2)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from runtime_helpers import LoopDir
from serving_helpers import free_port

PREFIX_HOOK = '''
from the_loop.sdk.hooks import LifecycleHooks, SessionSpawn


class Prefix(LifecycleHooks):
    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def session_spawn(self, ctx: SessionSpawn) -> SessionSpawn:
        ctx.prompt = self.prefix + ctx.prompt
        return ctx
'''

REFUSE_START_HOOK = '''
from the_loop.sdk.hooks import LifecycleHooks, WorkItemStart


class Gatekeeper(LifecycleHooks):
    def work_item_start(self, ctx: WorkItemStart) -> WorkItemStart:
        ctx.proceed = False
        ctx.reason = "no starts on Fridays"
        return ctx
'''

#: Overrides every point and returns None from each: the R7.2 "does nothing" hook.
NONE_HOOK = '''
from the_loop.sdk.hooks import LifecycleHooks


class Nothing(LifecycleHooks):
    def work_item_start(self, ctx):
        return None

    def session_spawn(self, ctx):
        return None

    def session_spawned(self, ctx):
        return None

    def waiting_for_input(self, ctx):
        return None

    def input_received(self, ctx):
        return None

    def phase_changed(self, ctx):
        return None

    def work_item_complete(self, ctx):
        return None
'''


def index(records: list[dict[str, Any]], event: str, **match: Any) -> int:
    """Position of the first event named `event` whose fields include `match`."""
    for i, r in enumerate(records):
        if r["event"] == event and all(r.get(k) == v for k, v in match.items()):
            return i
    raise AssertionError(f"no {event} {match} in {[r['event'] for r in records]}")


def test_start_launches_session_with_prompt_rewritten_by_local_hook(ld: LoopDir) -> None:
    """items add → start → poll --once: the harness gets the hook's prompt on stdin, the
    loop's environment, a workspace cwd, and its output lands in the session log."""
    ld.write("hooks/prefix.py", PREFIX_HOOK)
    ld.write_config("""
        hooks:
          - name: prefix
            path: hooks/prefix.py
            with: {prefix: "ACME RULES. "}
    """)
    ref = ld.add("Add a login page")
    assert "armed" in ld.cli("start", "#1", "--actor", "alice").stdout
    assert ld.poll().stdout.startswith("started 1,")

    [launch] = ld.launches()
    assert launch["prompt"] == "ACME RULES. Write Add a login page (local:acme/app#1)."
    [session] = ld.query("SELECT * FROM sessions")
    assert launch["env"]["THE_LOOP_CLI_CONFIG"] == str(ld.config)
    assert launch["env"]["THE_LOOP_WORK_ITEM"] == ref
    assert launch["env"]["THE_LOOP_SESSION"] == session["id"]
    assert launch["cwd"] == str(ld.state / "workspaces" / "acme-app-1")
    assert (session["ref"], session["endpoint"], session["harness"]) == (ref, ref, "record")
    assert Path(session["log"]).read_text() == f"recorder: got {len(launch['prompt'])} " \
                                               f"characters for {ref}\n"

    events = ld.events()
    start = index(events, "lifecycle.point", point="work_item_start")
    assert events[start]["decisions"] == {"proceed": True, "reason": ""}
    spawn = index(events, "lifecycle.point", point="session_spawn")
    assert start < index(events, "workspace.prepared") < spawn
    assert spawn < index(events, "session.launched") < \
        index(events, "lifecycle.point", point="session_spawned") < \
        index(events, "session.announced")
    assert events[spawn]["decisions"]["prompt"] == launch["prompt"]
    decided = ld.events("hooks.decided")
    assert [(d["point"], d["hook"], d["changed"]) for d in decided] == [
        ("session_spawn", "prefix", ["prompt"])]
    assert ld.comments(ref) == [
        "A session started at write (harness record, model m-1)."]
    # The whole id, which an agent login's input must name, is in no comment, hidden
    # idempotency markers included.
    assert not [c for c in ld.comments(ref, raw=True) if session["id"] in c]
    assert ld.work(ref)["state"] == "running"
    assert ld.item(ref)["labels"] == ["loop:writing"]


def test_r2_6_start_refused_by_required_remote_hook_that_is_down(ld: LoopDir) -> None:
    """A required url entry nobody answers refuses the start: disarmed, one comment naming
    the hook, hooks.refused, no workspace; a second poll neither retries nor comments."""
    ld.write_config(f"""
        hooks:
          - name: compliance
            url: http://127.0.0.1:{free_port()}/hooks
            required: true
            timeoutSeconds: 2
    """)
    ref = ld.add()
    ld.start(ref)
    assert ld.poll().stdout.startswith("started 0,")

    [point] = ld.points("work_item_start")
    assert point["decisions"]["proceed"] is False
    assert point["steps"][0]["status"] == "failed"
    [refused] = ld.events("hooks.refused")
    assert (refused["point"], refused["hook"]) == ("work_item_start", "compliance")
    assert "required hook 'compliance' failed" in refused["reason"]
    [comment] = ld.comments(ref)
    assert "refused by hook `compliance` at `work_item_start`" in comment
    assert "required hook 'compliance' failed" in comment
    assert ld.work(ref)["state"] == "refused"
    assert not (ld.state / "workspaces").exists()
    assert ld.launches() == [] and ld.query("SELECT * FROM sessions") == []
    assert ld.query("SELECT state, outcome FROM steps WHERE kind='start'") == [
        {"state": "done", "outcome": "refused"}]

    ld.poll()
    assert len(ld.points("work_item_start")) == 1
    assert len(ld.comments(ref)) == 1
    assert len(ld.events("hooks.refused")) == 1


def test_r2_6_refusal_survives_a_crash_between_comment_and_settle(ld: LoopDir) -> None:
    """Killed right after the refusal comment (exit 86): the next poll finishes the settle
    without posting again and without firing work_item_start again."""
    ld.write("hooks/gate.py", REFUSE_START_HOOK)
    ld.write_config("""
        hooks:
          - name: gatekeeper
            path: hooks/gate.py
    """)
    ref = ld.add()
    ld.start(ref)
    crashed = ld.cli("poll", "--once", ok=False,
                     env={"THE_LOOP_FAILPOINT": "after-refusal-comment"})
    assert crashed.returncode == 86
    [comment] = ld.comments(ref)
    assert "refused by hook `gatekeeper` at `work_item_start`: no starts on Fridays" in comment
    assert ld.query("SELECT state FROM steps WHERE kind='start'") == [{"state": "pending"}]

    ld.poll()
    assert ld.comments(ref) == [comment]
    assert len(ld.points("work_item_start")) == 1
    assert ld.query("SELECT state, outcome FROM steps WHERE kind='start'") == [
        {"state": "done", "outcome": "refused"}]
    assert ld.work(ref)["state"] == "refused"
    assert ld.launches() == []

    ld.poll()
    assert ld.comments(ref) == [comment]
    assert len(ld.points("work_item_start")) == 1


def test_r3_6_poller_refuses_to_start_on_a_broken_declaration(ld: LoopDir) -> None:
    """poll exits 1 naming the entry, records hooks.load_failed, and starts nothing (more
    broken declarations, for poll and serve, in test_runtime_daemons.py)."""
    (ld.root / "policies").mkdir()
    ld.write_config("hooks:\n  - {name: typo, policy: policies, on: [work_item_started]}\n")
    named = "hooks[0] ('typo')"
    ref = ld.add()
    ld.start(ref)
    done = ld.cli("poll", "--once", ok=False)
    assert done.returncode == 1
    assert "refusing to start" in done.stderr and named in done.stderr
    [failed] = [r for r in ld.events() if r["event"].startswith("hooks.")]
    assert (failed["event"], failed["source"]) == ("hooks.load_failed", "poll")
    assert named in failed["error"]
    assert ld.points() == []
    assert ld.work(ref)["state"] == "armed"


def test_arm_label_arms_a_labelled_ticket_once(ld: LoopDir) -> None:
    """armLabel: a ticket carrying the label is armed and started by the poller."""
    ld.write_config("armLabel: loop\n")
    labelled = ld.add("With label", "--label", "loop")
    plain = ld.add("Without label")
    ld.poll()
    [armed] = ld.events("loop.armed")
    assert (armed["work_item"], armed["source"]) == (labelled, "label")
    [start] = ld.points("work_item_start")
    assert start["work_item"] == labelled
    assert ld.work(labelled)["state"] == "running" and ld.work(plain) == {}
    assert len(ld.launches()) == 1

    ld.ok("items", "label", plain, "loop")
    ld.poll()
    assert [r["work_item"] for r in ld.events("loop.armed")] == [labelled, plain]
    assert len(ld.points("work_item_start")) == 2


def test_r2_1_start_facts_say_how_and_by_whom_an_item_was_armed_as_documented(
        ld: LoopDir) -> None:
    """Issue 30 item 8: `source` takes exactly the values its description names (there is
    no `api` arming), and a label-armed item's `actor` is empty, not the login-shaped
    word "label" (the tracker does not say who added the label)."""
    from the_loop.hooks.engine.points import SPECS

    ld.write_config("armLabel: loop\nhooks:\n" + ld.add_recorder())
    labelled = ld.add("With label", "--label", "loop")
    started = ld.add("Started")
    ld.start(started, actor="alice")
    ld.poll()
    seen = {s["work_item"]["ref"]: (s["source"], s["actor"])
            for s in ld.seen("work_item_start")}
    assert seen == {labelled: ("label", ""), started: ("command", "alice")}
    [source] = [f for f in SPECS["work_item_start"].facts if f.name == "source"]
    assert source.doc == "how it was armed: command or label"
    [actor] = [f for f in SPECS["work_item_start"].facts if f.name == "actor"]
    assert "empty when the armLabel armed it" in actor.doc
    assert [r["actor"] for r in ld.events("loop.armed") if r["work_item"] == labelled] == [""]


def test_start_twice_is_one_arming(ld: LoopDir) -> None:
    """A second `start` of an armed item says so and arms nothing new."""
    ref = ld.add()
    ld.start(ref)
    assert "already armed (armed)" in ld.run("start", ref)[1]
    assert len(ld.events("loop.armed")) == 1


# --------------------------------------------------------------------------- R7.2

SID = re.compile(r"s-[0-9a-f]{12}")


def scenario(ld: LoopDir) -> dict[str, Any]:
    """Every point once: start, spawn, ask, answer (resume), complete, gate, approve, close;
    returns what a person or a channel would see, with session ids normalised."""
    ref = ld.add("Add a login page")
    ld.start(ref)
    ld.poll()
    ld.cli("ask", "Which users?", "--summary", "one question", "--work-item", ref)
    ld.reply(ref, "Admins first.")
    ld.complete(ref, "--summary", "drafted")
    ld.reply(ref, "/approve")
    item = ld.item(ref)
    runtime = []
    for r in ld.events():
        if r["event"].startswith("hooks."):
            continue
        if r["event"] == "lifecycle.point":
            runtime.append((r["event"], r["point"], SID.sub("s-X", str(r["decisions"]))))
        else:
            runtime.append((r["event"],))
    return {
        "comments": [(c["author"], SID.sub("s-X", c["body"])) for c in item["comments"]],
        "labels": item["labels"], "state": item["state"], "loop": ld.work(ref)["state"],
        "events": runtime,
        "channel": ld.channel_messages(),
        "prompts": [launch["prompt"] for launch in ld.launches()],
    }


def test_r7_2_no_hooks_and_a_none_hook_give_identical_tracker_and_events(
        tmp_path: Path) -> None:
    """The same scenario with no hooks and with a hook answering None at every point."""
    with LoopDir(tmp_path / "plain") as plain:
        without = scenario(plain)
    with LoopDir(tmp_path / "hooked") as hooked:
        hooked.write("hooks/nothing.py", NONE_HOOK)
        hooked.write_config("hooks:\n  - {name: nothing, path: hooks/nothing.py}\n")
        with_hook = scenario(hooked)
        steps = [r["steps"] for r in hooked.points()]
        assert steps and all(s == [{"hook": "nothing", "status": "unchanged", "error": "",
                                    "changed": {}}] for s in steps)

    assert without["state"] == "closed" and without["loop"] == "done"
    points = [e[1] for e in without["events"] if e[0] == "lifecycle.point"]
    assert sorted(set(points)) == sorted({
        "work_item_start", "session_spawn", "session_spawned", "waiting_for_input",
        "input_received", "phase_changed", "work_item_complete"})
    assert with_hook == without
