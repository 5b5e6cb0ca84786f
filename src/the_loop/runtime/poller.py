"""A poll cycle: notice sessions that ended, arm by label, take in new input and closures as
durable steps, then run each work item's steps under its claim.

Also the delivery path shared by the poller, the demo and the control plane: a person's
input is written on the work item first; a process holding a loaded chain delivers it.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from the_loop.errors import InputTooLong
from the_loop.interrupt import is_real as is_real_interrupt
from the_loop.runtime import cycle
from the_loop.runtime import harness as harness_mod
from the_loop.runtime.cycle import Snapshot
from the_loop.runtime.db import Fenced
from the_loop.runtime.input_bound import input_refusal
from the_loop.runtime.launching import LaunchDeferred, current_session, has_room
from the_loop.runtime.service import (
    ACTIVE,
    LOOP_AUTHOR,
    Loop,
    failpoint,
    pausepoint,
)
from the_loop.runtime.stepactions import StepAction, UnknownStepAction, salted
from the_loop.runtime.steps import RUN, classify, feedback, ingest
from the_loop.runtime.store import Step
from the_loop.sqldb import WritesLost, transient
from the_loop.wakeup import Wakeup

__all__ = ["Away", "Report", "classify", "deliver", "feedback", "poll_once", "reply", "run_forever"]

#: A step that raised this many times is given up: its item is blocked with a comment.
MAX_ATTEMPTS = 3


class Report:
    """What one cycle (or one delivery) did. A plain class: a dataclass costs every poller
    its generated methods at start-up."""

    __slots__ = ("busy", "closed", "exited", "inputs", "launched", "live", "refused",
                 "started", "waiting")

    def __init__(self) -> None:
        self.started: list[str] = []
        self.inputs = 0
        self.refused = 0
        self.launched = 0
        self.closed: list[str] = []
        self.exited: list[str] = []
        self.busy = 0
        self.waiting = 0  # items whose launch waits for room (maxSessions)
        #: This host's sessions running as the cycle's snapshot found them (after its
        #: reap), with the ones its visits launched since and without the ones they
        #: replaced: what a launch step is checked against before it runs (`room_for`).
        #: None outside a cycle.
        self.live: set[str] | None = None

    def to_json(self) -> dict[str, Any]:
        return {"started": self.started, "inputs": self.inputs, "refused": self.refused,
                "launched": self.launched, "closed": self.closed, "exited": self.exited,
                "busy": self.busy, "waiting": self.waiting}

    def launched_for(self, loop: Loop, ref: str, step: Step, before: str) -> None:
        """A launch step of `ref` ran: the session it started replaces `before` in `live`;
        when it found no room after all (still pending), the snapshot is behind and the
        database is asked from now on."""
        if self.live is not None and step.state == "pending":
            self.live = None
        elif self.live is not None and step.outcome == "launched":
            self.live.discard(before)
            self.live.add(current_session(loop, ref))

    def count(self, step: Step) -> None:
        if step.action is StepAction.START and step.outcome == "started":
            self.started.append(step.ref)
        if step.action is StepAction.INPUT and step.state == "done":
            self.inputs += 1
        if step.action is StepAction.LAUNCH and step.outcome == "launched":
            self.launched += 1
        if step.action is StepAction.COMPLETE and step.outcome == "completed":
            self.closed.append(step.ref)
        if step.outcome == "refused":
            self.refused += 1


def input_target(loop: Loop, ref: str) -> tuple[str, str]:
    """(work item, endpoint) for input written on `ref`: a pull request that is not itself
    armed belongs to its ticket, with the pull request as the endpoint."""
    parent = loop.tracker.get(ref, comments=False).parent
    if parent and loop.work(ref) is None:
        return parent, ref
    return ref, ""


def run_steps(loop: Loop, ref: str, report: Report | None = None) -> int:
    """Run `ref`'s pending steps in order (the caller holds its claim). A step that raises
    is retried by a later run; the third failure blocks the item with a comment."""
    n = 0
    while n < 10_000:
        try:
            step = loop.store.next_step(ref)
        except UnknownStepAction as exc:  # left for a version of the loop that knows it
            loop.log.emit("step.failed", work_item=ref, step=exc.key, error=str(exc),
                          attempts=0)
            return n
        if step is None:
            break
        if step.action is StepAction.LAUNCH and not room_for(loop, ref, report):
            if report is not None:
                report.waiting += 1
            return n  # a host with room takes it (or this one, once a session ends)
        n += 1
        try:
            before = current_session(loop, ref) if step.action is StepAction.LAUNCH else ""
            RUN[step.action](loop, step)
            if step.action is StepAction.LAUNCH and report is not None:
                report.launched_for(loop, ref, step, before)
        except LaunchDeferred as exc:  # its host's launch lock is kept by another: later
            loop.log.emit("launch.deferred", work_item=ref, step=step.key, error=str(exc))
            if report is not None:
                report.waiting += 1
            return n
        except BaseException as exc:  # a step's failure is the step's
            if is_real_interrupt(exc) or isinstance(exc, Fenced) or transient(exc):
                raise  # a real Ctrl-C of a one-shot `poll --once` (the_loop/interrupt.py),
                # or another owner has the item now: this process writes nothing more for
                # it, or the database is away: not the step's failure (the cycle retries)
            if isinstance(exc, WritesLost):  # the log refused the step's record: redone
                _step_redone(loop, step, exc)  # next cycle, not the step's own failure
            else:
                _step_failed(loop, step, exc)
            return n
        if report is not None:
            report.count(step)
    return n


def room_for(loop: Loop, ref: str, report: Report | None,
             w: dict[str, Any] | None = None) -> bool:
    """Whether `ref`'s launch step may run now (and ask session_spawn's hooks): this host
    runs fewer than maxSessions sessions besides the item's own. Asked of the cycle's
    snapshot (`Report.live`) in a cycle, of the database (`has_room`) otherwise. The launch
    asks the database again under the host's launch lock (launching._start), so a snapshot
    that is behind costs an item a cycle's wait, or a point asked before its launch waits
    (asked once: its decisions are kept), never a session over maxSessions. `w`: the
    item's work row as the cycle's snapshot read it (before its visit; read here when not
    given)."""
    live = report.live if report is not None else None
    if live is None:
        return has_room(loop, ref)
    return len(live - {current_session(loop, ref, w)}) < loop.settings.max_sessions


def _step_redone(loop: Loop, step: Step, exc: WritesLost) -> None:
    """A decision-log row the database refused rolled the visit's writes back with it: the
    step is redone next cycle, its attempts not counted (a log that refuses a row now and
    then must not block items; the redo commits before its rows until one lands)."""
    if transient(exc.error):
        raise exc.error
    loop.log.emit("step.failed", work_item=step.ref, step=step.key, attempts=_attempts(step),
                  error=f"the decision log refused this step's record ({exc}); the step is "
                        "redone next cycle")


def _attempts(step: Step) -> int:
    """How many times the step has failed so far (kept in its detail while it is pending)."""
    return int(step.detail) if step.detail.isdigit() else 0


def _step_failed(loop: Loop, step: Step, exc: BaseException) -> None:
    attempts = _attempts(step) + 1
    error = f"{type(exc).__name__}: {exc}"
    loop.log.emit("step.failed", work_item=step.ref, step=step.key, error=error,
                  attempts=attempts)
    if attempts < MAX_ATTEMPTS:
        with loop.db.transaction() as conn:
            conn.execute("UPDATE steps SET detail=? WHERE key=?", (str(attempts), step.key))
        loop.store.forget_steps(step.ref)  # its attempts are read with it next time
        return
    loop.store.finish(step, "failed", error)
    loop.set_work(step.ref, state="blocked")
    loop.say(step.ref, f"The loop could not {step.action.spec.doing} this work item ({error}); "
                       f"fix the cause, then re-arm with `the-loop start {step.ref}`.")


def check_session(loop: Loop, ref: str, report: Report) -> None:
    """A running item owes a live session: one that ended without finishing its node is
    respawned once (through session_spawn), then the item is blocked."""
    w = loop.work(ref)
    if w is None or w["state"] != "running" or loop.store.has_pending(ref):
        return
    sid = str(w["session_id"])
    row = loop.store.session(sid) if sid else None
    if row is not None and not row["exited"]:
        return  # running, as far as this cycle's reap saw: an end is seen by the next one
    node = loop.graph.node(str(w["node"]))
    why = f"session {sid} ended" if sid else "no session is running"
    if int(w["respawns"]) >= 1:
        loop.set_work(ref, state="blocked", session_id="")
        loop.say(ref, f"The session ended twice without finishing {node.name}; re-arm "
                      f"with `the-loop start {ref}`.")
        return
    prompt = loop.node_prompt(ref, node)
    with loop.db.transaction() as conn:
        loop.store.set_work(ref, conn, respawns=int(w["respawns"]) + 1)
        key = StepAction.LAUNCH.key(ref, w["arm_seq"], w["epoch"], sid, name="respawn")
        loop.store.add_step(conn, key, ref, StepAction.LAUNCH, salted({
            "node": node.name, "prompt": prompt, "respawn": True, "actor": LOOP_AUTHOR,
            "endpoint": ""}))
    loop.log.emit("session.respawned", work_item=ref, session_id=sid, why=why)
    run_steps(loop, ref, report)


def reap(loop: Loop, snap: Snapshot | None = None) -> list[str]:
    """Record sessions whose process ended (asked of the session's lock, not its pid).
    `snap`: this cycle's snapshot (read here when not given), told what ended."""
    snap = snap if snap is not None else cycle.read(loop.store, LOOP_AUTHOR)
    ended: list[str] = []
    codes: dict[str, int | None] = {}
    for sid, proc in list(loop.procs.items()):
        if proc.poll() is not None:
            codes[sid] = proc.returncode
            del loop.procs[sid]
    held = harness_mod.held_files() if snap.live else None  # one read of the lock table
    dead = {str(row["id"]): codes.get(str(row["id"])) for row in snap.live
            if not loop.session_alive(str(row["id"]), row, held)}
    for sid in loop.store.sessions_ended(dead):
        loop.log.emit("session.exited", session_id=sid, code=dead[sid])
        ended.append(sid)
    swept = set()
    for host in loop.store.sweep_lost(snap.lapsed):
        loop.log.emit("host.lost", host=host)
        swept |= {str(r["session_id"]) for r in snap.active.values() if r["host"] == host}
    snap.ended(set(ended) | swept)
    for row in snap.lost_here:  # this host was away and its items were taken over
        if loop.session_alive(str(row["id"]), row):
            loop.log.emit("session.fenced", session_id=row["id"], work_item=row["ref"])
            loop.end_session(str(row["id"]))
    return ended


def ours(loop: Loop, w: dict[str, Any]) -> bool:
    """Whether this host may run the item's steps: its session runs here or nowhere — or on
    a host whose heartbeat has lapsed (taken over once claimed)."""
    host = str(w.get("host") or "")
    if host in ("", loop.store.host):
        return True
    sid = str(w.get("session_id") or "")
    if "host_ago" in w:  # the cycle's snapshot: the host's last beat, the session's end
        ago = w["host_ago"]
        if ago is None or float(ago) >= loop.store.expiry:
            return True
        return bool(sid) and bool(w.get("session_exited"))
    if not loop.store.host_alive(host):
        return True
    row = loop.store.session(sid) if sid else None
    return bool(sid) and row is not None and bool(row["exited"])


def take_over(loop: Loop, ref: str) -> None:
    """Under the claim: when the item's session was on a lost host, that session is over
    (not the session's own failure: the respawn count starts again) and the item is ours."""
    w = loop.work(ref) or {}
    host = str(w.get("host") or "")
    if host in ("", loop.store.host) or loop.store.host_alive(host):
        return
    n = loop.store.take_over(ref, host)
    loop.set_work(ref, respawns=0)
    loop.log.emit("host.lost", work_item=ref, host=host, sessions=n)


def fenced_out(loop: Loop, ref: str, exc: Fenced) -> None:
    """Another owner took `ref` over while this process worked on it: end the sessions it
    launched for it here (none of them is the item's current one), write nothing."""
    loop.log.emit("claim.fenced", work_item=ref, error=str(exc))
    for sid, proc in list(loop.procs.items()):
        if loop.proc_refs.get(sid) == ref:
            loop.end_session(sid, pid=proc.pid)


def work_on(loop: Loop, ref: str, report: Report, *, wait: float = 0.0,
            seen: dict[str, Any] | None = None) -> bool:
    """Claim `ref`, run what it is owed, release it; False when another process holds it
    (or its session runs on another live host). `seen`: its work row as this cycle's
    snapshot read it (read here when not given)."""
    w = seen if seen is not None else loop.work(ref)
    if w is not None and not ours(loop, w):
        report.busy += 1
        return False
    # One batch (db.batched): the visit's writes share a transaction and one fence check,
    # committed before whatever outside the database depends on them (a hook asked, a
    # session started: Loop.decide, launching.py) and with the release at the end. The
    # claim's statement returns the work row the visit starts from.
    with loop.db.batched():
        got = loop.store.claim_wait(ref, wait) if wait else loop.store.claim(ref)
        if not got:
            report.busy += 1
            return False
        try:
            try:
                failpoint("claim")
                take_over(loop, ref)
                run_steps(loop, ref, report)
                check_session(loop, ref, report)
            finally:
                loop.store.release(ref)  # fenced: what the visit wrote since it last
                # committed is rolled back with the release (Fenced, handled below)
        except Fenced as exc:
            fenced_out(loop, ref, exc)
    return True


def poll_once(loop: Loop) -> Report:
    """One cycle, decided from one read (runtime/cycle.py: the sessions to reap, the open
    items with their labels, every active item's work row, which items have new comments
    and which have pending steps). It claims only the items that owe something: a running
    item whose session runs and that has no pending step is left alone (issue 34: claiming
    it cost two transactions a cycle for nothing). An idle cycle is that one statement."""
    report = Report()
    snap = cycle.read(loop.store, LOOP_AUTHOR)
    pausepoint("cycle-read")
    report.exited = reap(loop, snap)
    report.live = {str(r["id"]) for r in snap.live} - set(report.exited)
    arm_labelled(loop, snap)
    pulls: dict[str, list[str]] = {}
    for item in snap.open_items:
        if item.parent:
            pulls.setdefault(item.parent, []).append(item.ref)
    is_open = {item.ref for item in snap.open_items}
    for ref, w in snap.active.items():
        if ref not in is_open:  # closed (or gone: get() says which)
            closed = loop.tracker.get(ref, comments=False)
            if closed.state == "closed":
                loop.store.queue(StepAction.COMPLETE.key(ref, w.get("arm_seq", 0)), ref,
                                 StepAction.COMPLETE,
                                 {"source": "tracker", "actor": closed.closed_by or "someone"})
                snap.pending.append(ref)
                continue
        said = ref in snap.commented or any(pr in snap.commented for pr in pulls.get(ref, []))
        if said and ingest(loop, ref, pulls.get(ref, [])):
            snap.pending.append(ref)
    running = [ref for ref, w in snap.active.items()
               if w["state"] == "running" and w["session_exited"] != 0]
    for ref in dict.fromkeys(snap.pending + running):
        if snap.first.get(ref) == StepAction.LAUNCH.value and not room_for(
                loop, ref, report, snap.active.get(ref)):
            report.waiting += 1  # its launch waits for room: no visit (claim and release)
            continue
        work_on(loop, ref, report, seen=snap.active.get(ref))
    loop.prune_decisions()
    loop.log.emit("poll.cycle", started=report.started, inputs=report.inputs,
                  refused=report.refused, closed=report.closed)
    return report


def arm_labelled(loop: Loop, snap: Snapshot) -> None:
    """Arm the open items that carry the config's `armLabel` and have no work row yet."""
    if not loop.settings.arm_label:
        return
    for item in snap.open_items:
        if loop.settings.arm_label in item.labels and loop.work(item.ref) is None:
            # Who added the label is not known: no login stands in for them (a real login
            # such as `label` would match rules about that person).
            loop.arm(item.ref, actor="", source="label")
            snap.pending.append(item.ref)


def deliver(loop: Loop, ref: str, *, wait: float = 30.0) -> None:
    """Take in and run what `ref`'s work item is owed now (a daemon's fast path)."""
    target, _ = input_target(loop, ref)
    if (loop.work(target) or {}).get("state") in ACTIVE:
        ingest(loop, target)
    work_on(loop, target, Report(), wait=wait)


def reply(loop: Loop, ref: str, text: str, *, actor: str, source: str = "reply") -> str:
    """A person's input in a process that holds the chain: written on the work item, then
    delivered at once. Returns what was done (`queued` while another process holds the
    item; the poller delivers it)."""
    ref = loop.tracker.resolve(ref)
    too_long = input_refusal(text)
    if too_long:  # refused before it is written: the item never sees it
        raise InputTooLong(f"{ref}: not taken: {too_long}")
    cid = loop.tracker.comment(ref, text, author=actor, source=source)
    target, _ = input_target(loop, ref)
    if (loop.work(target) or {}).get("state") not in ACTIVE:
        return "ignored"
    deliver(loop, ref)
    step = loop.store.step(StepAction.INPUT.key(ref, cid))
    return step.outcome if step is not None and step.state == "done" else "queued"


def wait_sessions(loop: Loop, timeout: float = 60.0) -> None:
    """Block until this process's sessions have ended (demo and tests)."""
    deadline = time.monotonic() + timeout
    for proc in list(loop.procs.values()):
        remaining = max(0.1, deadline - time.monotonic())
        try:
            proc.wait(timeout=remaining)
        except subprocess.TimeoutExpired:
            break


class Away:
    """The poller's view of a database that is away: the next cycle comes after a backoff
    (0.25 s doubling to 5 s) instead of the interval, said once when it goes and once when
    it is back."""

    def __init__(self) -> None:
        self.since = 0.0
        self.delay = 0.25

    def gone(self, exc: BaseException) -> float:
        if not self.since:
            self.since = time.monotonic()
            why = (str(exc).strip() or type(exc).__name__).splitlines()[0][:200]
            sys.stderr.write(f"the-loop poll: the database is unreachable ({why}); retrying "
                             "with backoff\n")
        pause, self.delay = self.delay, min(self.delay * 2, 5.0)
        return pause

    def back(self) -> None:
        if self.since:
            sys.stderr.write(f"the-loop poll: the database is back after "
                             f"{time.monotonic() - self.since:.1f} s\n")
            self.since, self.delay = 0.0, 0.25


def run_forever(loop: Loop, interval: float, stop: threading.Event | None = None,
                say: Any = None, started: Callable[[], object] | None = None) -> str:
    """The poller daemon's loop; returns why it stopped. Nothing one cycle or one work
    item does ends it: only SIGTERM or SIGINT to this process, or `stop` set by another
    thread. The signal handlers only set a flag (`wakeup.Wakeup`: a handler that set a
    `threading.Event` could deadlock on its lock, issue 31 item 2); the wait wakes at once.
    `started()` is called once they are in place (where the daemon says it is running: a
    SIGTERM sent on reading that is the running daemon's stop)."""
    stop = stop or threading.Event()
    why = "stopped"
    pausepoint("poll-starting")
    wakeup = Wakeup((signal.SIGTERM, signal.SIGINT)).start()
    if started is not None:
        started()
    away = Away()
    while not stop.is_set():
        pause = interval
        try:
            report = poll_once(loop)
            away.back()
            if say is not None:
                say(report)
        except BaseException as exc:  # one bad cycle never ends the daemon
            if isinstance(exc, KeyboardInterrupt) and stop.is_set():
                break
            try:
                loop.log.emit("poll.failed", error=f"{type(exc).__name__}: {exc}")
                if transient(exc):  # the database is away: back off, say it once
                    pause = away.gone(exc)
                else:
                    sys.stderr.write(f"the-loop poll: a cycle failed ({type(exc).__name__}: "
                                     f"{exc}); polling goes on\n")
            except Exception:  # not named: whatever saying it raises (a full disk under the
                pass  # event log, a closed stderr, an error's own str()) must not end the daemon
        came = _pause(wakeup, stop, pause)
        if came:
            why = signal.Signals(min(came)).name
            break
    wakeup.close()
    loop.log.emit("poll.stopped", why=why)
    pausepoint("poll-stopped")
    return why


def _pause(wakeup: Wakeup, stop: threading.Event, interval: float) -> set[int]:
    """Wait `interval` between cycles; the signals that came (empty: go on, or `stop`)."""
    if not wakeup.active:
        stop.wait(interval)
        return set()
    deadline = time.monotonic() + interval
    while not stop.is_set():  # in slices, so a `stop` set by another thread is seen too
        left = deadline - time.monotonic()
        if left <= 0:
            break
        came = wakeup.wait(min(left, 0.5))
        if came:
            return came
    return set()
