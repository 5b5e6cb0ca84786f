"""A process that merely has a live session's lock file open — a reader, another poller
asking whether the session is alive, a shell's `exec 9<file` — is not inside that session:
ending the session never signals it, and a command it runs is not that session's agent's.

Found in CI: a test sampled the lock files (opened each to read its pid) while a poller ended
a session, and the poller's SIGTERM, meant for the session's processes, ended the pytest
worker reading it. A second poller checking the same session would have been ended the same
way. Only a descriptor the lock is held through (the harness's, a child's copy) counts now.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
from pathlib import Path

from fault_helpers import hold, live_sessions
from runtime_helpers import LoopDir, alive, until
from the_loop.runtime.harness import held_locks, lock_holders

#: Holds a lock (as a harness does), starts a child that inherits it, prints both pids.
HOLDER = """\
import fcntl, os, subprocess, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                         pass_fds=(fd,))
print(os.getpid(), child.pid, flush=True)
time.sleep(120)
"""
#: Opens the lock file to read it and keeps it open, as a sampler or `tail` would.
READER = """\
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_DFL)
signal.signal(signal.SIGINT, signal.SIG_DFL)
fds = [os.open(p, os.O_RDONLY) for p in sys.argv[1:]]
print("open", flush=True)
time.sleep(120)
"""


def _spawn(code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE,
                            text=True, start_new_session=True)


def _end(proc: subprocess.Popen[str]) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)


def test_only_the_descriptors_a_lock_is_held_through_name_its_session(tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    lock = sessions / "s-0123456789ab.lock"
    holder = _spawn(HOLDER, str(lock))
    reader = None
    try:
        assert holder.stdout is not None
        lead, child = (int(p) for p in holder.stdout.readline().split())
        reader = _spawn(READER, str(lock))
        assert reader.stdout is not None and reader.stdout.readline() == "open\n"
        with open(lock, "rb"):  # this process reads it too
            assert sorted(lock_holders(sessions, lock.stem)) == sorted([lead, child])
            assert [sid for sid, _ in held_locks(lead, sessions)] == [lock.stem]
            assert [sid for sid, _ in held_locks(child, sessions)] == [lock.stem]
            assert held_locks(reader.pid, sessions) == []
            assert held_locks("self", sessions) == []
        # The lock is still held: a fresh open is refused it.
        fd = os.open(lock, os.O_RDONLY)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                raise AssertionError("the holder's lock was not held")
            except BlockingIOError:
                pass
        finally:
            os.close(fd)
    finally:
        for proc in (holder, reader):
            if proc is not None:
                _end(proc)


def _running_item(ld: LoopDir) -> str:
    """An item whose session (the holding harness) runs now."""
    hold(ld, policy=False)
    ref = ld.add()
    ld.start(ref)
    ld.cli("poll", "--once")
    assert live_sessions(ld)[ref] == 1
    return ref


def test_stopping_an_item_ends_its_session_and_not_a_process_reading_its_lock_file(
        tmp_path: Path) -> None:
    with LoopDir(tmp_path) as ld:
        ref = _running_item(ld)
        locks = sorted(str(p) for p in (ld.state / "sessions").glob("*.lock"))
        reader = _spawn(READER, *locks)
        try:
            assert reader.stdout is not None and reader.stdout.readline() == "open\n"
            ld.ok("reply", ref, "/stop", "--actor", "bob")
            done = ld.cli("poll", "--once")
            assert "Traceback" not in done.stderr
            assert ld.work(ref)["state"] == "stopped"
            until(lambda: live_sessions(ld)[ref] == 0, timeout=30,
                  what="the stopped item's session to end")
            assert reader.poll() is None and alive(reader.pid), \
                f"the reader was signalled (exit {reader.returncode})"
        finally:
            _end(reader)


def test_a_command_run_with_a_live_sessions_lock_file_open_is_still_the_operators(
        tmp_path: Path) -> None:
    """A session's id is no credential, and neither is its lock file: opening it (the
    folder's files name every session) does not make a process that session's agent."""
    with LoopDir(tmp_path) as ld:
        ref = _running_item(ld)
        (lock,) = (ld.state / "sessions").glob("*.lock")
        done = subprocess.run(
            ["bash", "-c", 'exec 9<"$0"; exec "$@"', str(lock),
             *ld.argv("reply", ref, "Use the blue theme.", "--actor", "alice")],
            cwd=ld.root, env=ld.env(), capture_output=True, text=True, timeout=60,
            check=False)
        assert done.returncode == 0, done.stderr
        assert "posted as alice" in done.stdout
        ld.ok("reply", ref, "/stop", "--actor", "bob")
        ld.cli("poll", "--once")
