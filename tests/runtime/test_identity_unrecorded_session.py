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

import pytest

from runtime_helpers import LoopDir
from the_loop.runtime.identity import agent_login

HOLDER = """\
import fcntl, json, os, subprocess, sys
lock_path, mode, out, *argv = sys.argv[1:]
fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
if mode == "remove":  # a hostile agent removes its lock file from the folder
    os.unlink(lock_path)
env = {k: v for k, v in os.environ.items() if k != "THE_LOOP_SESSION"}
# leader: only this session leader holds the lock; otherwise the command inherits it too.
done = subprocess.run(argv, env=env, capture_output=True, text=True,
                      pass_fds=() if mode == "leader" else (fd,))
with open(out, "w") as f:
    json.dump([done.returncode, done.stderr], f)
"""
SID = "s-0123456789ab"


def _reply_from_a_session(ld: LoopDir, mode: str) -> tuple[int, str]:
    """`reply REF /approve --actor alice` from inside a process session that holds SID's
    lock, with THE_LOOP_SESSION removed and no sessions row: (exit code, stderr)."""
    ref = ld.add()
    sessions = ld.state / "sessions"
    sessions.mkdir(parents=True, exist_ok=True)
    holder = ld.write("holder.py", HOLDER)
    out = ld.root / "answer.json"
    subprocess.run(
        [sys.executable, str(holder), str(sessions / f"{SID}.lock"), mode, str(out),
         *ld.argv("reply", ref, "/approve", "--actor", "alice")],
        cwd=ld.root, env=ld.env(), start_new_session=True, timeout=60, check=True)
    assert ld.query("SELECT id FROM sessions") == []  # the loop has recorded no session
    code, err = json.loads(out.read_text(encoding="utf-8"))
    return int(code), str(err)


@pytest.mark.parametrize("mode", ["inherit", "leader"],
                         ids=["inherited-lock", "leader-holds-lock"])
def test_issue11_rule2_an_agent_whose_session_is_not_recorded_yet_is_still_the_agent(
    ld: LoopDir, mode: str
) -> None:
    code, err = _reply_from_a_session(ld, mode)
    assert code == 2
    assert err == (f"the-loop: this command runs inside agent session {SID}: what it writes is "
                   f"the agent's ({agent_login(SID)}); --actor cannot name another person\n")


def test_issue11_rule2_removing_the_lock_file_does_not_make_an_agent_the_operator(
    ld: LoopDir
) -> None:
    code, err = _reply_from_a_session(ld, "remove")
    assert code == 2 and f"runs inside agent session {SID}" in err


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
