"""A hostile process of the loop's own user that locks a session's file (shared by the lock
attack tests in tests/runtime/)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runtime_helpers import LoopDir

#: Locks the file it is given (as an agent of another session would), writes its own pid
#: into it, says so, and holds it.
SQUATTER = """\
import fcntl, os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_DFL)
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
os.write(fd, str(os.getpid()).encode())
print("locked", flush=True)
time.sleep(120)
"""


def squat(path: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", SQUATTER, str(path)],
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert proc.stdout is not None and proc.stdout.readline() == "locked\n"
    return proc


def end(proc: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)


def seen_held_only_while_held(folder: Path) -> Path:
    """Assert the alive check finds a session's lock in `folder` free, held while a squatter
    holds it, and free again; returns the lock file."""
    from the_loop.runtime.harness import session_alive

    lock = folder / "s-0123456789ab.lock"
    lock.touch()
    assert not session_alive(folder, lock.stem, 0)
    squatter = squat(lock)
    try:
        assert session_alive(folder, lock.stem, 0)
    finally:
        end(squatter)
    assert not session_alive(folder, lock.stem, 0)
    return lock


def crashed_at(ld: LoopDir, failpoint: str) -> str:
    """An item started on `ld` (the holding harness) whose first poll died at `failpoint`."""
    from fault_helpers import hold

    hold(ld, policy=False)
    ref = ld.add()
    ld.start(ref)
    crashed = ld.cli("poll", "--once", env={"THE_LOOP_FAILPOINT": failpoint}, ok=False)
    assert crashed.returncode == 86, crashed.stderr
    return ref


def future_session(ld: LoopDir, ref: str) -> str:
    """The id the pending launch of `ref` will give its session (what a process reading
    loop.db can work out)."""
    import json

    from the_loop.runtime.service import session_id_for

    (step,) = ld.query("SELECT key, payload FROM steps WHERE ref=? AND kind='launch' "
                       "AND state='pending'", ref)
    return session_id_for(str(step["key"]), str(json.loads(step["payload"])["salt"]))
