"""An agent's `graph complete`, question or input counts even when the loop that launched it
died before it recorded the session: the session is launched once (issue 20.5), the node
moves on once, its work is not done again, and a session of an earlier launch is still
refused.

Real parts: a SQLite file, `poll --once` processes killed at a failpoint (`os._exit(86)`),
and a harness that runs `the-loop graph complete` from inside its session at once, before
anyone polls again.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest

from runtime_helpers import LoopDir, alive, until
from the_loop.runtime.identity import agent_login
from the_loop.runtime.service import session_id_for

#: Records its launch, runs `graph complete` (or, as argv[2] says, `ask` or `reply`) from
#: inside the session at once and records what that said. On a launch whose prompt carries a
#: person's feedback it holds the session instead (so the item sits at an agent node with a
#: live current session).
PROMPT_AGENT = '''\
import json, os, subprocess, sys, time
prompt = sys.stdin.read()
record = {"session": os.environ["THE_LOOP_SESSION"], "node": os.environ["THE_LOOP_NODE"],
          "work_item": os.environ["THE_LOOP_WORK_ITEM"], "prompt": prompt}
if "Feedback from @" in prompt:
    record["held"] = True
    with open(sys.argv[1], "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\\n")
    time.sleep(120)
    sys.exit(0)
args = {"complete": ["graph", "complete", "--summary", "Wrote the page."],
        "ask": ["ask", "Which users first?"],
        "reply": ["reply", os.environ["THE_LOOP_WORK_ITEM"], "I renamed the button."]}
done = subprocess.run([sys.executable, "-m", "the_loop", *args[sys.argv[2]]],
                      capture_output=True, text=True)
record.update(code=done.returncode, said=(done.stdout + done.stderr).strip())
with open(sys.argv[1], "a", encoding="utf-8") as f:
    f.write(json.dumps(record) + "\\n")
'''

#: Every failpoint between the harness process starting and the loop recording its session:
#: `launch` (the process runs, its pid is not in the lock file yet) and `spawn` (the harness
#: is launched, the session row is not written).
WINDOW = ["launch", "spawn"]


def prompt_agent(ld: LoopDir, action: str = "complete") -> None:
    """Configure `ld` with the prompt agent as its harness (this interpreter runs it)."""
    script = ld.write("prompt_agent.py", PROMPT_AGENT)
    command = (f"[{json.dumps(sys.executable)}, -S, {json.dumps(str(script))}, "
               f"{json.dumps(str(ld.recorded))}, {action}]")
    text = ld.config.read_text(encoding="utf-8")
    old = f"[python3, {json.dumps(str(ld.script))}, {json.dumps(str(ld.recorded))}]"
    assert old in text
    ld.config.write_text(text.replace(old, command), encoding="utf-8")


def crash_while_launching(ld: LoopDir, ref: str, failpoint: str) -> dict[str, object]:
    """Start `ref`, run a poll that dies at `failpoint` after the harness started, and wait
    until the agent has run `graph complete` and its session has ended; the agent's record."""
    ld.start(ref)
    crashed = ld.cli("poll", "--once", ok=False, env={"THE_LOOP_FAILPOINT": failpoint})
    assert crashed.returncode == 86, (crashed.returncode, crashed.stderr)
    [record] = until(ld.launches, timeout=60, what="the agent's record")
    lock = ld.state / "sessions" / f"{record['session']}.lock"
    until(lambda: not (lock.read_text().strip().isdigit()
                       and alive(int(lock.read_text().strip()))),
          timeout=30, what="the agent's session to end")
    return record


def polls_until_settled(ld: LoopDir, ref: str) -> int:
    """`poll --once` until `ref` has no pending step (at most 4); how many it took."""
    for n in range(1, 5):
        ld.poll()
        if not ld.query("SELECT key FROM steps WHERE ref=? AND state='pending'", ref):
            return n
    pending = ld.query("SELECT key FROM steps WHERE state='pending'")
    raise AssertionError(f"steps still pending after 4 polls: {pending}")


@pytest.mark.parametrize("failpoint", WINDOW)
def test_a_completion_sent_before_the_crashed_loop_recorded_its_session_moves_the_node_once(
        tmp_path: Path, failpoint: str) -> None:
    with LoopDir(tmp_path) as ld:
        ld.write_config("hooks:\n" + ld.add_recorder())
        prompt_agent(ld)
        ref = ld.add("Add a login page")
        record = crash_while_launching(ld, ref, failpoint)

        # The agent was told its completion was taken, not "not the current session".
        assert record["code"] == 0, record["said"]
        assert record["said"] == f"write done; the loop moves {ref} on"
        [launch] = ld.query("SELECT key, payload FROM steps WHERE kind='launch'")
        salt = json.loads(launch["payload"])["salt"]
        assert record["session"] == session_id_for(launch["key"], salt)

        polls_until_settled(ld, ref)

        # The completion counted: the item is at the gate after `write`, with one request.
        work = ld.work(ref)
        assert (work["state"], work["node"]) == ("gate", "review")
        [done] = ld.query("SELECT outcome FROM steps WHERE kind='done'")
        assert done["outcome"] == "done"
        assert "**write complete.** Wrote the page." in ld.comments(ref)
        assert sum("review the draft" in c for c in ld.comments(ref)) == 1
        # The node's work was done once: one harness run, one session (seen ended by the
        # next cycle), no respawn.
        ld.poll()
        assert [r["node"] for r in ld.launches()] == ["write"]
        sessions = ld.query("SELECT id, step, exited, pid FROM sessions")
        assert [(s["id"], s["step"], s["exited"]) for s in sessions] == [
            (record["session"], launch["key"], 1)]
        # Its pid is known unless the loop died before writing it (docs/runtime.md).
        assert (sessions[0]["pid"] == 0) == (failpoint == "launch")
        assert "session.respawned" not in ld.names()
        assert len(ld.seen("session_spawn")) == 1
        assert [p["session_id"] for p in ld.seen("session_spawned")] == [record["session"]]


@pytest.mark.parametrize("action", ["ask", "reply"])
def test_a_session_that_asked_or_wrote_before_the_crashed_loop_recorded_it_is_launched_once(
        tmp_path: Path, action: str) -> None:
    """`THE_LOOP_FAILPOINT=launch poll --once`, the agent asks (or replies) and ends, then
    `poll --once` twice: its question is posted once, its input taken once, and its session
    id launched once (registered with pid 0: it ran, its pid was never written)."""
    with LoopDir(tmp_path) as ld:
        prompt_agent(ld, action)
        ref = ld.add("Add a login page")
        record = crash_while_launching(ld, ref, "launch")
        assert record["code"] == 0, record["said"]
        sid = str(record["session"])
        ld.poll()
        ld.poll()

        launched = Counter(str(r["session"]) for r in ld.launches())
        assert launched[sid] == 1 and max(launched.values()) == 1, launched
        [row] = ld.query("SELECT pid, step FROM sessions WHERE id=?", sid)
        [launch] = ld.query("SELECT payload FROM steps WHERE key=?", row["step"])
        salt = json.loads(launch["payload"])["salt"]
        assert row["pid"] == 0 and session_id_for(row["step"], salt) == sid
        if action == "ask":
            [question] = [c for c in ld.comments(ref) if "Question from the agent" in c]
            assert sid not in question and "Which users first?" in question
            assert ld.work(ref)["state"] == "waiting"
        else:
            mine = [c for c in ld.item(ref)["comments"] if c["author"] == agent_login(sid)]
            assert [c["body"] for c in mine] == ["I renamed the button."]
            [taken] = [s for s in ld.query("SELECT payload, outcome FROM steps WHERE "
                                           "kind='input'")
                       if json.loads(s["payload"])["actor"] == agent_login(sid)]
            assert taken["outcome"] == "recorded"


def test_a_session_of_an_earlier_launch_still_cannot_complete_the_node(tmp_path: Path) -> None:
    """After the crash-and-redo, /reject sends the item back to `write` with a new session;
    the first session (whose completion counted once) is refused, the new one is not."""
    with LoopDir(tmp_path) as ld:
        prompt_agent(ld)
        ref = ld.add("Add a login page")
        first = crash_while_launching(ld, ref, "spawn")["session"]
        polls_until_settled(ld, ref)
        assert ld.work(ref)["node"] == "review"

        ld.cli("reply", ref, "/reject add a logout link", "--actor", "alice")
        ld.cli("poll", "--once")
        held = until(lambda: [r for r in ld.launches() if r.get("held")], timeout=60,
                     what="the second session")[0]
        assert held["session"] != first
        assert ld.work(ref)["session_id"] == held["session"]

        stale = ld.cli("graph", "complete", "--work-item", ref, ok=False,
                       env={"THE_LOOP_SESSION": str(first)})
        assert stale.returncode == 1
        assert stale.stderr.strip() == (
            f"the-loop: session {first} is not {ref}'s current session; an agent acts only "
            "on its own work item")
        assert ld.query("SELECT key FROM steps WHERE kind='done' AND state='pending'") == []

        own = ld.cli("graph", "complete", "--work-item", ref,
                     env={"THE_LOOP_SESSION": str(held["session"])})
        assert own.stdout.strip() == f"write done; the loop moves {ref} on"
