"""A hostile process of the loop's own user against a session that has not started yet, and
against the loop's checks of a live one.

A launch's session id comes from its step (its key and a random salt, kept in `loop.db`),
so a process that reads the state folder can work it out before the launch and put a lock
file of its own at that name. Before, the launch then took that process for the session's
harness (found by its lock, as after a crash) and started nothing, or blocked in `flock`.
Now a launch makes its session's files afresh, and a lock found at a session's name is
trusted as a crashed launch's only once the item names the session.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fault_helpers import hold, live_sessions, use_harness
from lock_helpers import crashed_at, end, future_session, seen_held_only_while_held, squat
from runtime_helpers import LoopDir, alive, until
from the_loop.runtime import harness


def test_a_lock_file_put_at_a_future_sessions_name_does_not_take_the_sessions_place(
        tmp_path: Path) -> None:
    with LoopDir(tmp_path) as ld:
        # A poll that dies before the launch leaves the launch step, salt and all, pending.
        ref = crashed_at(ld, "workspace")
        sid = future_session(ld, ref)
        lock = ld.state / "sessions" / f"{sid}.lock"
        lock.parent.mkdir(parents=True, exist_ok=True)
        squatter = squat(lock)
        try:
            done = ld.cli("poll", "--once")
            assert "Traceback" not in done.stderr
            (row,) = ld.query("SELECT id, pid FROM sessions WHERE ref=?", ref)
            assert row["id"] == sid
            assert row["pid"] != squatter.pid, "the squatter was taken for the harness"
            # The session's own harness runs, with its prompt, and holds the lock at its name.
            until(lambda: [r["session"] for r in ld.launches()] == [sid], timeout=30,
                  what="the session's harness recording its launch")
            assert live_sessions(ld)[ref] == 1
            assert harness.lock_pid(ld.state / "sessions", sid) == row["pid"]
            assert [s for s, _ in harness.held_locks(row["pid"], ld.state / "sessions")] == [sid]
            # Stopping the item ends its harness, as ever.
            ld.ok("reply", ref, "/stop", "--actor", "bob")
            ld.cli("poll", "--once")
            until(lambda: live_sessions(ld)[ref] == 0, timeout=30, what="the session to end")
        finally:
            end(squatter)


def test_a_launch_does_not_wait_on_a_lock_another_process_holds_at_its_name(
        tmp_path: Path) -> None:
    """Before, the launch blocked in `flock` for as long as the squatter held its lock (and
    with it the host's launch lock: no other item of the host could start)."""
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    sid = "s-0123456789ab"
    squatter = squat(sessions / f"{sid}.lock")
    try:
        launched, proc = harness.launch(
            [sys.executable, "-c", "import sys, time; sys.stdin.read(); time.sleep(30)"],
            prompt="Write it.", cwd=tmp_path, config_path=None, work_item="local#1",
            session_id=sid, log_dir=sessions, env=dict(os.environ))
        try:
            assert harness.lock_pid(sessions, sid) == launched.pid
            assert harness.lock_holders(sessions, sid) == sorted(
                [launched.pid, squatter.pid]), "the squatter's lock is on the removed file"
            st = os.stat(sessions / f"{sid}.lock")
            assert (sid, (st.st_dev, st.st_ino)) in harness.held_locks(launched.pid, sessions)
            assert (sid, (st.st_dev, st.st_ino)) not in harness.held_locks(squatter.pid,
                                                                           sessions)
        finally:
            proc.kill()
            proc.wait(timeout=30)
    finally:
        end(squatter)


def test_a_link_put_at_a_sessions_prompt_name_is_neither_written_nor_read(
        tmp_path: Path) -> None:
    """The prompt goes to the harness through a file the launch made: a symlink put at its
    name (to a file of the operator's) is removed, not followed."""
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    sid = "s-0123456789ab"
    victim = tmp_path / "notes.txt"
    victim.write_text("the operator's notes\n", encoding="utf-8")
    (sessions / f"{sid}.prompt").symlink_to(victim)
    out = tmp_path / "got.txt"
    launched, proc = harness.launch(
        [sys.executable, "-c", f"import sys; open({str(out)!r}, 'w').write(sys.stdin.read())"],
        prompt="Write it.", cwd=tmp_path, config_path=None, work_item="local#1",
        session_id=sid, log_dir=sessions, env=dict(os.environ))
    assert proc.wait(timeout=30) == 0
    assert out.read_text(encoding="utf-8") == "Write it."
    assert victim.read_text(encoding="utf-8") == "the operator's notes\n"
    assert not (sessions / f"{sid}.prompt").exists()
    assert launched.pid == proc.pid


def test_asking_whether_a_session_is_alive_never_takes_its_lock(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A check that took the lock for an instant was, in that instant, a holder of the
    session's lock to a poller ending the session, which signals every holder."""
    lock = tmp_path / "s-0123456789ab.lock"
    lock.touch()
    taken: list[object] = []
    real = fcntl.flock

    def flock(fd: int, op: int) -> None:
        if os.fstat(fd).st_ino == lock.stat().st_ino:
            taken.append(op)
        real(fd, op)

    monkeypatch.setattr(fcntl, "flock", flock)
    assert not harness.session_alive(tmp_path, lock.stem, 0)
    squatter = squat(lock)
    try:
        assert harness.session_alive(tmp_path, lock.stem, 0)
        # Reached through the holder's descriptor once its file is removed, as end_session
        # and identity reach a lock whose file an agent removed.
        fd = next(p for p in Path(f"/proc/{squatter.pid}/fd").iterdir()
                  if os.readlink(p) == str(lock))
        lock.unlink()
        assert harness._locked(fd, tmp_path)
    finally:
        end(squatter)
    assert taken == []
    assert not list(tmp_path.glob("*.probe"))  # the check's own file is gone


def test_where_the_lock_table_names_files_otherwise_a_held_lock_is_still_seen_held(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """btrfs's /proc/locks names a lock by the volume's device, stat by the subvolume's:
    read by the stat's, every running session looked ended. A device whose own lock the
    table does not show is asked by the probe instead. (Stood in for: a table whose
    devices are all another's; test_lock_attack_2.py runs a real btrfs volume.)"""
    real = harness._lock_table

    def elsewhere() -> bytes | None:
        table = real()
        return None if table is None else re.sub(rb" [0-9a-f]+:[0-9a-f]+:", b" 99:99:", table)

    monkeypatch.setattr(harness, "_lock_table", elsewhere)
    monkeypatch.setattr(harness, "_AGREES", {})
    lock = seen_held_only_while_held(tmp_path)
    assert harness._AGREES.get(lock.stat().st_dev) is False


def test_a_recorded_harness_pid_used_again_is_not_signalled_as_the_sessions_group(
        tmp_path: Path) -> None:
    """Stopping a session signals its harness's process group and session. A pid used again
    — by a process that started after the session was recorded — is another's."""
    with LoopDir(tmp_path) as ld:
        hold(ld, policy=False)
        ref = ld.add()
        ld.start(ref)
        ld.cli("poll", "--once")
        (row,) = ld.query("SELECT id, pid FROM sessions WHERE ref=?", ref)
        sid = str(row["id"])
        stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                                    start_new_session=True)
        try:
            # The harness is gone; its lock is still held by a child it left (a squatter
            # stands in), and its recorded pid now names the stranger.
            os.killpg(int(row["pid"]), signal.SIGKILL)
            until(lambda: not alive(int(row["pid"])), timeout=30, what="the harness to end")
            with ld.db() as conn:
                # recorded a minute ago: the stranger started well after it
                conn.execute("UPDATE sessions SET pid=?, started=started-60 WHERE id=?",
                             (stranger.pid, sid))
            lock = ld.state / "sessions" / f"{sid}.lock"
            holder = squat(lock)
            try:
                ld.ok("reply", ref, "/stop", "--actor", "bob")
                ld.cli("poll", "--once")
                until(lambda: holder.poll() is not None, timeout=30,
                      what="the session's lock holder to be ended")
                assert stranger.poll() is None and alive(stranger.pid), \
                    "the stranger was signalled as the harness's group"
            finally:
                end(holder)
        finally:
            stranger.kill()
            stranger.wait(timeout=30)


#: A harness that leaves a child in its process group without the session's lock (the child
#: is started with its descriptors closed), writes the child's pid, and waits.
_PARENT_HARNESS = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
open(sys.argv[1], "w").write(str(child.pid))
time.sleep(120)
"""


def test_a_clock_stepped_after_a_session_was_recorded_still_lets_stop_end_its_group(
        tmp_path: Path) -> None:
    """Which process a recorded pid names was told by its start time against the session's
    recorded time, with 2 s of slack: a clock stepped forward by more made the harness look
    like a pid used again, and `/stop` then spared its process group -- a child that holds
    no lock kept running. The harness's start (clock ticks since boot, which no clock step
    moves) is recorded with its pid now (schema 5)."""
    with LoopDir(tmp_path) as ld:
        script, child_pid = ld.root / "parent_harness.py", ld.root / "child.pid"
        script.write_text(_PARENT_HARNESS, encoding="utf-8")
        ld.write_config(harness="sleep")
        use_harness(ld, f"[{json.dumps(sys.executable)}, {json.dumps(str(script))}, "
                        f"{json.dumps(str(child_pid))}]")
        ref = ld.add()
        ld.start(ref)
        ld.cli("poll", "--once")
        until(lambda: child_pid.exists() and child_pid.read_text().isdigit(), timeout=30,
              what="the harness's child")
        child = int(child_pid.read_text())
        (row,) = ld.query("SELECT id, pid, pid_start FROM sessions WHERE ref=?", ref)
        assert row["pid_start"] == harness.process_start_time(int(row["pid"]))
        try:
            with ld.db() as conn:  # the clock went a minute forward since it was recorded
                conn.execute("UPDATE sessions SET started=started-60 WHERE id=?", (row["id"],))
            ld.ok("reply", ref, "/stop", "--actor", "bob")
            ld.cli("poll", "--once")
            until(lambda: not alive(child), timeout=30,
                  what="the harness's child, in its process group, to be ended by /stop")
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
