"""Attacks on how a launch names its session before the loop records it (its lock file,
device:inode, recorded with the session's id: bed1f01) and on the host's launch lock (a
registration committed under it). Real subprocesses, real files, real SQLite. Each of the
first and last tests failed on the code before its fix; the middle two hold."""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fault_helpers import hold, live_sessions
from lock_helpers import crashed_at, end, squat
from runtime_helpers import LoopDir, alive, until
from the_loop.runtime import harness


def _stop(ld: LoopDir, ref: str) -> None:
    ld.ok("reply", ref, "/stop", "--actor", "bob")
    ld.cli("poll", "--once")


def _victim() -> subprocess.Popen[str]:
    """A process of the same user that has nothing to do with any session (its own group),
    started before the session is recorded."""
    return subprocess.Popen(["sleep", "120"], start_new_session=True, text=True)


# ------------------------------------------------------------------ the recorded lock file
def test_a_pid_written_into_the_recorded_lock_file_is_registered_and_signalled(
        tmp_path: Path) -> None:
    """A poll dies right after spawning a session (failpoint `spawn`): the harness runs,
    holding the very file the launch recorded (`session_lock`). Another process of the same
    user cannot rename a file over it, but it can write into that file (the user's own
    0600 file; flock is advisory). Before, the redo (`launching._launched`) registered
    whatever pid was written there as the harness's, and `/stop` then signalled that
    process's group (here `sleep`, standing in for another session's harness or the
    operator's editor). A written pid now counts only while that process holds the lock."""
    with LoopDir(tmp_path) as ld:
        ref = crashed_at(ld, "spawn")
        sid = str(ld.work(ref)["session_id"])
        sessions = ld.state / "sessions"
        real = harness.lock_pid(sessions, sid)
        assert real > 0 and harness.session_alive(sessions, sid, real)
        victim = _victim()
        try:
            time.sleep(0.1)
            # The attacker: no lock taken, no rename, the same inode.
            fd = os.open(sessions / f"{sid}.lock", os.O_WRONLY | os.O_TRUNC)
            os.write(fd, str(victim.pid).encode())
            os.close(fd)
            ld.cli("poll", "--once")
            (row,) = ld.query("SELECT pid FROM sessions WHERE id=?", sid)
            registered = int(row["pid"])
            _stop(ld, ref)
            victim_killed = victim.poll() is not None or not alive(victim.pid)
            assert (registered, victim_killed) == (real, False), (
                f"registered pid {registered} (harness {real}, victim {victim.pid}); "
                f"victim killed by /stop: {victim_killed}")
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(victim.pid, signal.SIGKILL)
            victim.wait(timeout=30)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(real, signal.SIGKILL)


#: Renames a locked file of its own over the lock file named in argv[1] (as RENAMER in
#: test_lock_attack_2.py), writing into it the pid it is given in argv[2], says so, holds.
RENAME_OVER = """\
import fcntl, os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_DFL)
own = sys.argv[1] + ".mine"
fd = os.open(own, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
os.write(fd, sys.argv[2].encode())
os.rename(own, sys.argv[1])
print("renamed", flush=True)
time.sleep(120)
"""


def test_a_locked_file_renamed_over_a_dead_unrecorded_session_does_not_relaunch_or_register(
        tmp_path: Path) -> None:
    """The session's harness has died before the loop
    registered it (poll died at `spawn`, then the harness was killed). A process renames a
    locked file of its own over the session's lock name, with its own pid written in: the
    redo neither takes it for the harness (its inode is not the recorded one) nor reads the
    pid from it. The session is not launched twice either: it is found as one that ran."""
    with LoopDir(tmp_path) as ld:
        ref = crashed_at(ld, "spawn")
        sid = str(ld.work(ref)["session_id"])
        sessions = ld.state / "sessions"
        real = harness.lock_pid(sessions, sid)
        os.killpg(real, signal.SIGKILL)
        until(lambda: not harness.session_alive(sessions, sid, 0), what="the harness gone")
        # (It ran: it wrote output, so the redo knows it ran and does not launch it again.)
        (sessions / f"{sid}.log").write_text("it ran\n", encoding="utf-8")
        squatter = subprocess.Popen(
            [sys.executable, "-c", RENAME_OVER, str(sessions / f"{sid}.lock"), "0"],
            stdout=subprocess.PIPE, text=True, start_new_session=True)
        try:
            assert squatter.stdout is not None and squatter.stdout.readline() == "renamed\n"
            ld.cli("poll", "--once")
            rows = ld.query("SELECT pid FROM sessions WHERE id=?", sid)
            assert [r["pid"] for r in rows if r["pid"] == squatter.pid] == []
            assert len([r for r in ld.launches() if r["session"] == sid]) <= 1
        finally:
            end(squatter)


def test_an_agent_holding_a_descriptor_on_the_recorded_file_does_not_pass_for_the_session(
        tmp_path: Path) -> None:
    """The harness of an unrecorded session runs. Another
    process opens the session's (recorded) lock file itself -- same inode -- and runs a
    command of the session's agent with that descriptor. It holds no lock through it (its
    open file description is its own; flock is per description), so `_own_lock` does not
    take it for the session."""
    with LoopDir(tmp_path) as ld:
        ref = crashed_at(ld, "spawn")
        sid = str(ld.work(ref)["session_id"])
        sessions = ld.state / "sessions"
        real = harness.lock_pid(sessions, sid)
        fd = os.open(sessions / f"{sid}.lock", os.O_RDONLY)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            done = subprocess.run(ld.argv("reply", ref, "Ship it.", "--actor", "bob"),
                                  pass_fds=(fd,), capture_output=True, text=True,
                                  env=ld.env(), timeout=60)
            assert "agent session" not in done.stdout + done.stderr, done.stderr
            assert done.returncode == 0, done.stderr  # the operator's reply, as bob
        finally:
            os.close(fd)
            os.killpg(real, signal.SIGKILL)


# ------------------------------------------------------------------ the host's launch lock
def _end_harnesses(ld: LoopDir) -> None:
    """Kill every harness a lock file of `ld`'s sessions names (its process group)."""
    for lock in (ld.state / "sessions").glob("*.lock"):
        text = lock.read_text().strip()
        if text.isdigit():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(int(text), signal.SIGKILL)


def _refuse_a_log_row(ld: LoopDir, point: str, ref: str) -> None:
    """The database refuses one decision-log row (as PostgreSQL refuses an over-long index
    row, layout.ITEM_KEY_MAX): a trigger on the SQLite file aborts the row of `point` for
    `ref`. This is fault injection, not an attacker's power."""
    from the_loop.decisions.layout import TABLE

    with sqlite3.connect(ld.state / "loop.db") as db:
        db.executescript(TABLE)
        db.execute(f"CREATE TRIGGER refuse BEFORE INSERT ON decision_log WHEN "
                   f"NEW.point='{point}' AND NEW.work_item='{ref}' "
                   "BEGIN SELECT RAISE(ABORT, 'refused'); END")


def test_a_refused_session_spawned_record_leaves_the_host_over_max_sessions(
        tmp_path: Path) -> None:
    """Two items launch in one poll under maxSessions: 1, and the database refuses the
    first one's `session_spawned` record, which rolls that visit's writes back. When the
    registration of its session waited for the visit's commit (d3cee66, reverted), the
    rollback took it back after the harness had started, the launch lock was given up,
    and the second item found room: two harnesses ran. The registration commits under the
    host's launch lock."""
    with LoopDir(tmp_path) as ld:
        hold(ld, "maxSessions: 1\n", policy=False, recorder=False)
        first, second = ld.add("Item 0"), ld.add("Item 1")
        ld.start(first)
        time.sleep(0.05)
        ld.start(second)
        _refuse_a_log_row(ld, "session_spawned", first)
        ld.cli("poll", "--once", ok=False)
        try:
            until(lambda: sum(live_sessions(ld).values()) >= 1, timeout=20,
                  what="a harness")
            time.sleep(1.0)
            running = live_sessions(ld)
            registered = ld.query("SELECT id, ref FROM sessions")
            assert sum(running.values()) <= 1, (
                f"{dict(running)} harnesses run under maxSessions: 1; registered: "
                f"{registered}")
        finally:
            _end_harnesses(ld)


def test_a_process_that_keeps_the_hosts_launch_lock_does_not_stop_the_poller(
        tmp_path: Path) -> None:
    """Any process of the loop's user could flock stateDir/launch.lock and keep it: a
    launch, finding it busy, settled its visit and then waited for it without a bound, so
    the whole poll stopped (no other item visited, nothing reaped). A launch now waits
    `LAUNCH_LOCK_WAIT` s, says so (`launch.deferred`, naming the file and the fix) and
    waits for the next cycle, its step kept."""
    from the_loop.runtime.launching import LAUNCH_LOCK_WAIT

    with LoopDir(tmp_path) as ld:
        hold(ld, "maxSessions: 3\n", policy=False, recorder=False)
        ref = ld.add("Item 0")
        ld.start(ref)
        ld.state.mkdir(parents=True, exist_ok=True)
        squatter = squat(ld.state / "launch.lock")
        try:
            began = time.monotonic()
            ld.cli("poll", "--once", timeout=LAUNCH_LOCK_WAIT + 50)
            assert time.monotonic() - began < LAUNCH_LOCK_WAIT + 50
            (deferred,) = ld.events("launch.deferred")
            assert deferred["work_item"] == ref and "launch.lock" in deferred["error"]
            assert "fuser" in deferred["error"]
            assert ld.query("SELECT id FROM sessions") == []
        finally:
            end(squatter)
        ld.cli("poll", "--once")  # the lock is free: the step kept launches now
        try:
            assert len(ld.query("SELECT id FROM sessions WHERE ref=?", ref)) == 1
        finally:
            _end_harnesses(ld)
