"""The ASGI app under real uvicorn and gunicorn's UvicornWorker: the same protocol, auth,
health and limits as `hooks serve`; and the warning a WSGI or ASGI app bound beyond
loopback with no token gives once (issue 20 item 11)."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn

from serving_helpers import gunicorn, post, raw
from the_loop.hooks.serving.asgi import ASGIApp, make_asgi_app
from the_loop.hooks.serving.wire import MAX_REQUEST
from the_loop.sdk.hooks import LifecycleHooks, SessionSpawn

CALL = {"jsonrpc": "2.0", "method": "session_spawn", "params": {"prompt": "p"}, "id": 1}
HOOK_FILE = """\
from the_loop.sdk.hooks import LifecycleHooks, SessionSpawn

class Shout(LifecycleHooks):
    def session_spawn(self, ctx: SessionSpawn) -> SessionSpawn:
        ctx.prompt = ctx.prompt.upper()
        return ctx
"""
RULES = """\
rules:
  - name: team-prefix
    on: session_spawn
    set:
      prompt_prefix: "[rules] "
"""


class Shout(LifecycleHooks):
    def session_spawn(self, ctx: SessionSpawn) -> SessionSpawn:
        ctx.prompt = ctx.prompt.upper()
        return ctx


@contextlib.contextmanager
def under_uvicorn(app: ASGIApp) -> Iterator[str]:
    """uvicorn (httptools + uvloop) serving `app` in a thread on a loopback port."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, http="httptools", loop="uvloop", log_level="warning",
                            access_log=False, lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def test_the_asgi_app_under_uvicorn_has_the_protocol_auth_health_and_limits(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ASGI_TOKEN", "s3cret")
    with under_uvicorn(make_asgi_app(Shout(), "ASGI_TOKEN")) as url:
        status, health = raw(url, b"GET /health HTTP/1.1\r\nHost: x")
        assert status == 200 and json.loads(health)["points"] == ["session_spawn"]
        assert post(url, CALL)[0] == 401
        assert post(url, CALL, {"Authorization": "bearer s3cret"}) == (
            200, {"jsonrpc": "2.0", "result": {"prompt": "P"}, "id": 1})
        auth = b"Authorization: Bearer s3cret\r\n"
        note = b'{"jsonrpc":"2.0","method":"session_spawn"}'
        assert raw(url, b"POST / HTTP/1.1\r\nHost: x\r\n" + auth
                   + b"Content-Length: %d" % len(note), note) == (204, b"")
        status, body = raw(url, b"POST / HTTP/1.1\r\nHost: x\r\n" + auth
                           + b"Content-Length: %d" % (MAX_REQUEST + 1))
        assert status == 413 and "the cap is" in json.loads(body)["error"]["message"]
        assert raw(url, b"PUT / HTTP/1.1\r\nHost: x\r\nContent-Length: 0")[0] == 405
        assert raw(url, b"POST / HTTP/1.1\r\nHost: x\r\n" + auth + b"Content-Length: 2\r\n"
                   b"Content-Length: 2", b"{}")[0] == 400


def test_gunicorn_with_the_uvicorn_worker_serves_a_policy_folder(tmp_path: Path) -> None:
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "rules.yaml").write_text(RULES, encoding="utf-8")
    with gunicorn({"THE_LOOP_HOOK_POLICY": str(tmp_path / "rules")}, tmp_path,
                  worker_class="uvicorn_worker.UvicornWorker", workers=1) as url:
        assert post(url, CALL) == (
            200, {"jsonrpc": "2.0", "result": {"prompt": "[rules] p"}, "id": 1})
    assert "Traceback" not in (tmp_path / "gunicorn.log").read_text()


@pytest.mark.parametrize("worker_class", ["sync", "uvicorn_worker.UvicornWorker"])
def test_an_app_bound_beyond_loopback_without_a_token_warns_once(
    tmp_path: Path, worker_class: str
) -> None:
    (tmp_path / "shout.py").write_text(HOOK_FILE, encoding="utf-8")
    with gunicorn({"THE_LOOP_HOOK_PATH": str(tmp_path / "shout.py")}, tmp_path,
                  worker_class=worker_class, workers=1, host="0.0.0.0") as url:
        for _ in range(3):
            assert post(url, CALL)[0] == 200
    log = (tmp_path / "gunicorn.log").read_text()
    assert log.count("WARNING: serving hooks on 0.0.0.0:") == 1
    assert "with no bearer token" in log and "THE_LOOP_HOOK_TOKEN_ENV" in log


def test_an_app_on_loopback_without_a_token_does_not_warn(tmp_path: Path) -> None:
    (tmp_path / "shout.py").write_text(HOOK_FILE, encoding="utf-8")
    with gunicorn({"THE_LOOP_HOOK_PATH": str(tmp_path / "shout.py")}, tmp_path,
                  workers=1) as url:
        assert post(url, CALL)[0] == 200
    assert "WARNING" not in (tmp_path / "gunicorn.log").read_text()


def test_the_asgi_app_under_uvicorn_logs_counts_and_reloads_with_the_watch(
    tmp_path: Path
) -> None:
    import urllib.request

    from the_loop.decisions.reads import read_points
    from the_loop.hooks.policy.files import revision
    from the_loop.hooks.serving.asgi import app_from_env

    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "rules.yaml").write_text(RULES, encoding="utf-8")
    first = revision(rules)
    log = tmp_path / "asgi.db"
    app = app_from_env({"THE_LOOP_HOOK_POLICY": str(rules), "THE_LOOP_HOOK_WATCH": "0.1",
                        "THE_LOOP_HOOK_DECISION_LOG": str(log)})

    def call(url: str) -> tuple[str, str]:
        req = urllib.request.Request(url, data=json.dumps(CALL).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.headers["X-Policy-Revision"], json.loads(resp.read())["result"]["prompt"]

    with under_uvicorn(app) as url:
        assert call(url) == (first, "[rules] p")
        (rules / "rules.yaml").write_text(RULES.replace("[rules]", "[v2]"), encoding="utf-8")
        second = revision(rules)
        deadline = time.monotonic() + 10
        while call(url)[0] != second:
            assert time.monotonic() < deadline, "the worker did not reload"
            time.sleep(0.05)
        assert call(url) == (second, "[v2] p")
        with urllib.request.urlopen(url + "metrics", timeout=10) as resp:
            metrics = resp.read().decode()
        assert "the_loop_served_reloads_total 1.0" in metrics
    # the app's lifespan shutdown wrote what was queued
    revisions = [json.loads(r)["revision"] for r in _records(log)]
    assert revisions[0] == first and revisions[-1] == second
    assert len(list(read_points(log))) == len(revisions)


def _records(log: Path) -> list[str]:
    import sqlite3

    with contextlib.closing(sqlite3.connect(log)) as conn:
        return [r for (r,) in conn.execute("SELECT record FROM decision_log ORDER BY id")]
