"""The agent door (cli/door.py, agentdoor.py) against a hostile agent: a real `the-loop
poll`, its real socket, and an agent inside a real session that talks to the door with a
client of its own — forging its variables, leaving before it is answered, flooding it.

Each session's harness (`ATTACKER`) runs the attacks the test writes for it
(`attack-N-<item>.py`, executed inside the session's process, so they hold what an agent
holds: the session's lock, its process session, its environment) and writes down what each
found (`result-N-<item>.json`)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from runtime_helpers import LoopDir, until

#: The session's agent: runs each attack the test writes for its item, in order.
ATTACKER = '''\
import json, os, sys, time
sys.stdin.read()
root, slug = sys.argv[1], os.environ["THE_LOOP_WORK_ITEM"].rsplit("#", 1)[1]
n = 1
deadline = time.monotonic() + 110
while time.monotonic() < deadline:
    plan = os.path.join(root, f"attack-{n}-{slug}.py")
    if not os.path.exists(plan):
        time.sleep(0.05)
        continue
    ns = {"__name__": "attack"}
    try:
        exec(compile(open(plan, encoding="utf-8").read(), plan, "exec"), ns)
        result = ns.get("result")
    except BaseException as exc:
        result = {"raised": repr(exc)}
    out = os.path.join(root, f"result-{n}-{slug}.json")
    with open(out + ".tmp", "w", encoding="utf-8") as f:
        json.dump(result, f)
    os.replace(out + ".tmp", out)
    n += 1
'''

#: What every attack starts with: a hand-written client of the door.
CLIENT = '''\
import os, socket, sys
from the_loop import agentdoor

DOOR = os.environ["THE_LOOP_AGENT_DOOR"]

def line(argv, **claims):
    env = {"THE_LOOP_CLI_CONFIG": os.environ["THE_LOOP_CLI_CONFIG"], **claims}
    return b"\\0".join(os.fsencode(f) for f in agentdoor.fields(argv, os.getcwd(), env))

def connect():
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(30)
    sock.connect(DOOR)
    assert sock.recv(1) == agentdoor.GREETING
    return sock

def send(sock, data):
    try:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
    except BrokenPipeError:
        pass
    got = b""
    while chunk := sock.recv(65536):
        got += chunk
    return got.decode(errors="replace")
'''


class Attacked:
    """A loop whose items' agents run the test's attacks, under a real poller."""

    def __init__(self, tmp_path: Path, env: dict[str, str] | None = None) -> None:
        self.ld = ld = LoopDir(tmp_path)
        agent = tmp_path / "attacker.py"
        agent.write_text(ATTACKER, encoding="utf-8")
        ld.config.write_text(ld.config.read_text(encoding="utf-8").replace(
            f"command: [python3, {json.dumps(str(ld.script))}, {json.dumps(str(ld.recorded))}]",
            f"command: [{json.dumps(sys.executable)}, {json.dumps(str(agent))}, "
            f"{json.dumps(str(tmp_path))}]"), encoding="utf-8")
        self.env = env
        self.poller: subprocess.Popen[str] | None = None
        self.sent: dict[str, int] = {}

    def running(self, *titles: str) -> list[str]:
        refs = [self.ld.add(t) for t in titles]
        for ref in refs:
            self.ld.start(ref)
        self.poller = self.ld.popen("poll", "--interval", "0.1", "--quiet", env=self.env)
        for ref in refs:
            until(lambda r=ref: self.ld.work(r).get("state") == "running"  # type: ignore
                  and self.ld.work(r).get("session_id"), timeout=60, what="the session")
        return refs

    def attack(self, ref: str, code: str, timeout: float = 60) -> Any:
        """Run `code` (after CLIENT) inside `ref`'s session; what it set as `result`."""
        slug = ref.rsplit("#", 1)[1]
        n = self.sent[slug] = self.sent.get(slug, 0) + 1
        plan = self.ld.root / f"attack-{n}-{slug}.py"
        plan.with_suffix(".tmp").write_text(CLIENT + textwrap.dedent(code), encoding="utf-8")
        plan.with_suffix(".tmp").replace(plan)
        out = self.ld.root / f"result-{n}-{slug}.json"
        until(out.exists, timeout=timeout, what=f"attack {n} on {ref}")
        return json.loads(out.read_text(encoding="utf-8"))

    def done_steps(self) -> list[dict[str, Any]]:
        return self.ld.query("SELECT key, ref FROM steps WHERE kind='done'")

    def close(self) -> None:
        if self.poller is not None and self.poller.poll() is None:
            self.poller.send_signal(signal.SIGTERM)
            self.poller.communicate(timeout=30)
        for row in self.ld.query("SELECT pid FROM sessions"):
            with contextlib.suppress(OSError):
                os.killpg(int(row["pid"]), signal.SIGKILL)


@contextlib.contextmanager
def attacked(tmp_path: Path, env: dict[str, str] | None = None) -> Any:
    a = Attacked(tmp_path, env)
    try:
        yield a
    finally:
        a.close()


def test_a_caller_that_leaves_its_session_and_exits_before_it_is_answered_completes_nothing(
        tmp_path: Path) -> None:
    with attacked(tmp_path) as a:
        mine, other = a.running("First", "Second")
        code = '''\
        import socket, time
        other = OTHER
        pid = os.fork()
        if pid == 0:
            os.setsid()
            sock = connect()
            sock.sendall(line(["graph", "complete", "--work-item", other]))
            sock.shutdown(socket.SHUT_WR)
            os._exit(0)
        time.sleep(1.5)  # the door has answered no one by now; the child is a zombie
        with open(f"/proc/{pid}/stat") as f:
            result = {"state": f.read().rsplit(")", 1)[1].split()[0]}
        '''.replace("OTHER", repr(other))
        assert a.attack(mine, code) == {"state": "Z"}
        # The door is still answering (an item not at an agent node is refused in a sentence).
        said = a.attack(mine, '''\
        result = send(connect(), line(["graph", "complete", "--work-item", "local:acme/app#99"]))
        ''')
        assert "#99 is not at an agent node" in said, said
        assert a.done_steps() == []
        # Or it hands the connected socket to its parent (SCM_RIGHTS) and exits: the door
        # knows the child, which ended, and says so to whoever holds the socket.
        said = a.attack(mine, '''\
        import socket, time
        keep, give = socket.socketpair()
        pid = os.fork()
        if pid == 0:
            os.setsid()
            door = connect()
            socket.send_fds(give, [b"x"], [door.fileno()])
            os._exit(0)
        _, fds, _, _ = socket.recv_fds(keep, 1, 1)
        time.sleep(0.5)  # the child is a zombie now
        sock = socket.socket(fileno=fds[0])
        sock.settimeout(30)
        result = send(sock, line(["graph", "complete", "--work-item", OTHER]))
        '''.replace("OTHER", repr(other)))
        assert isinstance(said, str), said
        assert said.startswith("2\0\0") and "ended before it was answered" in said, said
        assert a.done_steps() == []


SECRET = "sekrit-0123456789abcdef"


def test_a_flood_of_bad_callers_leaves_the_door_answering_and_the_poller_polling(
        tmp_path: Path) -> None:
    """Garbage, silent callers holding connections, a huge line, a config path the poller
    cannot resolve, all at once: each is dropped or told, none holds the door for good nor
    stops the cycle, and no answer carries anything of the poller's environment."""
    with attacked(tmp_path, env={"ACME_TOKEN": SECRET}) as a:
        mine, = a.running("First")
        said = a.attack(mine, '''\
        import threading
        mine = os.environ["THE_LOOP_WORK_ITEM"]
        bad = [os.urandom(3000), b"the-loop-door 1", b"\\0" * 50, b"\\xff\\xfe" * 9,
               line(["ask", "x" * (3 << 20)]),
               line(["--config", "~no-such-user-here/c.yaml", "graph", "complete"]),
               line(["ask", "$ACME_TOKEN ${ACME_TOKEN}", "--work-item", "${ACME_TOKEN}"]),
               line(["graph", "complete", "--work-item", "local:acme/app#999"],
                    THE_LOOP_HOST_ID="other-host"),
               b"\\0".join([b"the-loop-door 1", b"/nonexistent\\xff", b"", b"", b"", b"",
                            b"", b"graph", b"complete"])]
        answers, held = [], []

        def one(data):
            try:
                answers.append((bad.index(data), send(connect(), data)))
            except OSError as exc:
                answers.append((bad.index(data), repr(exc)))

        def silent():
            try:
                held.append(connect())
            except OSError:
                pass

        threads = [threading.Thread(target=one, args=(d,)) for d in bad]
        threads += [threading.Thread(target=silent) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        for s in held:
            s.close()
        last = send(connect(), line(["graph", "complete", "--work-item", "local:acme/app#99"]))
        result = {"answers": answers, "last": last}
        ''', timeout=180)
        assert "#99 is not at an agent node" in said["last"], said["last"]  # the door's own answer
        for _, got in said["answers"]:
            assert SECRET not in got and "Traceback" not in got, got
            code = got.split("\0", 1)[0]
            assert code in ("-", "1", "2"), (_, got)  # a reason or a sentence each
        second = a.ld.add("Second")
        a.ld.start(second)  # the cycle still runs: it starts and launches the next item
        until(lambda: a.ld.work(second).get("session_id"), timeout=60, what="the next launch")
        assert a.poller is not None and a.poller.poll() is None
        assert a.done_steps() == []


def door_answer(door: str, ld: LoopDir, argv: list[str]) -> str:
    """A request from this test's process: a caller in no session (the operator's shell)."""
    import socket

    from the_loop import agentdoor

    data = b"\0".join(os.fsencode(f) for f in agentdoor.fields(
        argv, str(ld.root), {"THE_LOOP_CLI_CONFIG": str(ld.config)}))
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(30)
        sock.connect(door)
        assert sock.recv(1) == agentdoor.GREETING
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        got = b""
        while chunk := sock.recv(65536):
            got += chunk
    return got.decode()


def test_no_caller_of_the_door_moves_an_item_past_its_gate(tmp_path: Path) -> None:
    """The agent completes its node, leaving behind a child of its own (its own process
    session, the session's lock still open) that keeps asking the door to complete the
    node and to ask a question; at the gate, that child and a caller in no session at all
    are refused, and the item waits for a person."""
    with attacked(tmp_path) as a:
        mine, = a.running("First")
        out = tmp_path / "child.jsonl"
        door = a.attack(mine, '''\
        import json, time
        first = send(connect(), line(["graph", "complete", "--summary", "done"],
                                     THE_LOOP_WORK_ITEM=os.environ["THE_LOOP_WORK_ITEM"]))
        assert first.startswith("0\\0"), first
        if os.fork() == 0:
            os.setsid()
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                said = [send(connect(), line(argv)) for argv in (
                    ["graph", "complete", "--work-item", os.environ["THE_LOOP_WORK_ITEM"]],
                    ["ask", "approve?", "--work-item", os.environ["THE_LOOP_WORK_ITEM"]])]
                with open(OUT, "a", encoding="utf-8") as f:
                    f.write(json.dumps(said) + "\\n")
                if all("human gate" in s for s in said):
                    break
                time.sleep(0.2)
            os._exit(0)
        result = os.environ["THE_LOOP_AGENT_DOOR"]
        '''.replace("OUT", repr(str(out))))
        def at_gate() -> list[str] | None:
            tries = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines()] \
                if out.exists() else []
            return next((t for t in tries if all("human gate" in s for s in t)), None)

        refused = until(at_gate, timeout=90, what="the child refused at the gate")
        assert all(s.startswith("1\0\0") for s in refused), refused
        for argv in (["graph", "complete", "--work-item", mine],
                     ["ask", "approve?", "--work-item", mine], ["reply", mine, "/approve"]):
            got = door_answer(door, a.ld, argv)
            assert ("a human gate" in got) if argv[0] != "reply" else got.startswith("-\0"), got
        # The child was refused once the item was at the gate's node; the poller marks it
        # waiting at the gate in the same visit's next step: the item stays there.
        until(lambda: a.ld.work(mine)["state"] == "gate", timeout=30, what="the gate entered")
        assert len(a.done_steps()) == 1  # the agent's own, at its node


def test_completions_sent_at_once_through_the_door_and_as_a_one_shot_are_queued_once(
        tmp_path: Path) -> None:
    with attacked(tmp_path) as a:
        mine, = a.running("First")
        said = a.attack(mine, '''\
        import subprocess, sys, threading
        argv = ["graph", "complete", "--work-item", os.environ["THE_LOOP_WORK_ITEM"]]
        alone = {k: v for k, v in os.environ.items() if k != "THE_LOOP_AGENT_DOOR"}
        answers = []
        def door():
            answers.append(send(connect(), line(argv)))
        def one_shot():
            done = subprocess.run([sys.executable, "-m", "the_loop", *argv], env=alone,
                                  capture_output=True, text=True, timeout=60)
            answers.append(f"{done.returncode}\\0{done.stdout}\\0{done.stderr}")
        threads = [threading.Thread(target=f) for f in (door, one_shot, door, door, one_shot)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(90)
        result = answers
        ''', timeout=120)
        assert len(said) == 5 and any(s.startswith("0\0write done") for s in said), said
        until(lambda: a.ld.work(mine).get("state") == "gate", timeout=60, what="the gate")
        assert len(a.done_steps()) == 1, said


def test_the_door_follows_an_edited_config_and_says_what_is_wrong_with_a_broken_one(
        tmp_path: Path) -> None:
    with attacked(tmp_path) as a:
        mine, = a.running("First")
        probe = '''\
        result = send(connect(), line(["graph", "complete", "--work-item", "local:acme/app#99"]))
        '''
        text = a.ld.config.read_text(encoding="utf-8")
        assert "#99 is not at an agent node" in a.attack(mine, probe)
        a.ld.config.write_text(text + "# edited while the poller runs\n", encoding="utf-8")
        assert "#99 is not at an agent node" in a.attack(mine, probe)
        a.ld.config.write_text(text + "graph: [unclosed\n", encoding="utf-8")
        broken = a.attack(mine, probe)
        assert broken.split("\0")[0] in ("1", "2") and "Traceback" not in broken, broken
        assert "cli-config.yaml" in broken, broken  # names the file to mend
        a.ld.config.write_text(text, encoding="utf-8")
        assert "#99 is not at an agent node" in a.attack(mine, probe)
        assert a.poller is not None and a.poller.poll() is None


def test_an_agent_that_claims_another_live_sessions_id_cannot_act_on_that_sessions_item(
        tmp_path: Path) -> None:
    """A session's id is no credential: the agent can read the ids off the sessions folder's
    lock files (its own user's). Claiming another's, with that session's item, while it
    holds its own session's lock, names its own session: refused as acting on another item,
    through the door and as a one-shot alike."""
    with attacked(tmp_path) as a:
        mine, other = a.running("First", "Second")
        theirs = str(a.ld.work(other)["session_id"])
        said = a.attack(mine, '''\
        import subprocess, sys
        claims = {"THE_LOOP_SESSION": THEIRS, "THE_LOOP_WORK_ITEM": OTHER}
        argv = ["graph", "complete"]
        through = send(connect(), line(argv, **claims))
        alone = subprocess.run([sys.executable, "-m", "the_loop", *argv], capture_output=True,
                               text=True, timeout=60, env={
                                   **{k: v for k, v in os.environ.items()
                                      if k != "THE_LOOP_AGENT_DOOR"}, **claims})
        result = [through, f"{alone.returncode}\\0{alone.stdout}\\0{alone.stderr}"]
        '''.replace("THEIRS", repr(theirs)).replace("OTHER", repr(other)))
        assert said[0] == said[1], said
        assert said[0].startswith("1\0\0") and f"is not {other}'s current session" in said[0]
        assert a.done_steps() == []
