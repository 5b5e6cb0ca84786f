"""The agent's `graph complete` and `ask`, answered by the poller that launched its session.

An agent runs these two commands many times per work item. Run as a process of their own,
each starts Python, imports the runtime, opens the database and reads the config — and,
where hooks are declared, loads them all to say whether a daemon could start on them. The
poller that launched the session has done all of that already. So the poller opens a door:
a Unix socket in a folder of its own (mode 0700), named to each session it launches in
`THE_LOOP_AGENT_DOOR`. The command, seeing it, sends its line there and prints the answer;
this module is all it imports for that (no argparse, no sqlite3, no YAML).

The poller runs the very function the one-shot command runs (cli/loop.py), for the process
at the other end of the socket as the kernel names it, with the variables that process
claims — the trust a one-shot gives its own environment, no more — and with its own config
only: a line naming another config, a caller of another user, anything the door does not
take, is answered "run it yourself" and the command runs as a one-shot, as it does when
there is no door, or no one at it.

A door that goes away after it was sent a line (its poller stopped) has maybe done it: a
completion is keyed by the node's epoch, so it is sent again as a one-shot; a question is
not (a second one would be asked), so the command says so and exits 1.

The wire: the door greets (`GREETING`); the request is NUL-separated fields (`fields`),
ended by closing the writing side; the answer is `code NUL stdout NUL stderr`, or `-` NUL a
reason for "run it yourself". A command not greeted within `GREETING_TIMEOUT` (the door
busy with another caller) has sent nothing and runs as a one-shot.
"""

from __future__ import annotations

import os
import socket
import sys

#: The variable naming the door's socket in a session's environment.
DOOR_ENV = "THE_LOOP_AGENT_DOOR"
#: The first field of a request: the wire's version.
HELLO = "the-loop-door 1"
#: The variables a request carries from the caller's environment, in this order.
CLAIMS = ("THE_LOOP_CLI_CONFIG", "THE_LOOP_CONFIG_SNAPSHOT", "THE_LOOP_SESSION",
          "THE_LOOP_WORK_ITEM", "THE_LOOP_HOST_ID")
#: Bytes a request or an answer may hold at most (an agent's question is bounded below it).
MAX_BYTES = 2 << 20
#: The answer "run it yourself".
DECLINED = "-"
#: What the door says first, when it is ready to read a line: a command sends nothing
#: before it, so one that gives up waiting leaves nothing the door could run later.
GREETING = b"?"
#: Seconds a command waits to be greeted (the door answers one caller at a time) before it
#: runs as a one-shot.
GREETING_TIMEOUT = 2.0
#: Seconds a command waits for the door's answer (a database away is retried meanwhile).
ANSWER_TIMEOUT = 120.0


def fields(argv: list[str], cwd: str, env: dict[str, str] | os._Environ[str]) -> list[str]:
    """A request's fields: the hello, the working directory, the claims, then the line."""
    return [HELLO, cwd, *(env.get(name, "") for name in CLAIMS), *argv]


def ask(path: str, argv: list[str]) -> int | None:
    """Send `argv` through the door at `path` and print its answer; the exit code, or None
    when the command is to run as a one-shot (no door, no one at it, or declined)."""
    try:
        request = b"\0".join(os.fsencode(f) for f in fields(argv, os.getcwd(), os.environ))
    except (OSError, ValueError):  # a working directory gone; a NUL cannot be in argv
        return None
    if len(request) > MAX_BYTES:
        return None  # the door would refuse it: the one-shot says what is too long
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(ANSWER_TIMEOUT)
        try:
            sock.connect(path)
            sock.settimeout(GREETING_TIMEOUT)
            if sock.recv(1) != GREETING:
                return None  # no one at the door, or no one free: nothing was sent
        except OSError:
            return None
        sock.settimeout(ANSWER_TIMEOUT)
        try:
            try:
                sock.sendall(request)
                sock.shutdown(socket.SHUT_WR)
            except BrokenPipeError:
                pass  # it answered before reading it all: the answer is there to read
            answer = _read(sock)
        except OSError:
            answer = b""
    finally:
        sock.close()
    return _shown(answer, argv)


def _read(sock: socket.socket) -> bytes:
    parts: list[bytes] = []
    size = 0
    while size <= MAX_BYTES:
        got = sock.recv(65536)
        if not got:
            break
        parts.append(got)
        size += len(got)
    return b"".join(parts)


def _shown(answer: bytes, argv: list[str]) -> int | None:
    code, _, rest = answer.partition(b"\0")
    if code == DECLINED.encode():
        return None
    out, sep, err = rest.partition(b"\0")
    if not code.isdigit() or not sep:  # the door went away with the line: maybe done
        if "ask" not in argv:
            return None  # a completion is keyed by its node's epoch: sent again, once
        sys.stderr.write("the-loop: the poller answering this command stopped before it "
                         "answered; your question may have been queued: if the work item "
                         "does not show it, ask again\n")
        return 1
    for stream, text in ((sys.stdout, out), (sys.stderr, err)):
        if text:
            try:
                stream.write(os.fsdecode(text))
                stream.flush()
            except (AttributeError, OSError):
                pass
    return int(code)
