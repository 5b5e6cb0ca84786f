"""A hostile agent against the session locks, with ordinary file operations: the sessions
folder is its own user's, so it can open any lock file in it and flock one no one holds.

A session's lock is free the moment its harness ends, before the poller records the end:
an agent of another session that waits on it (`flock(1)`, a blocking flock) takes it then,
and the loop still sees that session live. Holding it does not make the agent that
session's: a lock names a recorded session only while the session's own harness holds it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from pathlib import Path

from test_agent_door_attacks import CLIENT, attacked

from runtime_helpers import alive, until

#: Run inside `mine`'s session: wait for `theirs`'s lock, then complete `other`'s node with
#: only that lock (its own session's descriptor closed), as a one-shot and through the door.
TAKE_OVER = '''\
import fcntl, subprocess, sys
fd = os.open(@LOCK@, os.O_RDWR)
open(@READY@, "w").close()
fcntl.flock(fd, fcntl.LOCK_EX)  # free once their harness has ended
argv = ["graph", "complete", "--work-item", @OTHER@]
alone = {k: v for k, v in os.environ.items()
         if k not in ("THE_LOOP_AGENT_DOOR", "THE_LOOP_SESSION")}
one_shot = subprocess.run([sys.executable, "-m", "the_loop", *argv], env=alone,
                          pass_fds=(fd,), capture_output=True, text=True, timeout=60)
door = subprocess.run([sys.executable, "-c", @CLIENT@, *argv], pass_fds=(fd,),
                      capture_output=True, text=True, timeout=60)
result = [f"{one_shot.returncode}\\0{one_shot.stdout}\\0{one_shot.stderr}", door.stdout]
'''


def test_an_agent_that_takes_an_ended_sessions_lock_cannot_act_on_that_sessions_item(
        tmp_path: Path) -> None:
    with attacked(tmp_path) as a:
        mine, other = a.running("First", "Second")
        theirs = str(a.ld.work(other)["session_id"])
        ready = tmp_path / "waiting"
        lock = a.ld.state / "sessions" / f"{theirs}.lock"
        code = (TAKE_OVER.replace("@LOCK@", repr(str(lock))).replace("@READY@", repr(str(ready)))
                .replace("@OTHER@", repr(other))
                .replace("@CLIENT@", repr(CLIENT + "print(send(connect(), line(sys.argv[1:])))")))
        slug = mine.rsplit("#", 1)[1]
        (a.ld.root / f"attack-1-{slug}.py").write_text(
            "import os\n" + code, encoding="utf-8")
        a.sent[slug] = 1
        until(ready.exists, timeout=60, what="the agent waiting on the other session's lock")
        # Their agent ends (its item is still at its agent node, its session current).
        (a.ld.root / f"attack-1-{other.rsplit('#', 1)[1]}.py").write_text(
            "import os\nos._exit(0)\n", encoding="utf-8")
        out = a.ld.root / f"result-1-{slug}.json"
        until(out.exists, timeout=90, what="the completions tried with their lock")
        said = json.loads(out.read_text(encoding="utf-8"))
        assert a.done_steps() == [], said
        for answer in said:
            assert answer.startswith("1\0\0") and f"is not {other}'s current session" in answer, \
                said


#: Run inside the first session's harness: close the session's lock (its harness's own
#: descriptor: the loop then records the session ended), wait for the test, then reply
#: with THE_LOOP_SESSION unset — still the harness, still leading its process session.
LET_GO = '''\
import subprocess, sys, time
if os.environ["THE_LOOP_SESSION"] != @FIRST@:
    time.sleep(120)  # a later session of the item: not this test's
for fd in os.listdir("/proc/self/fd"):
    with contextlib.suppress(OSError):
        if os.readlink(f"/proc/self/fd/{fd}").endswith(@FIRST@ + ".lock"):
            os.close(int(fd))
open(@CLOSED@, "w").close()
while not os.path.exists(@GO@):
    time.sleep(0.05)
alone = {k: v for k, v in os.environ.items() if k != "THE_LOOP_SESSION"}
done = subprocess.run([sys.executable, "-m", "the_loop", "reply", @REF@, "/approve",
                       "--actor", "alice"], env=alone, capture_output=True, text=True,
                      timeout=60)
result = [done.returncode, done.stdout, done.stderr]
'''


def test_a_harness_that_lets_go_of_its_lock_and_its_variable_is_still_its_sessions_agent(
        tmp_path: Path) -> None:
    """Its lock is what the loop asks whether the session runs, not what makes a process
    the session's: the harness still leads its process session, and that names it."""
    with attacked(tmp_path) as a:
        mine, = a.running("First")
        first = str(a.ld.work(mine)["session_id"])
        closed, go = tmp_path / "closed", tmp_path / "go"
        code = (LET_GO.replace("@FIRST@", repr(first)).replace("@CLOSED@", repr(str(closed)))
                .replace("@GO@", repr(str(go))).replace("@REF@", repr(mine)))
        (a.ld.root / f"attack-1-{mine.rsplit('#', 1)[1]}.py").write_text(
            "import contextlib, os\n" + code, encoding="utf-8")
        until(closed.exists, timeout=60, what="the harness letting go of its lock")
        until(lambda: a.ld.query("SELECT exited FROM sessions WHERE id=?", first)
              == [{"exited": 1}], timeout=60, what="the loop recording the session ended")
        go.touch()
        out = a.ld.root / f"result-1-{mine.rsplit('#', 1)[1]}.json"
        code_, said, err = until(lambda: out.exists() and json.loads(out.read_text("utf-8")),
                                 timeout=90, what="the harness's reply")
        assert code_ == 2, (said, err)
        assert f"this command runs inside agent session {first}" in err, err
        assert "--actor cannot name another person" in err, err


def test_stopping_an_item_ends_a_child_its_harness_put_in_a_process_group_of_its_own(
        tmp_path: Path) -> None:
    """A shell with job control, or a tool started with a process group of its own, leaves
    the harness's group but not its process session; Python closes the lock descriptor in
    a child by default. Stopping the item ends that child with its harness."""
    with attacked(tmp_path) as a:
        mine, = a.running("First")
        child = a.attack(mine, '''\
        import subprocess, sys
        result = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                                  process_group=0).pid
        ''')
        try:
            assert alive(child) and os.getpgid(child) == child
            a.ld.ok("reply", mine, "/stop", "--actor", "bob")
            until(lambda: a.ld.work(mine)["state"] == "stopped", timeout=60, what="the stop")
            until(lambda: not alive(child), timeout=30, what="the harness's child to end")
        finally:
            with contextlib.suppress(OSError):
                os.kill(child, signal.SIGKILL)
