"""The HTTP promises of `HookServer` on httptools + uvloop (issue 22) and issue 20 item 11.

Pipelining, backpressure, a connection cap with its documented answer, 1,000 simultaneous
connects, slowloris, a hook that blocks (or runs its own event loop) without stalling other
callers, two Content-Length headers, the bearer scheme in any case, and one record per
refused request.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import selectors
import socket
import threading
import time
from typing import Any

import pytest

from serving_helpers import raw
from the_loop.hooks.serving.core import POOL_THREADS
from the_loop.hooks.serving.jsonrpc import CallRecord
from the_loop.hooks.serving.server import HookServer
from the_loop.sdk.hooks import LifecycleHooks, SessionSpawn

CALL = b'{"jsonrpc":"2.0","method":"session_spawn","params":{"prompt":"%s"},"id":%d}'


class Gate(LifecycleHooks):
    """Uppercases the prompt; a prompt of "block" waits for `release` first."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()

    def session_spawn(self, ctx: SessionSpawn) -> SessionSpawn:
        if ctx.prompt == "block":
            self.entered.set()
            self.release.wait(20)
        if ctx.prompt == "loop":
            ctx.prompt = asyncio.run(_shout("own loop"))
            return ctx
        ctx.prompt = ctx.prompt.upper()
        return ctx


async def _shout(text: str) -> str:
    await asyncio.sleep(0)
    return text.upper()


def request(prompt: str, rid: int, headers: bytes = b"") -> bytes:
    body = CALL % (prompt.encode(), rid)
    return (b"POST / HTTP/1.1\r\nHost: x\r\n" + headers
            + b"Content-Length: %d\r\n\r\n" % len(body) + body)


def ask(url: str, prompt: str, rid: int, headers: bytes = b"") -> tuple[int, bytes]:
    """One call on its own connection: (status, body)."""
    body = CALL % (prompt.encode(), rid)
    return raw(url, b"POST / HTTP/1.1\r\nHost: x\r\n" + headers
               + b"Content-Length: %d" % len(body), body)


def read_answers(sock: socket.socket, n: int) -> list[tuple[int, bytes]]:
    """Read `n` HTTP answers (framed by Content-Length) from `sock`."""
    buf = bytearray()
    at = 0
    out: list[tuple[int, bytes]] = []
    while len(out) < n:
        end = buf.find(b"\r\n\r\n", at)
        if end >= 0:
            head = buf[at:end].decode("latin-1")
            length = next((int(line.split(":", 1)[1]) for line in head.split("\r\n")
                           if line.lower().startswith("content-length:")), 0)
            if len(buf) >= end + 4 + length:
                out.append((int(head.split()[1]), bytes(buf[end + 4:end + 4 + length])))
                at = end + 4 + length
                continue
        del buf[:at]
        at = 0
        chunk = sock.recv(1 << 20)
        if not chunk:
            break
        buf += chunk
    return out


def test_pipelined_requests_are_answered_in_order_on_one_connection() -> None:
    with HookServer(Gate()) as server, socket.create_connection(
        ("127.0.0.1", server.port), timeout=10
    ) as sock:
        sock.sendall(b"".join(request(f"p{i}", i) for i in range(20)))
        answers = read_answers(sock, 20)
    assert [json.loads(body)["id"] for _, body in answers] == list(range(20))
    assert [json.loads(body)["result"]["prompt"] for _, body in answers] == [
        f"P{i}" for i in range(20)]


def test_answers_decided_at_the_head_wait_behind_a_call_still_running_in_the_pool() -> None:
    """A health check and a 404 pipelined behind a hook call that blocks: nothing is
    answered until the call returns, then all four in request order."""
    gate = Gate()
    with HookServer(gate) as server, socket.create_connection(
        ("127.0.0.1", server.port), timeout=10
    ) as sock:
        sock.sendall(request("block", 1) + b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
                     + request("two", 2) + b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n")
        assert gate.entered.wait(10)
        sock.settimeout(0.3)
        with pytest.raises(TimeoutError):
            sock.recv(1024)  # the health check did not overtake the running call
        sock.settimeout(10)
        gate.release.set()
        answers = read_answers(sock, 4)
    assert [status for status, _ in answers] == [200, 200, 200, 404]
    assert json.loads(answers[0][1])["result"] == {"prompt": "BLOCK"}
    assert b"session_spawn" in answers[1][1]
    assert json.loads(answers[2][1])["result"] == {"prompt": "TWO"}


def test_a_blocking_hook_does_not_stall_the_other_callers() -> None:
    gate = Gate()
    with HookServer(gate) as server:
        blocked: list[Any] = []
        waiter = threading.Thread(target=lambda: blocked.append(ask(server.url, "block", 1)))
        waiter.start()
        assert gate.entered.wait(10)
        started = time.monotonic()
        status, body = ask(server.url, "other", 2)
        assert (status, json.loads(body)["result"]) == (200, {"prompt": "OTHER"})
        assert time.monotonic() - started < 5
        assert blocked == []  # the first caller is still waiting on its hook
        gate.release.set()
        waiter.join(10)
    assert blocked[0][0] == 200


def test_shutdown_closes_a_connection_whose_hook_call_still_runs() -> None:
    """A hook call still runs in a pool thread: a shutdown ends its caller's connection at
    once, not when the hook returns (which may be never)."""
    gate = Gate()
    server = HookServer(gate)
    server.serve_in_thread()
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            sock.sendall(request("block", 1))
            assert gate.entered.wait(10)
            server.shutdown()
            with contextlib.suppress(ConnectionResetError):
                assert sock.recv(1024) == b""  # a timeout here: the connection stayed open
    finally:
        gate.release.set()
        server.shutdown()


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/self/fd")
def test_hook_calls_that_block_hold_no_file_descriptor_beyond_their_sockets() -> None:
    """100 callers whose hooks block: 64 run (the pool's threads), 36 queue. Only the event
    loop writes answers, on the connection's own socket: a running call holds no other
    file descriptor (one duplicate of its socket each, 64 in all, before issue 33), so a
    burst of callers costs the process its sockets and nothing more."""
    gate = Gate()
    n = 100
    with HookServer(gate) as server:
        before = len(os.listdir("/proc/self/fd"))
        socks = [socket.create_connection(("127.0.0.1", server.port), timeout=30)
                 for _ in range(n)]
        try:
            for i, sock in enumerate(socks):
                sock.sendall(request("block", i))
            deadline = time.monotonic() + 20
            while (sum(t.name.startswith("hook_") for t in threading.enumerate()) < POOL_THREADS
                   and time.monotonic() < deadline):
                time.sleep(0.05)
            time.sleep(0.3)  # the rest reach the queue
            opened = len(os.listdir("/proc/self/fd")) - before
            assert opened <= 2 * n + 8  # both ends of each connection, and a few
            gate.release.set()
            answers = [read_answers(sock, 1)[0][0] for sock in socks]
        finally:
            gate.release.set()
            for sock in socks:
                sock.close()
    assert answers == [200] * n


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts /proc/self/fd")
def test_callers_that_hang_up_leave_no_file_descriptor_open() -> None:
    """Answered from the pool, then hung up on: each connection's socket goes with it."""
    with HookServer(Gate()) as server:
        before = len(os.listdir("/proc/self/fd"))
        for i in range(100):
            with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
                sock.sendall(request("one", i) + request("two", i))
                assert [status for status, _ in read_answers(sock, 2)] == [200, 200]
        deadline = time.monotonic() + 5
        while len(os.listdir("/proc/self/fd")) > before + 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(os.listdir("/proc/self/fd")) <= before + 4


def test_a_connection_idle_after_an_answer_from_the_pool_is_closed() -> None:
    """Once the loop wrote an answer the pool handed back, the idle deadline runs."""
    with HookServer(Gate(), idle_timeout=0.3) as server, socket.create_connection(
        ("127.0.0.1", server.port), timeout=10
    ) as sock:
        sock.sendall(request("one", 1))
        (answer,) = read_answers(sock, 1)
        assert answer[0] == 200
        started = time.monotonic()
        assert sock.recv(1024) == b""
        assert time.monotonic() - started < 5


def test_a_hook_class_may_run_its_own_event_loop() -> None:
    """Hooks run in the pool's threads, never on the server's loop: asyncio.run works."""
    with HookServer(Gate()) as server:
        status, answer = ask(server.url, "loop", 3)
    assert (status, json.loads(answer)["result"]) == (200, {"prompt": "OWN LOOP"})


def test_two_content_length_headers_are_refused_with_400_and_recorded() -> None:
    records: list[CallRecord] = []
    with HookServer(Gate(), on_call=records.append) as server:
        status, body = raw(server.url, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
                                       b"Content-Length: 2", b"{}")
    assert status == 400
    assert "Content-Length" in json.loads(body)["error"]["message"]
    assert [(r.point, r.status) for r in records] == [("(request)", "http 400")]


@pytest.mark.parametrize("scheme", ["bearer", "BEARER", "Bearer"])
def test_the_bearer_scheme_is_accepted_in_any_case(scheme: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GATE_TOKEN", "s3cret")
    with HookServer(Gate(), token_env="GATE_TOKEN") as server:
        status, answer = ask(server.url, "p", 4, f"Authorization: {scheme} s3cret\r\n".encode())
    assert (status, json.loads(answer)["result"]) == (200, {"prompt": "P"})


def test_a_wrong_token_is_401_and_recorded_like_every_request(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GATE_TOKEN", "s3cret")
    records: list[CallRecord] = []
    with HookServer(Gate(), token_env="GATE_TOKEN", on_call=records.append) as server:
        for given in (b"", b"Authorization: Bearer nope\r\n"):
            assert ask(server.url, "p", 5, given)[0] == 401
    assert [(r.point, r.status, r.failure) for r in records] == [
        ("(request)", "http 401", "unauthorized: missing or wrong bearer token")] * 2


def test_a_request_head_over_64_kib_is_431_and_closed() -> None:
    with HookServer(Gate()) as server, socket.create_connection(
        ("127.0.0.1", server.port), timeout=10
    ) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nX-Big: ")
        answer = b""
        with contextlib.suppress(OSError):  # the server may hang up while we still send
            for _ in range(40):
                sock.sendall(b"a" * 4096)
                time.sleep(0.005)
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 431 ")
    assert b"request head over 65536 bytes" in answer


def test_a_caller_past_the_connection_cap_gets_503_and_retry_after() -> None:
    records: list[CallRecord] = []
    with HookServer(Gate(), max_connections=2, on_call=records.append) as server:
        held = [socket.create_connection(("127.0.0.1", server.port), timeout=10)
                for _ in range(2)]
        try:
            time.sleep(0.2)  # both accepted
            with socket.create_connection(("127.0.0.1", server.port), timeout=10) as third:
                answer = b""
                while chunk := third.recv(65536):
                    answer += chunk
            assert answer.startswith(b"HTTP/1.1 503 ")
            assert b"Retry-After: 1\r\n" in answer and b"Connection: close\r\n" in answer
            held[0].sendall(request("p", 6))
            assert read_answers(held[0], 1)[0][0] == 200  # those within the cap are served
        finally:
            for sock in held:
                sock.close()
    assert ("(request)", "http 503") in [(r.point, r.status) for r in records]


def test_1000_simultaneous_connects_are_all_answered() -> None:
    n = 1000
    with HookServer(Gate()) as server:
        sel = selectors.DefaultSelector()
        socks = []
        for _ in range(n):
            sock = socket.socket()
            sock.setblocking(False)
            sock.connect_ex(("127.0.0.1", server.port))
            socks.append(sock)
            sel.register(sock, selectors.EVENT_WRITE)
        answers: dict[socket.socket, bytes] = {}
        finished = 0
        deadline = time.monotonic() + 60
        try:
            while finished < n and time.monotonic() < deadline:
                for key, events in sel.select(1):
                    sock = key.fileobj  # type: ignore[assignment]
                    if events & selectors.EVENT_WRITE:
                        sock.send(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                        sel.modify(sock, selectors.EVENT_READ)
                        answers.setdefault(sock, b"")
                    else:
                        chunk = sock.recv(65536)
                        if chunk:
                            answers[sock] = answers.get(sock, b"") + chunk
                        else:
                            sel.unregister(sock)
                            answers[sock] = answers.get(sock, b"") + b"\0done"
                            finished += 1
        finally:
            for sock in socks:
                sock.close()
            sel.close()
    done = [a for a in answers.values() if a.endswith(b"\0done")]
    assert len(done) == n
    assert all(a.startswith(b"HTTP/1.1 200 ") for a in done)


def test_slowloris_connections_are_hung_up_on_and_others_are_served() -> None:
    with HookServer(Gate(), request_timeout=0.5) as server:
        slow = [socket.create_connection(("127.0.0.1", server.port), timeout=10)
                for _ in range(200)]
        try:
            for sock in slow:
                sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            started = time.monotonic()
            status, _ = ask(server.url, "p", 7)
            assert status == 200 and time.monotonic() - started < 2
            time.sleep(1.0)
            for sock in slow:
                sock.settimeout(5)
                assert sock.recv(100) == b""  # hung up on, nothing answered
        finally:
            for sock in slow:
                sock.close()


def test_a_caller_that_never_reads_is_no_longer_read_backpressure() -> None:
    """A flood of pipelined requests from a caller that reads nothing: the server stops
    reading once its answers back up, keeping at most its high-water mark buffered, and
    answers every request once the caller reads."""
    n = 30_000
    with HookServer(Gate()) as server, socket.create_connection(
        ("127.0.0.1", server.port), timeout=30
    ) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 16)
        flood = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n" * n
        sender = threading.Thread(target=sock.sendall, args=(flood,), daemon=True)
        sender.start()
        time.sleep(1.5)
        buffered = [c.transport.get_write_buffer_size() for c in list(server.conns)]
        assert buffered and max(buffered) <= 1 << 20
        answers = read_answers(sock, n)
        sender.join(30)
    assert len(answers) == n and {status for status, _ in answers} == {200}
