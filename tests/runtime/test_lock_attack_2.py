"""A hostile process of the loop's own user against a launch that makes its session's files
afresh (harness._fresh_lock, harness._fresh) and against the checks that trust them.

The session id of a pending launch can be worked out from loop.db (test_lock_prelock.py),
so a process can put whatever it likes at the session's file names before the launch: a
folder, a FIFO, a symlink, a locked file of its own.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lock_helpers import crashed_at, end, future_session, seen_held_only_while_held, squat
from runtime_helpers import LoopDir, until
from the_loop.runtime import harness


def _pending_launch(ld: LoopDir) -> tuple[str, str, Path]:
    """An item whose launch step is pending (a poll died before it), the id its session
    will have (what a process reading loop.db can work out) and the sessions folder."""
    ref = crashed_at(ld, "workspace")
    sid = future_session(ld, ref)
    sessions = ld.state / "sessions"
    sessions.mkdir(parents=True, exist_ok=True)
    return ref, sid, sessions


def _stop(ld: LoopDir, ref: str) -> None:
    ld.ok("reply", ref, "/stop", "--actor", "bob")
    ld.cli("poll", "--once")


@pytest.mark.parametrize("suffix", ["lock", "prompt"])
def test_a_folder_put_at_a_sessions_file_name_blocks_its_item_at_once_with_a_sentence(
        tmp_path: Path, suffix: str) -> None:
    """A folder (not empty: unlink cannot remove it) at the session's lock or prompt name.
    Before, the launch failed with a bare IsADirectoryError and was redone twice."""
    with LoopDir(tmp_path) as ld:
        ref, sid, sessions = _pending_launch(ld)
        (sessions / f"{sid}.{suffix}" / "keep").mkdir(parents=True)
        done = ld.cli("poll", "--once")
        assert "Traceback" not in done.stderr, done.stderr
        assert ld.work(ref)["state"] == "blocked"
        (said,) = [c for c in ld.comments(ref) if "could not start" in c]
        assert f"{sid}.{suffix}" in said and "IsADirectoryError" not in said, said


def test_a_lock_put_at_a_sessions_name_after_a_failed_launch_is_not_taken_for_it(
        tmp_path: Path) -> None:
    """A launch that failed once its item named the session was redone trusting a lock
    found at the session's name: a folder at the prompt's name failed the first launch,
    and the process that then locked a file of its own there was recorded as the session's
    harness (its pid), which no launch then started."""
    with LoopDir(tmp_path) as ld:
        ref, sid, sessions = _pending_launch(ld)
        (sessions / f"{sid}.prompt" / "keep").mkdir(parents=True)
        ld.cli("poll", "--once")
        assert (ld.work(ref)["state"], ld.work(ref)["session_id"]) == ("blocked", "")
        shutil.rmtree(sessions / f"{sid}.prompt")
        squatter = squat(sessions / f"{sid}.lock")
        try:
            ld.cli("poll", "--once")
            assert [r["pid"] for r in ld.query("SELECT pid FROM sessions WHERE id=?", sid)
                    if r["pid"] == squatter.pid] == [], "the squatter was taken for the harness"
        finally:
            end(squatter)


@pytest.mark.parametrize("name", ["{sid}.log", "{sid}.config.json"])
def test_a_fifo_put_at_a_sessions_file_name_does_not_hang_the_launch(
        tmp_path: Path, name: str) -> None:
    """Before, the launch opened the log (and the config snapshot) for writing as it found
    it: a FIFO no one reads blocked it for ever, with the host's launch lock held (no other
    item of the host could start)."""
    with LoopDir(tmp_path) as ld:
        ref, sid, sessions = _pending_launch(ld)
        os.mkfifo(sessions / name.format(sid=sid))
        ld.cli("poll", "--once", timeout=60)
        (row,) = ld.query("SELECT id, pid FROM sessions WHERE ref=?", ref)
        assert row["id"] == sid
        until(lambda: [r["session"] for r in ld.launches()] == [sid], timeout=30,
              what="the session's harness recording its launch")
        _stop(ld, ref)


@pytest.mark.parametrize("name", ["{sid}.log", "{sid}.config.json"])
def test_a_link_put_at_a_sessions_log_or_snapshot_name_is_not_followed(
        tmp_path: Path, name: str) -> None:
    """As with the prompt (test_lock_prelock.py): a symlink at the session's log or config
    snapshot name, to a file of the operator's. Before, the harness's output was appended to
    that file, or the snapshot overwrote it."""
    with LoopDir(tmp_path) as ld:
        ref, sid, sessions = _pending_launch(ld)
        victim = tmp_path / "notes.txt"
        victim.write_text("the operator's notes\n", encoding="utf-8")
        (sessions / name.format(sid=sid)).symlink_to(victim)
        ld.cli("poll", "--once")
        until(lambda: [r["session"] for r in ld.launches()] == [sid], timeout=30,
              what="the session's harness recording its launch")
        assert victim.read_text(encoding="utf-8") == "the operator's notes\n"
        assert not (sessions / name.format(sid=sid)).is_symlink()
        _stop(ld, ref)


def test_a_fifo_at_a_sessions_lock_name_is_read_without_blocking(tmp_path: Path) -> None:
    """A redo reads the pid a crashed launch wrote into the lock file: a FIFO put there
    (no writer) blocked that read for ever. It is read in a child, so a hang fails the
    test instead of stalling it."""
    os.mkfifo(tmp_path / "s-0123456789ab.lock")
    code = ("import sys; from pathlib import Path; from the_loop.runtime import harness; "
            "print(harness.lock_pid(Path(sys.argv[1]), 's-0123456789ab'))")
    try:
        done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], text=True,
                              capture_output=True, timeout=30, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail("lock_pid blocked on a FIFO at the lock's name")
    assert (done.returncode, done.stdout) == (0, "0\n"), done.stderr
    assert harness.lock_pid(tmp_path, "s-none") == 0


#: Locks a file of its own, writes its pid into it, renames it over the lock file named in
#: argv[1], then runs the command in argv[2] (JSON) holding that lock, prints what the
#: command printed, and holds the lock.
RENAMER = """\
import fcntl, json, os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_DFL)
own = sys.argv[1] + ".mine"
fd = os.open(own, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
os.write(fd, str(os.getpid()).encode())
os.rename(own, sys.argv[1])
done = subprocess.run(json.loads(sys.argv[2]), pass_fds=(fd,), capture_output=True, text=True)
print(json.dumps(done.stdout + done.stderr), flush=True)
time.sleep(120)
"""


def test_a_locked_file_renamed_over_an_unrecorded_sessions_lock_does_not_pass_for_it(
        tmp_path: Path) -> None:
    """A poll that died right after spawning a session (failpoint `spawn`) leaves it
    running and not recorded until the next poll. Before, a process that renamed a locked
    file of its own over the session's lock file then passed for that session: its command
    was the session's agent's, and the redo recorded it as the session's harness. The
    launch now records its lock file (device:inode) with the session's id before the
    harness exists (schema 5), and only that file names the session."""
    with LoopDir(tmp_path) as ld:
        ref = crashed_at(ld, "spawn")
        sid = str(ld.work(ref)["session_id"])
        sessions = ld.state / "sessions"
        real = harness.lock_pid(sessions, sid)
        assert real > 0
        command = ld.argv("reply", ref, "Ship it.", "--actor", "bob")
        renamer = subprocess.Popen(
            [sys.executable, "-c", RENAMER, str(sessions / f"{sid}.lock"), json.dumps(command)],
            stdout=subprocess.PIPE, text=True, start_new_session=True, env=ld.env())
        try:
            assert renamer.stdout is not None
            said = json.loads(renamer.stdout.readline())
            ld.cli("poll", "--once")
            (row,) = ld.query("SELECT pid FROM sessions WHERE id=?", sid)
            assert (row["pid"], "agent session" in said) == (real, False), said
        finally:
            end(renamer)
            _stop(ld, ref)


@pytest.mark.skipif(not os.environ.get("THE_LOOP_TEST_BTRFS"), reason=(
    "set THE_LOOP_TEST_BTRFS to a writable folder on a btrfs volume (a subvolume or its "
    "top level)"))
def test_a_held_lock_on_btrfs_is_seen_held(tmp_path: Path) -> None:
    """On btrfs, stat gives a file the device of its subvolume while /proc/locks names the
    lock by the volume's own device: the alive check found no lock held, so every running
    session looked ended (a crashed launch's session was launched again)."""
    folder = Path(os.environ["THE_LOOP_TEST_BTRFS"]) / tmp_path.name
    folder.mkdir()
    try:
        seen_held_only_while_held(folder)
    finally:
        shutil.rmtree(folder)
