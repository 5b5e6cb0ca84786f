"""The agent door (issue 34.3): a running poller answers its sessions' `graph complete` and
`ask` over a Unix socket (the_loop/agentdoor.py, cli/door.py), as the one-shot would.

Real `the-loop poll` daemons and harness processes, a real door on a real socket, the
one-shot run beside it on the same loop to compare what each says."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest

from runtime_helpers import LoopDir, until
from the_loop import agentdoor
from the_loop.cli import door as door_mod
from the_loop.cli.door import Door
from the_loop.cli.loop import ask_line, complete_line
from the_loop.cli.quick import agent_args

ANSWER = "Admins first, then everyone."

#: A harness whose agent asks its question in its first session and completes its node in
#: the next (the one the answer resumes), each command under `-X importtime`; it writes
#: down what each printed, whether it opened a database, and the door it was given.
DOOR_AGENT = '''\
import json, os, subprocess, sys
prompt = sys.stdin.read()
line = ["graph", "complete", "--summary", "drafted"] if "Admins first" in prompt else [
    "ask", "Which users first?"]
done = subprocess.run([sys.executable, "-X", "importtime", "-m", "the_loop", *line],
                      capture_output=True, text=True, timeout=60)
err = done.stderr.splitlines()
modules = [l.rsplit("|", 1)[1].strip() for l in err if l.startswith("import time:")][1:]
with open(sys.argv[1], "a", encoding="utf-8") as f:
    f.write(json.dumps({"line": line, "code": done.returncode, "out": done.stdout,
                        "err": [l for l in err if not l.startswith("import time:")],
                        "sqlite3": "sqlite3" in modules, "yaml": "yaml" in modules,
                        "door": os.environ.get("THE_LOOP_AGENT_DOOR", "")}) + "\\n")
'''


def lines() -> dict[str, Any]:
    return {"ask": ask_line, "graph": complete_line}


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()] \
        if path.exists() else []


def test_a_sessions_ask_and_graph_complete_are_answered_by_its_poller_as_the_one_shot_says(
        tmp_path: Path) -> None:
    ld = LoopDir(tmp_path)
    agent = tmp_path / "door_agent.py"
    agent.write_text(DOOR_AGENT, encoding="utf-8")
    out = tmp_path / "agent.jsonl"
    text = ld.config.read_text(encoding="utf-8").replace(
        f"command: [python3, {json.dumps(str(ld.script))}, {json.dumps(str(ld.recorded))}]",
        f"command: [{json.dumps(sys.executable)}, {json.dumps(str(agent))}, "
        f"{json.dumps(str(out))}]")
    ld.config.write_text(text, encoding="utf-8")
    ref = ld.add()
    ld.start(ref)
    poller = ld.popen("poll", "--interval", "0.1", "--quiet")
    try:
        until(lambda: ld.work(ref).get("state") == "waiting" and len(records(out)) == 1,
              timeout=60, what="the agent's question")
        until(lambda: any("Which users first?" in c for c in ld.comments(ref)), timeout=30,
              what="the question posted")
        ld.cli("reply", ref, ANSWER, "--actor", "alice")
        until(lambda: ld.work(ref).get("state") == "gate", timeout=60, what="the gate")
        ld.cli("reply", ref, "/approve", "--actor", "alice")
        until(lambda: ld.work(ref).get("state") == "done", timeout=60, what="the item done")
    finally:
        poller.send_signal(signal.SIGTERM)
        poller.communicate(timeout=30)
    asked, completed = records(out)
    assert (asked["code"], asked["out"], asked["err"]) == (
        0, f"asked: the loop posts your question on {ref}; answers resume this work\n", [])
    assert (completed["code"], completed["out"], completed["err"]) == (
        0, f"write done; the loop moves {ref} on\n", [])
    assert asked["door"] and asked["door"] == completed["door"]
    # Answered by the poller: neither process opened the database nor read the config.
    assert not any(r["sqlite3"] or r["yaml"] for r in (asked, completed))
    questions = [c for c in ld.comments(ref) if "Which users first?" in c]
    assert len(questions) == 1
    assert ld.item(ref)["state"] == "closed"
    # The poller stopped: its door is gone, folder and all.
    assert not Path(asked["door"]).parent.exists()


@pytest.fixture
def running(tmp_path: Path) -> Any:
    """A loop whose item is at its agent node with a live session, and a door on it."""
    ld = LoopDir(tmp_path, harness="sleep")
    ref = ld.add()
    ld.start(ref)
    ld.cli("poll", "--once")
    until(lambda: ld.work(ref).get("state") == "running" and ld.work(ref).get("session_id"),
          timeout=30, what="the session")
    door = Door.open(ld.config, lines(), agent_args)
    assert door is not None
    try:
        yield ld, ref, door
    finally:
        door.close()
        for row in ld.query("SELECT pid FROM sessions"):
            with contextlib.suppress(OSError):
                os.killpg(int(row["pid"]), signal.SIGKILL)


def send(path: str, data: bytes, *, close: bool = True) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(30)
        sock.connect(path)
        assert sock.recv(1) == agentdoor.GREETING
        with contextlib.suppress(BrokenPipeError):  # answered before it read all
            sock.sendall(data)
            if close:
                sock.shutdown(socket.SHUT_WR)
        got = b""
        while chunk := sock.recv(65536):
            got += chunk
        return got


def request(ld: LoopDir, argv: list[str], **claims: str) -> bytes:
    env = {"THE_LOOP_CLI_CONFIG": str(ld.config), **claims}
    return b"\0".join(os.fsencode(f) for f in agentdoor.fields(argv, str(ld.root), env))


def answer(got: bytes) -> tuple[int, str, str]:
    code, out, err = got.split(b"\0")
    return int(code), out.decode(), err.decode()


@pytest.mark.parametrize("argv", [["graph", "complete"], ["ask", "Which users first?"]])
def test_a_request_naming_another_session_is_refused_as_the_one_shot_refuses_it(
        running: Any, argv: list[str]) -> None:
    ld, ref, door = running
    claims = {"THE_LOOP_SESSION": "s-not-this-one", "THE_LOOP_WORK_ITEM": ref}
    through = answer(send(door.path, request(ld, argv, **claims)))
    alone = ld.cli(*argv, env=claims, ok=False)
    assert through == (alone.returncode, alone.stdout, alone.stderr)
    assert through[0] != 0 and "is not local:acme/app#1's current session" in through[2]
    assert ld.work(ref)["state"] == "running"  # nothing queued


def test_a_request_for_an_item_not_at_an_agent_node_is_refused_as_the_one_shot_refuses_it(
        running: Any) -> None:
    ld, _, door = running
    other = ld.add("Another item")
    argv = ["graph", "complete", "--work-item", other]
    through = answer(send(door.path, request(ld, argv)))
    alone = ld.cli(*argv, ok=False)
    assert through == (alone.returncode, alone.stdout, alone.stderr)
    assert "is not at an agent node (not armed)" in through[2]


def test_the_door_declines_another_config_and_lines_it_does_not_take(
        running: Any, tmp_path: Path) -> None:
    """The poller's environment holds its secrets: a config the caller names could put them
    in a URL, so only the poller's own is served; the caller runs anything else itself."""
    ld, _, door = running
    other = tmp_path / "other.yaml"
    other.write_text(ld.config.read_text(encoding="utf-8"), encoding="utf-8")
    for argv, claims in [
            (["--config", str(other), "graph", "complete"], {}),
            (["graph", "complete"], {"THE_LOOP_CLI_CONFIG": str(other)}),
            (["ask", "--", "Q?"], {}), (["graph", "complete", "--summ", "x"], {}),
            (["items", "list"], {}), (["reply", "1", "/approve"], {})]:
        got = send(door.path, request(ld, argv, **claims))
        assert got.split(b"\0")[0] == b"-", (argv, got)
    assert door.answered == 6


def test_garbage_a_huge_line_and_a_silent_caller_cost_the_door_nothing(
        running: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    ld, ref, door = running
    monkeypatch.setattr(door_mod, "READ_SECONDS", 0.5)
    assert send(door.path, os.urandom(5000)).split(b"\0")[0] == b"-"
    huge = send(door.path, request(ld, ["ask", "x" * (3 << 20)]))
    assert answer(huge)[:2] == (2, "") and "over 2 MiB" in answer(huge)[2]
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as silent:
        silent.connect(door.path)  # sends nothing, never closes its side
        claims = {"THE_LOOP_SESSION": "s-not-this-one", "THE_LOOP_WORK_ITEM": ref}
        later = answer(send(door.path, request(ld, ["graph", "complete"], **claims)))
    assert later[0] != 0 and "current session" in later[2]  # answered after the drop


def test_a_process_of_another_user_cannot_reach_the_door(running: Any) -> None:
    _, _, door = running
    assert stat.S_IMODE(os.stat(door.folder).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(door.path).st_mode) == 0o600
    python = "/usr/bin/python3"  # one another user may run (the venv's may be in /root)
    if os.getuid() != 0 or not os.access(python, os.X_OK):
        pytest.skip("needs root and /usr/bin/python3 to run a process as another user")
    probe = ("import socket, sys\ns = socket.socket(socket.AF_UNIX)\ntry:\n"
             "    s.connect(sys.argv[1])\nexcept PermissionError:\n    print('refused')\n")
    done = subprocess.run([python, "-I", "-c", probe, door.path], capture_output=True,
                          text=True, timeout=30, preexec_fn=lambda: os.setuid(65534),
                          check=False, cwd="/")
    assert done.stdout.strip() == "refused", done.stderr


def _dies_after_reading(path: str, *, greets: bool = True) -> threading.Thread:
    """A door that takes one line and goes away without answering (its poller killed);
    with greets=False, one that never gets to the caller (busy with others), then goes."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            if greets:
                conn.sendall(agentdoor.GREETING)
            conn.settimeout(agentdoor.GREETING_TIMEOUT + 5)
            with contextlib.suppress(OSError):
                while conn.recv(65536):
                    pass
        server.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def test_a_door_gone_before_answering_costs_a_completion_nothing_and_a_question_a_sentence(
        running: Any, tmp_path: Path) -> None:
    """A completion is keyed by its node's epoch, so the command sends it again as a
    one-shot; a second question would be asked twice, so the command says what happened."""
    ld, ref, _ = running
    gone = str(tmp_path / "gone.sock")
    thread = _dies_after_reading(gone)
    env = {agentdoor.DOOR_ENV: gone, "THE_LOOP_WORK_ITEM": ref}
    completed = subprocess.run(ld.argv("graph", "complete"), cwd=ld.root, env=ld.env(env),
                               capture_output=True, text=True, timeout=60, check=False)
    thread.join(10)
    assert (completed.returncode, completed.stdout) == (0, f"write done; the loop moves {ref} on\n")
    assert len(ld.query("SELECT key FROM steps WHERE kind='done'")) == 1
    os.unlink(gone)
    thread = _dies_after_reading(gone)
    asked = subprocess.run(ld.argv("ask", "Which users first?"), cwd=ld.root, env=ld.env(env),
                           capture_output=True, text=True, timeout=60, check=False)
    thread.join(10)
    assert asked.returncode == 1 and "your question may have been queued" in asked.stderr
    assert "Traceback" not in asked.stderr


def test_a_door_too_busy_to_greet_leaves_the_command_to_run_as_a_one_shot_once(
        running: Any, tmp_path: Path) -> None:
    """Nothing is sent before the greeting, so a command that gives up waiting for it runs
    the one-shot with no copy of its line left for the door to run later."""
    ld, ref, _ = running
    busy = str(tmp_path / "busy.sock")
    thread = _dies_after_reading(busy, greets=False)
    env = {agentdoor.DOOR_ENV: busy, "THE_LOOP_WORK_ITEM": ref}
    asked = subprocess.run(ld.argv("ask", "Which users first?"), cwd=ld.root,
                           env=ld.env(env), capture_output=True, text=True, timeout=60,
                           check=False)
    thread.join(30)
    assert (asked.returncode, asked.stdout) == (
        0, f"asked: the loop posts your question on {ref}; answers resume this work\n")
    assert len(ld.query("SELECT key FROM steps WHERE kind='question'")) == 1


def test_with_no_one_at_the_door_the_command_runs_as_the_one_shot(running: Any,
                                                                  tmp_path: Path) -> None:
    ld, ref, _ = running
    env = {"THE_LOOP_WORK_ITEM": ref}
    for door in (str(tmp_path / "missing.sock"), str(tmp_path)):  # nothing; not a socket
        done = subprocess.run(ld.argv("graph", "complete"), cwd=ld.root,
                              env=ld.env({**env, agentdoor.DOOR_ENV: door}),
                              capture_output=True, text=True, timeout=60, check=False)
        assert (done.returncode, done.stdout, done.stderr) == (
            0, f"write done; the loop moves {ref} on\n", "")


def test_a_killed_pollers_door_is_removed_by_the_next_one_and_a_live_ones_is_not(
        tmp_path: Path) -> None:
    def door_folder(live: bool) -> tuple[str, socket.socket]:
        folder = tempfile.mkdtemp(prefix=door_mod.PREFIX)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(os.path.join(folder, "door.sock"))
        if live:
            sock.listen(1)
        else:
            sock.close()  # its poller was killed: the file stays, no one answers
        old = os.stat(folder).st_mtime - door_mod.STALE_SECONDS - 5
        os.utime(folder, (old, old))
        return folder, sock

    dead, _ = door_folder(live=False)
    live, listening = door_folder(live=True)
    ld = LoopDir(tmp_path)
    door = Door.open(ld.config, lines(), agent_args)
    assert door is not None
    try:
        assert not os.path.exists(dead)
        assert os.path.exists(live) and os.path.exists(door.folder)
    finally:
        door.close()
        listening.close()
        shutil.rmtree(live, ignore_errors=True)


def test_a_caller_whose_process_the_door_cannot_read_runs_its_command_itself(
        running: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A one-shot reads its own session lock (/proc/self/fd); a caller that made its
    process unreadable to the poller (prctl PR_SET_DUMPABLE 0, as a non-root poller sees it)
    is not judged without it: the door declines, and the command runs the one-shot."""
    ld, ref, door = running
    listdir = os.listdir

    def unreadable(path: Any) -> Any:
        if str(path) == f"/proc/{os.getpid()}/fd":
            raise PermissionError(13, "Permission denied", str(path))
        return listdir(path)

    monkeypatch.setattr(os, "listdir", unreadable)
    claims = {"THE_LOOP_WORK_ITEM": ref}
    got = send(door.path, request(ld, ["graph", "complete"], **claims))
    assert got.split(b"\0")[:2] == [b"-", b"its process cannot be read"]
    assert ld.query("SELECT key FROM steps WHERE kind='done'") == []  # nothing run


#: A hostile agent: it drops the variables naming its session and item and asks the door to
#: complete the *other* item's node (retrying while that item is not yet at its node),
#: writes down what it was told, and stays (its session alive) until it is stopped.
CROSSING_AGENT = '''\
import json, os, subprocess, sys, time
sys.stdin.read()
mine = os.environ["THE_LOOP_WORK_ITEM"]
other = mine[:-1] + ("2" if mine.endswith("1") else "1")
env = {k: v for k, v in os.environ.items() if k not in ("THE_LOOP_SESSION", "THE_LOOP_WORK_ITEM")}
for _ in range(120):
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "the_loop", "graph",
                           "complete", "--work-item", other], env=env, capture_output=True,
                          text=True, timeout=60)
    said = [l for l in done.stderr.splitlines() if not l.startswith("import time:")]
    if not any("not at an agent node" in l for l in said):
        break
    time.sleep(0.25)
modules = [l.rsplit("|", 1)[1].strip() for l in done.stderr.splitlines()
           if l.startswith("import time:")]
with open(sys.argv[1], "a", encoding="utf-8") as f:
    f.write(json.dumps({"mine": mine, "other": other, "code": done.returncode,
                        "out": done.stdout, "err": said, "sqlite3": "sqlite3" in modules}) + "\\n")
time.sleep(120)
'''


def test_an_agent_that_hides_its_session_cannot_complete_another_items_node_through_the_door(
        tmp_path: Path) -> None:
    """The door names the caller from its process (the session lock it inherited), not
    from what it claims: an agent that unsets THE_LOOP_SESSION is still its session's, and
    another item's node is not its to complete."""
    ld = LoopDir(tmp_path)
    agent = tmp_path / "crossing_agent.py"
    agent.write_text(CROSSING_AGENT, encoding="utf-8")
    out = tmp_path / "crossing.jsonl"
    ld.config.write_text(ld.config.read_text(encoding="utf-8").replace(
        f"command: [python3, {json.dumps(str(ld.script))}, {json.dumps(str(ld.recorded))}]",
        f"command: [{json.dumps(sys.executable)}, {json.dumps(str(agent))}, "
        f"{json.dumps(str(out))}]"), encoding="utf-8")
    refs = [ld.add("First"), ld.add("Second")]
    for ref in refs:
        ld.start(ref)
    poller = ld.popen("poll", "--interval", "0.1", "--quiet")
    try:
        until(lambda: len(records(out)) == 2, timeout=90, what="both agents' attempts")
    finally:
        poller.send_signal(signal.SIGTERM)
        poller.communicate(timeout=30)
        for row in ld.query("SELECT pid FROM sessions"):
            with contextlib.suppress(OSError):
                os.killpg(int(row["pid"]), signal.SIGKILL)
    for attempt in records(out):
        assert attempt["code"] != 0 and not attempt["sqlite3"], attempt  # the door's answer
        assert any(f"is not {attempt['other']}'s current session" in line
                   for line in attempt["err"]), attempt
    assert ld.query("SELECT key FROM steps WHERE kind='done'") == []
