"""Hostile callers of `HookServer` (hostile review of issues 22 and 23), through the wire.

A caller that half-closes its socket after its request still gets its answer; callers that
flood pipelined requests and never read the answers are hung up on once their answers have
waited `request_timeout`, so they cannot hold every slot under the connection cap; a request
asking for a protocol upgrade gets exactly one answer; Ctrl-C and SIGTERM stop `hooks serve`
while a hook call blocks forever.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
import time
from pathlib import Path

import pytest
from test_hook_server_http import Gate, read_answers, request

from serving_helpers import Served, raw
from the_loop.hooks.serving.server import MAX_PIPELINED, SLICE, HookServer


def test_a_caller_that_half_closes_after_its_request_gets_its_answer() -> None:
    """`printf 'POST …' | nc -N host port` sends the request, then shuts its side down."""
    with HookServer(Gate()) as server, socket.create_connection(
        ("127.0.0.1", server.port), timeout=10
    ) as sock:
        sock.sendall(request("half", 1) + request("closed", 2))
        sock.shutdown(socket.SHUT_WR)
        answers = read_answers(sock, 2)
        assert sock.recv(100) == b""  # closed once both were answered
    assert [status for status, _ in answers] == [200, 200]
    assert b'"HALF"' in answers[0][1] and b'"CLOSED"' in answers[1][1]


def test_callers_that_never_read_their_answers_are_hung_up_on_and_free_their_slots() -> None:
    """Four callers fill the cap with pipelined requests and read nothing: once their answers
    have waited past `request_timeout` they are cut off and a new caller is served."""
    flood = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n" * 30_000
    with HookServer(Gate(), request_timeout=0.5, idle_timeout=0.5,
                    max_connections=4) as server:
        hogs = []
        for _ in range(4):
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            threading.Thread(target=_send_quietly, args=(sock, flood), daemon=True).start()
            hogs.append(sock)
        try:
            deadline = time.monotonic() + 8
            while len(server.conns) < 4 and time.monotonic() < deadline:
                time.sleep(0.01)  # every hog accepted
            while server.conns and time.monotonic() < deadline:
                time.sleep(0.1)
            assert not server.conns  # every hog was cut off
            status, body = raw(server.url, b"GET /health HTTP/1.1\r\nHost: x")
            assert status == 200 and b"session_spawn" in body
        finally:
            for sock in hogs:
                sock.close()


def _send_quietly(sock: socket.socket, data: bytes) -> None:
    with contextlib.suppress(OSError):  # hung up on: what the test expects
        sock.sendall(data)


def test_an_upgrade_request_gets_one_answer_and_the_connection_closes() -> None:
    with HookServer(Gate()) as server, socket.create_connection(
        ("127.0.0.1", server.port), timeout=10
    ) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\n"
                     b"Upgrade: websocket\r\n\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert data.count(b"HTTP/1.1 ") == 1
    assert data.startswith(b"HTTP/1.1 400 ") and b"upgrades are not supported" in data


BLOCKING_HOOK = """\
import threading
from the_loop.sdk.hooks import LifecycleHooks, SessionSpawn

class Stuck(LifecycleHooks):
    def session_spawn(self, ctx: SessionSpawn) -> SessionSpawn:
        threading.Event().wait()  # never returns
        return ctx
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_hooks_serve_stops_on_a_signal_while_a_hook_call_blocks_forever(
    tmp_path: Path, sig: int
) -> None:
    (tmp_path / "stuck.py").write_text(BLOCKING_HOOK, encoding="utf-8")
    served = Served(["hooks", "serve", "--path", "stuck.py", "--port", "0",
                     "--decision-log", "off"], tmp_path)
    port = int(served.url.rstrip("/").rsplit(":", 1)[1])
    stuck = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(2)]
    try:
        for n, sock in enumerate(stuck):
            sock.sendall(request("wait", n))
        status, _ = raw(served.url, b"GET /health HTTP/1.1\r\nHost: x")
        assert status == 200  # answered while both calls block
        time.sleep(0.3)
        code, err = served.stop(sig)  # raises TimeoutExpired when the process hangs
        assert code == 0 and "hook server stopped" in err and "Traceback" not in err
    finally:
        served.kill()
        for sock in stuck:
            sock.close()


def test_reads_full_of_pipelined_requests_queue_a_bounded_number() -> None:
    """A megabyte of pipelined requests from a caller that reads nothing, 256 KiB a read:
    at most a few hundred queue (each queued answer holds memory: 7,000 per read were
    1.6 MB a connection, so a few thousand such callers took gigabytes); all are answered
    once it reads."""
    n = 30_000
    flood = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n" * n
    with HookServer(Gate()) as server, socket.create_connection(
        ("127.0.0.1", server.port), timeout=30
    ) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)
        sender = threading.Thread(target=sock.sendall, args=(flood,), daemon=True)
        sender.start()
        time.sleep(1.5)
        (conn,) = list(server.conns)
        assert len(conn.queue) <= 2 * (MAX_PIPELINED + SLICE // 36)  # 36: one request
        answers = read_answers(sock, n)
        sender.join(30)
    assert len(answers) == n and {status for status, _ in answers} == {200}
