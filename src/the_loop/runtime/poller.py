"""A poll cycle: reap sessions, arm by label, start armed items, read input, notice closures.

Also the input path shared by the poller, `the-loop reply` and the control plane:
input_received fires before anything acts on a person's input.
"""

from __future__ import annotations

import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from the_loop.hooks.points import InputReceived
from the_loop.runtime import harness as harness_mod
from the_loop.runtime.service import ACTIVE, LOOP_AUTHOR, Loop, decided, render

CONTROLS = ("approve", "reject", "stop")
RESUME_PROMPT = (
    "Resuming {ref} ({title}) at node {node}.\n\nInput from @{actor}:\n\n{text}\n\n"
    "Continue the {phase} work; finish with `the-loop graph complete`."
)


@dataclass
class Report:
    started: list[str] = field(default_factory=list)
    inputs: int = 0
    closed: list[str] = field(default_factory=list)
    exited: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"started": self.started, "inputs": self.inputs, "closed": self.closed,
                "exited": self.exited}


def classify(text: str) -> str:
    """The control command a text carries ('' when it is not one)."""
    words = text.strip().split(maxsplit=1)
    if words and words[0].startswith("/") and words[0][1:].lower() in CONTROLS:
        return words[0][1:].lower()
    return ""


def feedback(text: str) -> str:
    """What a person wrote after a control command (`/reject add tests` → `add tests`)."""
    words = text.strip().split(maxsplit=1)
    if words and classify(words[0]):
        return words[1] if len(words) > 1 else ""
    return text.strip()


def handle_input(loop: Loop, ref: str, text: str, *, actor: str, source: str,
                 endpoint: str = "", key: str = "") -> str:
    """input_received, then deliver, read by the gate, or run. Returns what was done."""
    w = loop.work(ref)
    if w is None or w["state"] not in ACTIVE:
        return "ignored"
    node = loop.graph.node(w["node"]) if w["node"] else loop.graph.node(loop.graph.start)
    control = classify(text)
    if control:
        kind = "command"
    elif w["state"] == "waiting":
        kind = "answer"
    elif endpoint and endpoint != ref:
        kind = "review"
    else:
        kind = "comment"
    outcome = loop.fire(InputReceived(
        **loop.base(ref), kind=kind, actor=actor, source=source, control=control,
        node=node.name, phase=node.phase, text=text,
    ))
    if outcome.refused:
        hook = outcome.refused_by
        reason = str(decided(outcome, "reason")) or "no reason given"
        loop.post_once(ref, key or f"input:{ref}:{time.time_ns()}",
                       f"Input from @{actor} was dropped by hook `{hook}` at "
                       f"`input_received`: {reason}")
        loop.log.emit("input.refused", work_item=ref, hook=hook, reason=reason, actor=actor)
        return "refused"
    # `text` replaces what is delivered. The command stays the one the person wrote: a
    # hook may drop it (proceed: false) but never turn a comment into an approval or an
    # approval into a rejection -- a decision cannot pass a gate or choose an edge.
    final = str(decided(outcome, "text"))
    done = "delivered"
    gate_outcome = {"approve": "approved", "reject": "rejected"}.get(control, "")
    if control == "stop":
        loop.stop(ref, actor=actor)
        done = "stopped"
    elif gate_outcome and w["state"] == "gate" and loop.graph.next(node.name, gate_outcome):
        loop.advance(ref, gate_outcome, actor=actor, note=feedback(final))
        done = gate_outcome
    elif gate_outcome and w["state"] == "gate":
        loop.say(ref, f"`/{control}` from @{actor} ignored: gate {node.name} has no "
                      f"{gate_outcome!r} edge (its outcomes: "
                      f"{', '.join(loop.graph.outcomes(node.name))}).")
        done = "ignored"
    elif control:
        loop.say(ref, f"`/{control}` from @{actor} ignored: {ref} is not at a human gate "
                      f"({w['state']} at {node.name}).")
        done = "ignored"
    elif w["state"] in ("running", "waiting") and node.actor == "agent":
        item = loop.tracker.get(ref, comments=False)
        prompt = render(RESUME_PROMPT, ref=ref, title=item.title, node=node.name,
                        actor=actor, text=final, phase=node.phase)
        if w["session_id"]:
            loop.terminate(str(w["session_id"]))
        launched = loop.spawn(ref, node, prompt=prompt, respawn=True, actor=actor,
                              endpoint=endpoint)
        done = "resumed" if launched else "not resumed"
    else:
        done = "recorded"
    loop.log.emit("input.delivered", work_item=ref, kind=kind, actor=actor, done=done,
                  source=source)
    return done


def reply(loop: Loop, ref: str, text: str, *, actor: str, source: str = "reply") -> str:
    """A person's input given on the command line or the API: posted, then handled once."""
    ref = loop.tracker.resolve(ref)
    cid = loop.tracker.comment(ref, text, author=actor)
    _advance_cursor(loop, ref, cid)
    target, endpoint = input_target(loop, ref)
    return handle_input(loop, target, text, actor=actor, source=source, endpoint=endpoint,
                        key=f"input:{ref}:{cid}")


def input_target(loop: Loop, ref: str) -> tuple[str, str]:
    """(work item, endpoint) for input written on `ref`: a pull request that is not itself
    armed belongs to its ticket, with the pull request as the endpoint."""
    parent = loop.tracker.get(ref, comments=False).parent
    if parent and loop.work(ref) is None:
        return parent, ref
    return ref, ""


def _advance_cursor(loop: Loop, ref: str, cid: int) -> None:
    with loop.db.transaction() as conn:
        conn.execute("INSERT INTO cursors VALUES (?, ?) ON CONFLICT(ref) DO UPDATE SET "
                     "last=MAX(last, excluded.last)", (ref, cid))


def _cursor(loop: Loop, ref: str) -> int:
    row = loop.db.conn.execute("SELECT last FROM cursors WHERE ref=?", (ref,)).fetchone()
    return int(row["last"]) if row else 0


def poll_once(loop: Loop) -> Report:
    report = Report()
    report.exited = reap(loop)
    loop.finish_pending()
    if loop.settings.arm_label:
        for item in loop.tracker.items(state="open"):
            if loop.settings.arm_label in item.labels and loop.work(item.ref) is None:
                loop.arm(item.ref, actor="label", source="label")
    for row in loop.db.conn.execute(
            "SELECT ref FROM work WHERE state='armed' ORDER BY updated").fetchall():
        if loop.start(str(row["ref"])) != "refused":
            report.started.append(str(row["ref"]))
    active = [str(r["ref"]) for r in loop.db.conn.execute(
        "SELECT ref FROM work WHERE state IN ('running','waiting','gate') ORDER BY ref")]
    for ref in active:
        item = loop.tracker.get(ref, comments=False)
        if item.state == "closed":
            loop.complete(ref, source="tracker", actor=item.closed_by or "someone")
            report.closed.append(ref)
            continue
        endpoints = [ref] + [i.ref for i in loop.tracker.items(state="open")
                             if i.parent == ref]
        for endpoint in endpoints:
            for c in loop.tracker.comments_after(endpoint, _cursor(loop, endpoint)):
                _advance_cursor(loop, endpoint, c.id)
                if c.author == LOOP_AUTHOR:
                    continue
                w = loop.work(ref)
                if w is None or w["state"] not in ACTIVE:
                    break
                handle_input(loop, ref, c.body, actor=c.author, source="comment",
                             endpoint=endpoint, key=f"input:{endpoint}:{c.id}")
                report.inputs += 1
    respawn_dead(loop, report.exited)
    loop.log.emit("poll.cycle", started=report.started, inputs=report.inputs,
                  closed=report.closed)
    return report


def reap(loop: Loop) -> list[str]:
    """Record sessions whose process ended."""
    ended: list[str] = []
    for row in loop.db.conn.execute(
            "SELECT id, pid FROM sessions WHERE exited=0").fetchall():
        sid, pid = str(row["id"]), int(row["pid"])
        proc = loop.procs.get(sid)
        code: int | None
        if proc is not None:
            code = proc.poll()
            if code is None:
                continue
            del loop.procs[sid]
        elif harness_mod.alive(pid):
            continue
        else:
            code = None
        with loop.db.transaction() as conn:
            conn.execute("UPDATE sessions SET exited=1, code=? WHERE id=?", (code, sid))
        loop.log.emit("session.exited", session_id=sid, code=code)
        ended.append(sid)
    return ended


def respawn_dead(loop: Loop, ended: list[str]) -> None:
    """A session that died while its node was still running is respawned once."""
    for sid in ended:
        w = loop.db.conn.execute("SELECT * FROM work WHERE session_id=? AND state='running'",
                                 (sid,)).fetchone()
        if w is None:
            continue
        ref, node = str(w["ref"]), loop.graph.node(str(w["node"]))
        if int(w["respawns"]) >= 1:
            loop.set_work(ref, state="blocked", session_id="")
            loop.say(ref, f"Session `{sid}` ended twice without finishing {node.name}; "
                          f"re-arm with `the-loop start {ref}`.")
            continue
        loop.set_work(ref, respawns=int(w["respawns"]) + 1)
        item = loop.tracker.get(ref, comments=False)
        prompt = render(node.prompt or "Work on {ref} ({title}) at node {node}.", ref=ref,
                        title=item.title, body=item.body, phase=node.phase, node=node.name)
        loop.spawn(ref, node, prompt=prompt, respawn=True, actor=LOOP_AUTHOR)


def wait_sessions(loop: Loop, timeout: float = 60.0) -> None:
    """Block until this process's sessions have ended (demo and tests)."""
    deadline = time.monotonic() + timeout
    for proc in list(loop.procs.values()):
        remaining = max(0.1, deadline - time.monotonic())
        try:
            proc.wait(timeout=remaining)
        except Exception:
            break


def run_forever(loop: Loop, interval: float, stop: threading.Event | None = None) -> str:
    """The poller daemon's loop; returns why it stopped."""
    stop = stop or threading.Event()
    why = "stopped"

    def on_signal(signum: int, frame: object) -> None:
        nonlocal why
        why = signal.Signals(signum).name
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
    while not stop.is_set():
        try:
            poll_once(loop)
        except Exception as exc:  # one bad cycle is recorded; the daemon keeps polling
            loop.log.emit("poll.failed", error=f"{type(exc).__name__}: {exc}")
        stop.wait(interval)
    loop.log.emit("poll.stopped", why=why)
    return why
