"""The wire format is plain JSON-RPC 2.0: a third-party client, other server stacks, gunicorn."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jsonrpcclient import Error, Ok, notification, parse, request
from werkzeug.serving import make_server
from werkzeug.wrappers import Request, Response

from serving_helpers import gunicorn as serve_with_gunicorn
from the_loop import __version__
from the_loop.events import EventLog
from the_loop.hooks.engine.chain import Chain, Link
from the_loop.hooks.engine.points import POINTS, SessionSpawn, WorkItem, WorkItemStart
from the_loop.hooks.executors.remote import RemoteExecutor
from the_loop.hooks.serving.server import HookServer
from the_loop.sdk.hooks import LifecycleHooks

ITEM = WorkItem(ref="local:acme/app#3", repository="acme/app", number=3, kind="pull-request")


class Prefix(LifecycleHooks):
    def session_spawn(self, ctx: SessionSpawn) -> SessionSpawn:
        ctx.prompt = f"[{ctx.work_item.repository}] {ctx.prompt}"
        return ctx


def post_json(url: str, payload: Any, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(
        url, data=json.dumps(payload).encode(), method="POST",
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read()


# ------------------------------------------------------- a third-party client library


def test_jsonrpcclient_calls_hookserver() -> None:
    with HookServer(Prefix()) as server:
        payload = request("session_spawn", params={"prompt": "go", "work_item": ITEM.to_json()})
        status, body = post_json(server.url, payload)
        assert status == 200
        answer = parse(json.loads(body))
        assert isinstance(answer, Ok)
        assert answer.result == {"prompt": "[acme/app] go"} and answer.id == payload["id"]

        status, body = post_json(server.url, request("work_item_start"))
        assert parse(json.loads(body)) == Ok(None, json.loads(body)["id"])

        status, body = post_json(server.url, request("work_item_started", params={}))
        error = parse(json.loads(body))
        assert isinstance(error, Error) and error.code == -32601
        assert "did you mean 'work_item_start'?" in error.message

        status, body = post_json(server.url, request("session_spawn", params=("by", "position")))
        error = parse(json.loads(body))
        assert isinstance(error, Error) and error.code == -32602

        status, body = post_json(server.url, notification("session_spawn", {"prompt": "x"}))
        assert (status, body) == (204, b"")


# ------------------------------------------------- the client against other stacks


def werkzeug_hook(req: Request) -> Response:
    """A hook server written against werkzeug alone, without the-loop's server code."""
    call = req.get_json()
    params = call["params"]
    result: Any = None
    if call["method"] == "session_spawn" and "urgent" in params["labels"]:
        result = {"prompt": params["prompt"].upper(), "reason": "shouted"}
    elif call["method"] == "work_item_start" and params["work_item"]["kind"] == "pull-request":
        result = {"proceed": False, "reason": f"{params['work_item']['ref']}: no PRs today"}
    return Response(json.dumps({"jsonrpc": "2.0", "result": result, "id": call["id"]}),
                    content_type="application/json")


@pytest.fixture
def werkzeug_url() -> Iterator[str]:
    server = make_server("127.0.0.1", 0, Request.application(werkzeug_hook), threaded=True)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/rpc"
    server.shutdown()
    server.server_close()
    thread.join(5)


def test_remote_executor_calls_a_werkzeug_hook_server(werkzeug_url: str) -> None:
    executor = RemoteExecutor(name="wz", url=werkzeug_url, timeout=5)
    log = EventLog()
    chain = Chain([Link("wz", executor, frozenset(POINTS))], log=log)
    try:
        out = chain.run(SessionSpawn(prompt="ship it", labels=["urgent"], work_item=ITEM))
        assert (out.prompt, out.reason) == ("SHIP IT", "shouted")
        start = chain.run(WorkItemStart(work_item=ITEM))
        assert start.proceed is False and start.reason == "local:acme/app#3: no PRs today"
        assert chain.run(SessionSpawn(prompt="calm")).prompt == "calm"
    finally:
        executor.close()
    assert log.of("hooks.failed") == []


# ------------------------------------------------------------- gunicorn, 2 workers


HOOK_FILE = """\
import os
from the_loop.sdk.hooks import LifecycleHooks, SessionSpawn, WorkItemStart

class Compliance(LifecycleHooks):
    def __init__(self, team):
        self.team = team

    def session_spawn(self, ctx: SessionSpawn) -> SessionSpawn:
        ctx.prompt = f"[{self.team} pid {os.getpid()}] {ctx.prompt}"
        return ctx

    def work_item_start(self, ctx: WorkItemStart) -> WorkItemStart:
        if "frozen" in ctx.labels:
            ctx.proceed = False
            ctx.reason = "the repository is frozen"
        return ctx
"""




@pytest.fixture
def gunicorn(tmp_path: Path, monkeypatch: Any) -> Iterator[str]:
    hook = tmp_path / "compliance.py"
    hook.write_text(HOOK_FILE, encoding="utf-8")
    monkeypatch.setenv("GUNI_TOKEN", "gunicorn-bearer-123")
    env = {"THE_LOOP_HOOK_PATH": str(hook), "THE_LOOP_HOOK_WITH": '{"team": "platform"}',
           "THE_LOOP_HOOK_TOKEN_ENV": "GUNI_TOKEN"}
    with serve_with_gunicorn(env, tmp_path) as url:
        with urllib.request.urlopen(url + "health", timeout=5) as resp:
            health = json.loads(resp.read())
        assert {k: health[k] for k in ("ok", "status", "server", "points")} == {
            "ok": True, "status": "ok", "server": f"the-loop {__version__}",
            "points": ["work_item_start", "session_spawn"]}
        # what an operator adds to it: the decision log each worker writes (a hook class
        # has no revision)
        assert health["revision"] == "" and health["decision_log"]["failed"] == 0
        yield url


def test_gunicorn_two_workers_driven_by_the_remote_executor(gunicorn: str) -> None:
    executor = RemoteExecutor(name="compliance", url=gunicorn, token_env="GUNI_TOKEN", timeout=5)
    log = EventLog()
    chain = Chain([Link("compliance", executor, frozenset(POINTS), required=True)], log=log)
    pids: set[str] = set()
    errors: list[str] = []

    def work(n: int) -> None:
        for i in range(10):
            out = chain.run(SessionSpawn(prompt=f"task {n}.{i}"))
            head, _, rest = out.prompt.partition("] ")
            if rest != f"task {n}.{i}" or not head.startswith("[platform pid "):
                errors.append(out.prompt)
            pids.add(head)

    try:
        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        refused = chain.run(WorkItemStart(labels=["frozen"]))
    finally:
        executor.close()
    assert errors == [] and log.of("hooks.failed") == []
    assert len(pids) >= 1
    assert refused.proceed is False and refused.reason == "the repository is frozen"


def test_gunicorn_refuses_a_call_without_the_token(gunicorn: str, monkeypatch: Any) -> None:
    monkeypatch.setenv("WRONG_TOKEN", "nope")
    executor = RemoteExecutor(name="compliance", url=gunicorn, token_env="WRONG_TOKEN", timeout=5)
    log = EventLog()
    chain = Chain([Link("compliance", executor, frozenset(POINTS), required=True)], log=log)
    try:
        out = chain.run(SessionSpawn(prompt="p"))
    finally:
        executor.close()
    assert out.proceed is False and "HTTP 401" in out.reason and "compliance" in out.reason
