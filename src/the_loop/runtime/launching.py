"""The launch step: `session_spawn`, then at most one session per item, launched once.

A launch's session id comes from its step's key, so a redo after a crash finds the session a
dead process launched (by its lock, its pid, or what it left: a question, input, its
completion, output) and registers it instead of launching it twice. A refused launch blocks
the item, or sends a pull request's own session's input into the ticket's session.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from typing import Any

from the_loop.agentdoor import DOOR_ENV
from the_loop.config import SNAPSHOT_ENV, write_snapshot
from the_loop.errors import LoopError
from the_loop.hooks.engine.points import SessionSpawn, SessionSpawned
from the_loop.runtime import harness as harness_mod
from the_loop.runtime import workspace
from the_loop.runtime.identity import SESSION_TOKEN_ENV, session_token
from the_loop.runtime.lease import HOST_ENV
from the_loop.runtime.service import Decided, Loop, failpoint, pausepoint
from the_loop.runtime.stepactions import StepAction, salted
from the_loop.runtime.store import Step


def launch(loop: Loop, step: Step) -> None:
    """session_spawn, then at most one session per item: the previous one ends first."""
    ref, p = step.ref, step.payload
    node = loop.graph.node(p["node"])
    w = loop.work(ref)
    if "session_spawn" not in step.decisions and (
            w is None or w["state"] not in ("running", "waiting") or w["node"] != node.name):
        loop.store.finish(step, "stale")
        return
    h = loop.settings.harnesses[loop.settings.harness]
    endpoint = p["endpoint"]
    target = loop.tracker.work_item(endpoint or ref)
    try:  # no lock of the visit is held while git checks a worktree out
        path, is_git = workspace.prepare(loop.settings.state_dir, loop.tracker.work_item(ref),
                                         loop.settings.git_repository, loop.db.settle)
    except LoopError as exc:
        launch_failed(loop, step, str(exc))
        return
    failpoint("workspace")
    loop.log.emit("workspace.prepared", work_item=ref, path=str(path), git=is_git)
    # A launch whose session_spawn is asked only now never reached its spawn (the point's
    # decisions are committed before any, `_start`): no session of it exists to look for.
    asked = SessionSpawn.POINT in step.decisions
    d = loop.decide(step, lambda: SessionSpawn(
        **loop.base(ref), actor=p["actor"], harness=h.name, model=h.model,
        command=list(h.command), cwd=str(path), respawn=p["respawn"], endpoint=target,
        node=node.name, phase=node.phase, prompt=p["prompt"]))
    if d.refused:
        _launch_refused(loop, step, d, target.ref)
        return
    sid = _session_of(loop, step, asked)
    if loop.store.session(sid) is None:
        with host_launches(loop):  # room checked and taken by one process of a host at once
            pid, found = _start(loop, step, sid, loop.redact(str(d["prompt"])), path)
            if pid < 0:
                return  # it could not start (said), or waits for room (step kept)
            # A session found after a crash may have asked already: its item waits. One
            # started now has not: its `ask` needs the item's claim, which this visit holds.
            waits = found and StepAction.QUESTION in loop.store.queued_by(ref, sid, node.name,
                                                                          0)
            began = harness_mod.process_start_time(pid) if pid > 0 else ""
            loop.store.register_session(sid, step.key, ref=ref, endpoint=target.ref,
                                        harness=h.name, pid=pid, node=node.name,
                                        log=str(loop.sessions_dir / f"{sid}.log"),
                                        state="waiting" if waits else "running",
                                        pid_start=began if began.isdigit() else "")
            loop.db.settle()  # counted by this host's next room check, under the lock
        loop.log.emit("session.launched", work_item=ref, session_id=sid, session_pid=pid,
                      endpoint=target.ref, respawn=p["respawn"])
        failpoint("register")
    row = loop.store.session(sid) or {}
    spawned = loop.decide(step, lambda: SessionSpawned(
        **loop.base(ref), session_id=sid, pid=int(row.get("pid", 0)), harness=h.name,
        model=h.model, cwd=str(path), endpoint=target, respawn=p["respawn"], node=node.name,
        phase=node.phase))
    if spawned["announce"] is not False:
        model = f", model {h.model}" if h.model else ""
        # Neither the text nor the marker names the session: its id is what an agent
        # login's input must name, and anyone who reads the tracker reads comments (another
        # item's agent too). Operators find it in `the-loop events` and the console.
        if loop.post_once(ref, f"announce:{step.key}@{loop.store.host}",
                          f"A session started at {node.name} (harness {h.name}{model})."):
            loop.log.emit("session.announced", work_item=ref, session_id=sid)
    failpoint("announce")
    loop.store.finish(step, "launched", sid)


def _session_of(loop: Loop, step: Step, asked: bool) -> str:
    """The id of the launch step's session: the one it launched and recorded already (maybe
    on another host) when there is one, so it is not launched twice; else a new one's.
    `asked`: whether session_spawn was asked for the step before this run (else no session
    of it can exist, and none is looked for)."""
    sid = loop.session_id(step.key, str(step.payload.get("salt", "")))
    if not asked:
        loop.store.unseen(sid)
        return sid
    prior = loop.store.session_of_step(step.key, sid)
    return str(prior["id"]) if prior is not None and not prior["lost"] else sid


def current_session(loop: Loop, ref: str, w: dict[str, Any] | None = None) -> str:
    """The id of `ref`'s current session ('' when none), from its work row `w` when given."""
    row = w if w is not None else loop.work(ref)
    return str((row or {}).get("session_id") or "")


def has_room(loop: Loop, ref: str) -> bool:
    """Whether this host may start one more session for `ref` (its own current session,
    which a launch replaces, does not count)."""
    current = current_session(loop, ref)
    if loop.store.running_here(besides=current) < loop.settings.max_sessions:
        return True
    # Recorded as running: ask each session's lock (one this loop ended may not be reaped).
    held = harness_mod.held_files()  # one read of the lock table for all of them
    running = sum(1 for row in loop.store.live_sessions()
                  if row["id"] != current and loop.session_alive(str(row["id"]), row, held))
    return running < loop.settings.max_sessions


#: Seconds a launch waits for its host's launch lock before it waits for the next cycle
#: instead (`LaunchDeferred`): longer than another launch of the host holds it (a previous
#: session's grace and its SIGTERM and SIGKILL waits), short enough that a process that
#: keeps the lock cannot stop the poller.
LAUNCH_LOCK_WAIT = 10.0


class LaunchDeferred(Exception):
    """The host's launch lock stayed held for `LAUNCH_LOCK_WAIT` s: the launch step waits
    for the next cycle (poller.run_steps; `launch.deferred`)."""


@contextlib.contextmanager
def host_launches(loop: Loop) -> Iterator[None]:
    """This host's launch lock (a file in stateDir, which its processes share): held from
    the room check to the session's registration, so two processes of one host launching
    at once cannot both take the last place under maxSessions."""
    fd = os.open(loop.settings.state_dir / "launch.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            # Nothing of this visit's batch is held while the lock is waited for: on SQLite
            # its holder may be waiting for the database's write lock (db.batched); on
            # PostgreSQL the holder may keep it for seconds (a previous session's grace and
            # its SIGTERM and SIGKILL waits), all that time this item's rows locked and its
            # transaction idle, which a server's idle_in_transaction_session_timeout ends.
            loop.db.settle()
            _wait_for(fd, loop.settings.state_dir / "launch.lock")
        yield
    finally:
        os.close(fd)  # the lock goes with the descriptor


def _wait_for(fd: int, path: object) -> None:
    """Take the lock on `fd` within `LAUNCH_LOCK_WAIT` s (LaunchDeferred otherwise)."""
    deadline = time.monotonic() + LAUNCH_LOCK_WAIT
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise LaunchDeferred(
                    f"the host's launch lock {path} has been held for more than "
                    f"{LAUNCH_LOCK_WAIT:g} s; this launch waits for the next cycle. If no "
                    f"the-loop process of this host is launching a session, find what holds "
                    f"it (`fuser {path}`) and stop it") from None
            time.sleep(0.05)


def _launch_refused(loop: Loop, step: Step, d: Decided, target: str) -> None:
    """A refused launch: the item is blocked with one comment, or a pull request's own
    session is delivered into the ticket's session instead (said in one comment there)."""
    ref, endpoint = step.ref, step.payload["endpoint"]

    def said(posted: bool) -> None:  # recorded with its one comment: a redo does neither again
        if posted:
            loop.log.emit("session.refused", work_item=ref, endpoint=target, hook=d.refused_by,
                          reason=d.reason)

    if endpoint and endpoint != ref:
        said(loop.post_once(ref, step.key, (
            f"A session of pull request {target} was refused by hook `{d.refused_by}` at "
            f"`session_spawn`{d.whose_reason}: {d.reason}. Its input goes to this work "
            "item's session instead.")))
        failpoint("after-refusal-comment")
        with loop.db.transaction() as conn:
            loop.store.add_step(conn, StepAction.LAUNCH.key("ticket", name=step.key), ref,
                                StepAction.LAUNCH,
                                salted(dict(step.payload, endpoint="")))
            loop.store.finish(step, "redirected", conn=conn)
        return
    loop.set_work(ref, state="blocked")
    said(loop.post_once(ref, step.key, f"A session launch for this work item was refused by "
                                       f"hook `{d.refused_by}` at `session_spawn`"
                                       f"{d.whose_reason}: {d.reason}"))
    failpoint("after-refusal-comment")
    loop.store.finish(step, "refused", f"{d.refused_by}: {d.reason}")


def _start(loop: Loop, step: Step, sid: str, prompt: str, path: object) -> tuple[int, bool]:
    """Launch the harness for a step (or find the one a crashed process launched);
    returns its pid (0: it ran, its pid is unknown), or -1 when it could not start (said)
    or this host has no room for it now (the step waits; the caller holds
    `host_launches`, so the room it finds is still there when it registers the session),
    and whether it was found rather than started now."""
    sessions = loop.sessions_dir
    w = loop.work(step.ref) or {}
    # Its launch began once the item names it (durable before its process exists): until
    # then, a lock file of its name is another process's (harness._fresh_lock).
    began = w.get("session_id") == sid
    found = _launched(loop, step, sid, w) if began else None
    if found is not None:
        # A process that died after launching this session: it ran (or runs) with its
        # whole prompt and is registered, not launched twice.
        with contextlib.suppress(OSError):  # (a folder put there: it was read)
            (sessions / f"{sid}.prompt").unlink(missing_ok=True)
        return found, True
    if not has_room(loop, step.ref):  # another process of this host took the last place
        loop.log.emit("launch.waiting", work_item=step.ref, step=step.key,
                      max_sessions=loop.settings.max_sessions)
        return -1, False
    pausepoint("launch-room")
    previous = str(w.get("session_id") or "")
    if previous and previous != sid:
        prev = loop.store.session(previous) or {}
        # A session that finished its node is given a moment to exit on its own.
        loop.end_session(previous, grace=5.0 if prev.get("node") != w.get("node") else 0.0)
    # The session is the item's current one before its process exists: an agent that runs
    # `graph complete` at once, even if this process dies before registering it, is
    # answering for its own item's node (the previous session has ended by now).
    # Its token (the control plane's agent credential) is bound to it from the same moment;
    # the loop keeps only the digest, and the token lives only in the session's environment.
    token, digest = session_token()
    h = loop.settings.harnesses[loop.settings.harness]
    env = harness_mod.harness_env(h.env, set(loop.settings.secret_names))
    env["THE_LOOP_NODE"] = str(step.payload["node"])
    env[HOST_ENV] = loop.store.host  # its one-shot commands act for this host
    env[SESSION_TOKEN_ENV] = token
    if loop.door:  # its graph complete and ask are answered by this poller (agentdoor.py)
        env[DOOR_ENV] = loop.door
    # Its commands read the config the loop parsed, while the file is unchanged (config.py).
    snapshot = write_snapshot(loop.config, sessions / f"{sid}.config.json")
    if snapshot:
        env[SNAPSHOT_ENV] = snapshot
    # Its lock file is made now and recorded with it (`session_lock`): until the session is
    # recorded, that file is what names it (identity._own_lock, `_launched` after a crash),
    # not whatever another process puts at the file's name.
    try:
        lock_fd, lock = harness_mod.make_lock(sessions, sid)
    except LoopError as exc:
        launch_failed(loop, step, str(exc))
        return -1, False
    try:
        loop.set_work(step.ref, session_id=sid, host=loop.store.host, session_key=digest,
                      session_lock=lock)
        loop.db.settle()  # durable before the process exists (the visit's batch, db.batched)
    except BaseException:
        os.close(lock_fd)
        raise
    try:
        launched, proc = harness_mod.launch(
            h.command, prompt=prompt, cwd=path, config_path=loop.config.path,  # type: ignore[arg-type]
            work_item=step.ref, session_id=sid, log_dir=sessions, env=env, lock_fd=lock_fd)
    except LoopError as exc:
        launch_failed(loop, step, str(exc))
        return -1, False
    loop.procs[sid] = proc
    loop.proc_refs[sid] = step.ref
    failpoint("spawn")
    return launched.pid, False


def _launched(loop: Loop, step: Step, sid: str, w: dict[str, Any]) -> int | None:
    """A session whose launch began (the item names it) and that ran or runs: its harness's
    pid (0: unknown), or None when it never started. Its lock file is the one its launch
    recorded (`session_lock`; by its name for a launch of a version that recorded none)."""
    sessions, lock = loop.sessions_dir, str(w.get("session_lock") or "")
    if lock:
        held = harness_mod.holding(sessions, sid, lock)
        holders = [int(fd.parent.parent.name) for fd in held]
        written = next((p for p in map(harness_mod.pid_written, held) if p), 0) or \
            harness_mod.lock_pid(sessions, sid, lock)  # (written once it was spawned)
        if written or held or _ran(loop, step, sid, int(w.get("epoch") or 0)):
            # What the file says shows that it was spawned, but any process of the loop's
            # user can write into it: a pid is the harness's while it holds the lock, or
            # once no process has it (a harness that ended); never a live process that
            # does not hold it (another session's harness would then be taken for this
            # session's: identity._led_by_session).
            if written and (written in holders or not harness_mod.process_start_time(written)):
                return written
            return holders[0] if holders else 0
        return None
    pid = harness_mod.lock_pid(sessions, sid)
    if pid or harness_mod.session_alive(sessions, sid, 0) or \
            _ran(loop, step, sid, int(w.get("epoch") or 0)):
        return pid or next(iter(harness_mod.lock_holders(sessions, sid)), 0)
    return None


def _ran(loop: Loop, step: Step, sid: str, epoch: int) -> bool:
    """Whether a session whose launch began (its id is the item's) ran and has ended before
    its pid was written: it queued a question, input or its completion, or wrote output.
    (One that left none of these cannot be told from one that never started.)"""
    log = loop.sessions_dir / f"{sid}.log"
    return bool(loop.store.queued_by(step.ref, sid, str(step.payload["node"]), epoch)) or (
        log.exists() and log.stat().st_size > 0)


def launch_failed(loop: Loop, step: Step, error: str) -> None:
    """A session could not start: block the item (never half-running), say why once."""
    ref = step.ref
    loop.set_work(ref, state="blocked", session_id="")
    loop.post_once(ref, step.key, f"A session for this work item could not start: {error}. "
                                  f"Fix it, then re-arm with `the-loop start {ref}`.")
    loop.store.finish(step, "failed", error)
    loop.log.emit("session.failed", work_item=ref, error=error)
