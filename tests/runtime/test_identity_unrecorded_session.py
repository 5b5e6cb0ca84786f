"""An agent is itself even before the loop has recorded its session (issue 11 rule 2, in the
moments between spawning a harness and recording it, which a crash makes long).

A stand-in harness — a real process in its own process session that holds
`<stateDir>/sessions/<id>.lock`, exactly as `harness.launch` leaves one — runs `the-loop
reply … --actor alice` with THE_LOOP_SESSION removed from its environment, while no
`sessions` row exists. The command is refused as the agent's, whether it inherited the lock
descriptor itself or only its session leader holds it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from runtime_helpers import LoopDir

HOLDER = """\
import fcntl, json, os, subprocess, sys
lock_path, keep, out, *argv = sys.argv[1:]
fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
env = {k: v for k, v in os.environ.items() if k != "THE_LOOP_SESSION"}
# keep=1: the command inherits the descriptor; keep=0: only this session leader holds it.
done = subprocess.run(argv, env=env, capture_output=True, text=True,
                      pass_fds=(fd,) if keep == "1" else ())
with open(out, "w") as f:
    json.dump([done.returncode, done.stderr], f)
"""


@pytest.mark.parametrize("inherited", [True, False], ids=["inherited-lock", "leader-holds-lock"])
def test_issue11_rule2_an_agent_whose_session_is_not_recorded_yet_is_still_the_agent(
    ld: LoopDir, tmp_path: Path, inherited: bool
) -> None:
    ref = ld.add()
    sessions = ld.state / "sessions"
    sessions.mkdir(parents=True, exist_ok=True)
    holder = ld.write("holder.py", HOLDER)
    out = tmp_path / "answer.json"
    sid = "s-0123456789ab"
    subprocess.run(
        [sys.executable, str(holder), str(sessions / f"{sid}.lock"), "1" if inherited else "0",
         str(out), *ld.argv("reply", ref, "/approve", "--actor", "alice")],
        cwd=ld.root, env=ld.env(), start_new_session=True, timeout=60, check=True)
    assert ld.query("SELECT id FROM sessions") == []  # the loop has recorded no session
    code, err = json.loads(out.read_text(encoding="utf-8"))
    assert code == 2
    assert err == (f"the-loop: this command runs inside agent session {sid}: what it writes is "
                   f"the agent's (agent:{sid}); --actor cannot name another person\n")


def test_an_operator_command_is_not_mistaken_for_an_agent_after_sessions_ended(
    ld: LoopDir
) -> None:
    """Lock files left by ended sessions name nobody: the operator's reply is the operator's."""
    ref = ld.add()
    sessions = ld.state / "sessions"
    sessions.mkdir(parents=True, exist_ok=True)
    (sessions / "s-0123456789ab.lock").write_text("12345", encoding="utf-8")
    done = ld.cli("reply", ref, "/approve", "--actor", "alice")
    assert done.returncode == 0 and "comment" in done.stdout


REMOVER = """\
import fcntl, json, os, subprocess, sys
lock_path, out, *argv = sys.argv[1:]
fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
os.unlink(lock_path)  # a hostile agent removes its lock file from the folder
env = {k: v for k, v in os.environ.items() if k != "THE_LOOP_SESSION"}
done = subprocess.run(argv, env=env, capture_output=True, text=True, pass_fds=(fd,))
with open(out, "w") as f:
    json.dump([done.returncode, done.stderr], f)
"""


def test_issue11_rule2_removing_the_lock_file_does_not_make_an_agent_the_operator(
    ld: LoopDir, tmp_path: Path
) -> None:
    ref = ld.add()
    sessions = ld.state / "sessions"
    sessions.mkdir(parents=True, exist_ok=True)
    remover = ld.write("remover.py", REMOVER)
    out = tmp_path / "answer.json"
    subprocess.run(
        [sys.executable, str(remover), str(sessions / "s-0123456789ab.lock"), str(out),
         *ld.argv("reply", ref, "/approve", "--actor", "alice")],
        cwd=ld.root, env=ld.env(), start_new_session=True, timeout=60, check=True)
    code, err = json.loads(out.read_text(encoding="utf-8"))
    assert code == 2 and "runs inside agent session s-0123456789ab" in err


def test_an_operator_holding_an_unlocked_lock_file_open_is_still_the_operator(
    ld: LoopDir
) -> None:
    """A descriptor merely open on a lock file (a shell's `exec 9<file`) names no session:
    only a held lock does."""
    ref = ld.add()
    sessions = ld.state / "sessions"
    sessions.mkdir(parents=True, exist_ok=True)
    lock = sessions / "s-deadbeef0000.lock"
    lock.write_text("", encoding="utf-8")
    done = subprocess.run(
        ["bash", "-c", 'exec 9<"$0"; exec "$@"', str(lock),
         *ld.argv("reply", ref, "/approve", "--actor", "alice")],
        cwd=ld.root, env=ld.env(), capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "posted as alice" in done.stdout
