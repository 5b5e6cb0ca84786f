"""Hostile requests to a hook server get an answer, never a traceback, and it keeps serving.

Issue 11 rule 7 (a 5000-digit Content-Length, a 100k-deep body) on HookServer, the WSGI app
and gunicorn; issue 12 item 5 (a burst of 200 connections, none timing out on connect).
"""

from __future__ import annotations

import io
import json
import socket
import threading
from pathlib import Path

import pytest
from werkzeug.test import Client

from serving_helpers import gunicorn, post, raw
from the_loop.hooks.serving.server import BACKLOG, HookServer
from the_loop.hooks.serving.wsgi import make_wsgi_app
from the_loop.sdk.hooks import LifecycleHooks, SessionSpawn

DEEP = b'{"jsonrpc":"2.0","method":"session_spawn","id":1,"params":{"prompt":' + (
    b"[" * 100_000 + b"]" * 100_000) + b"}}"
HUGE_LENGTH = b"9" * 5000
CALL = {"jsonrpc": "2.0", "method": "session_spawn", "params": {"prompt": "p"}, "id": 7}

HOOK_FILE = """\
from the_loop.sdk.hooks import LifecycleHooks, SessionSpawn

class Shout(LifecycleHooks):
    def session_spawn(self, ctx: SessionSpawn) -> SessionSpawn:
        ctx.prompt = ctx.prompt.upper()
        return ctx
"""


class Shout(LifecycleHooks):
    def session_spawn(self, ctx: SessionSpawn) -> SessionSpawn:
        ctx.prompt = ctx.prompt.upper()
        return ctx


def still_serves(url: str) -> None:
    assert post(url, CALL) == (200, {"jsonrpc": "2.0", "result": {"prompt": "P"}, "id": 7})


def test_a_5000_digit_content_length_is_413_and_the_server_keeps_serving() -> None:
    with HookServer(Shout()) as server:
        status, body = raw(server.url, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: "
                           + HUGE_LENGTH)
        assert status == 413
        error = json.loads(body)["error"]
        assert error["code"] == -32600
        assert error["message"] == ("a Content-Length too long to read; the cap is 1048576 "
                                    "bytes")
        still_serves(server.url)


def test_a_100k_deep_body_is_a_parse_error_and_the_server_keeps_serving() -> None:
    with HookServer(Shout()) as server:
        status, body = raw(server.url, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: "
                           + str(len(DEEP)).encode(), DEEP)
        assert status == 200
        assert json.loads(body)["error"] == {
            "code": -32700, "message": "parse error: the body is nested too deep to read"}
        still_serves(server.url)


def test_a_5000_digit_integer_in_the_body_is_a_parse_error_naming_it() -> None:
    body = (b'{"jsonrpc":"2.0","method":"session_spawn","id":1,"params":{"work_item":'
            b'{"number":' + b"7" * 5000 + b"}}}")
    with HookServer(Shout()) as server:
        status, answer = raw(server.url, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: "
                             + str(len(body)).encode(), body)
        assert status == 200
        assert json.loads(answer)["error"] == {
            "code": -32700,
            "message": "parse error: the body holds an integer too long to read"}
        still_serves(server.url)


@pytest.mark.parametrize(("length", "status", "says"), [
    (HUGE_LENGTH.decode(), 413, "a Content-Length of 5000 digits"),
    ("١٢", 400, "bad Content-Length"),  # Arabic-Indic digits: str.isdigit() says yes
    ("-1", 400, "bad Content-Length"),
])
def test_the_wsgi_app_answers_a_bad_content_length_with_a_json_error(
    length: str, status: int, says: str
) -> None:
    got: list[str] = []
    environ = {"REQUEST_METHOD": "POST", "PATH_INFO": "/", "CONTENT_LENGTH": length,
               "wsgi.input": io.BytesIO(b"{}")}
    body = b"".join(make_wsgi_app(Shout())(environ, lambda s, h: got.append(s)))  # type: ignore[arg-type]
    assert got[0].startswith(f"{status} ")
    assert says in json.loads(body)["error"]["message"]


def test_the_wsgi_app_answers_a_100k_deep_body_with_a_parse_error() -> None:
    answer = Client(make_wsgi_app(Shout())).post("/", data=DEEP)
    assert answer.json["error"]["code"] == -32700


def test_gunicorn_answers_both_and_keeps_serving(tmp_path: Path) -> None:
    (tmp_path / "shout.py").write_text(HOOK_FILE, encoding="utf-8")
    with gunicorn({"THE_LOOP_HOOK_PATH": str(tmp_path / "shout.py")}, tmp_path) as url:
        status, _ = raw(url, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: " + HUGE_LENGTH)
        assert 400 <= status < 500  # gunicorn refuses the header itself
        status, body = raw(url, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: "
                           + str(len(DEEP)).encode(), DEEP)
        assert (status, json.loads(body)["error"]["code"]) == (200, -32700)
        still_serves(url)
    assert "Traceback" not in (tmp_path / "gunicorn.log").read_text()


def test_200_simultaneous_connections_all_connect_and_are_answered() -> None:
    """With socketserver's default backlog of 5, 31-78 of these timed out on connect."""
    assert BACKLOG >= 128
    n = 200
    with HookServer(Shout()) as server:
        barrier = threading.Barrier(n)
        failures: list[str] = []
        answered: list[int] = []
        lock = threading.Lock()

        def one(i: int) -> None:
            barrier.wait(timeout=30)
            try:
                # The connect timeout is shorter than the first SYN retransmission a full
                # accept queue causes (1 s), so a dropped SYN shows up as a failure here.
                sock = socket.create_connection((server.host, server.port), timeout=0.9)
            except OSError as exc:
                with lock:
                    failures.append(f"{i}: {exc!r}")
                return
            with sock:
                sock.settimeout(30)
                sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                data = b""
                while chunk := sock.recv(4096):
                    data += chunk
            with lock:
                answered.append(int(data.split()[1]))

        threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert failures == []
        assert answered == [200] * n


