"""The server half: handle_request (the JSON-RPC protocol), HookServer and the WSGI app (R4.4)."""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from werkzeug.test import Client

from the_loop import __version__
from the_loop.errors import HooksConfigError
from the_loop.hooks.engine.executor import HookError
from the_loop.hooks.engine.points import POINTS, SPECS
from the_loop.hooks.serving.jsonrpc import handle_request
from the_loop.hooks.serving.server import HookServer
from the_loop.hooks.serving.wire import MAX_REQUEST
from the_loop.hooks.serving.wsgi import app_from_env, make_wsgi_app
from the_loop.sdk.hooks import (
    InputReceived,
    LifecycleHooks,
    PhaseChanged,
    SessionSpawn,
    WorkItemStart,
)


class Gate(LifecycleHooks):
    """Overrides three points; its behaviour is steered by the prompt it receives."""

    def session_spawn(self, ctx: SessionSpawn) -> Any:
        if ctx.prompt == "raise":
            raise ValueError("boom")
        if ctx.prompt == "hook-error":
            raise HookError("compliance database is down")
        if ctx.prompt == "exit":
            raise SystemExit(3)
        if ctx.prompt == "wrong-type":
            ctx.proceed = "no"  # type: ignore[assignment]
            return ctx
        if ctx.prompt == "dict":
            return {"prompt": "x"}
        if ctx.prompt == "other-context":
            return WorkItemStart()
        if ctx.prompt == "fact":
            ctx.loop = "changed"
            ctx.harness = "other"
            return ctx
        if ctx.prompt == "same":
            return ctx
        ctx.prompt = "ACME: " + ctx.prompt
        return ctx

    def work_item_start(self, ctx: WorkItemStart) -> WorkItemStart:
        ctx.proceed = False
        ctx.reason = f"{ctx.work_item.ref} is frozen"
        return ctx

    def input_received(self, ctx: InputReceived) -> None:
        return None


def call(method: Any, params: Any = None, rid: Any = 1, **extra: Any) -> Any:
    req: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "id": rid, **extra}
    if params is not None:
        req["params"] = params
    return json.loads(handle_request(Gate(), json.dumps(req).encode()))


def error_of(answer: Any) -> tuple[int, str]:
    assert set(answer) == {"jsonrpc", "error", "id"}, answer
    return answer["error"]["code"], answer["error"]["message"]


# ----------------------------------------------------------------------- handle_request


def test_r4_4_success_returns_only_the_changed_decisions() -> None:
    answer = call("session_spawn", {"prompt": "fix", "harness": "demo", "loop": "acme"})
    assert answer == {"jsonrpc": "2.0", "result": {"prompt": "ACME: fix"}, "id": 1}
    answer = call("work_item_start", {"work_item": {"ref": "local:a/b#1"}}, rid="abc")
    assert answer["result"] == {"proceed": False, "reason": "local:a/b#1 is frozen"}
    assert answer["id"] == "abc"


def test_r4_4_unchanged_answer_is_null() -> None:
    assert call("session_spawn", {"prompt": "same"})["result"] is None
    assert call("input_received", {"text": "hi"})["result"] is None


def test_r4_4_point_the_class_does_not_override_answers_null() -> None:
    """As a `path:` entry would: the base class passes the context through."""
    assert call("phase_changed", {"to_phase": "design"})["result"] is None


def test_r4_4_changed_facts_are_not_answered() -> None:
    assert call("session_spawn", {"prompt": "fact"})["result"] is None


@pytest.mark.parametrize("body", [b"{", b"\xff\xfe\x00", b"", b"NaN",
                                  b'{"jsonrpc":"2.0","method":"session_spawn","id":Infinity}',
                                  b"[" * 100_000])
def test_parse_error_is_32700(body: bytes) -> None:
    answer = json.loads(handle_request(Gate(), body))
    code, message = error_of(answer)
    assert code == -32700 and message.startswith("parse error")
    assert answer["id"] is None


@pytest.mark.parametrize(("req", "expected"), [
    ({"jsonrpc": "1.0", "method": "session_spawn", "id": 1}, '"jsonrpc" must be "2.0"'),
    ({"method": "session_spawn", "id": 1}, '"jsonrpc" must be "2.0"'),
    ({"jsonrpc": "2.0", "method": 7, "id": 1}, "method must be a string"),
    ({"jsonrpc": "2.0", "method": "session_spawn", "id": {"a": 1}}, "id must be"),
    ({"jsonrpc": "2.0", "method": "session_spawn", "id": 1.5}, "id must be"),
    ({"jsonrpc": "2.0", "method": "session_spawn", "id": True}, "id must be"),
    ({"jsonrpc": "2.0", "method": "session_spawn", "id": 1, "token": "x"},
     "unexpected member(s) token"),
    ("session_spawn", "expected an object, got a string"),
])
def test_invalid_request_is_32600(req: Any, expected: str) -> None:
    code, message = error_of(json.loads(handle_request(Gate(), json.dumps(req).encode())))
    assert code == -32600 and expected in message


@pytest.mark.parametrize("method", ["hooks.failed", "session_spwan", "rpc.discover", ""])
def test_unknown_point_is_32601_naming_the_valid_points(method: str) -> None:
    code, message = error_of(call(method, {}))
    assert code == -32601
    assert "Valid points: " + ", ".join(POINTS) in message


def test_unknown_point_suggests_the_closest() -> None:
    assert "did you mean 'session_spawn'?" in error_of(call("session_spwan"))[1]


@pytest.mark.parametrize(("params", "expected"), [
    (["fix"], "by name, not an array"),
    ("fix", "must be a JSON object"),
    ({"proceed": "yes"}, "session_spawn.proceed must be bool"),
    ({"respawn": 1}, "session_spawn.respawn must be bool"),
    ({"command": ["a", 1]}, "must be a list of strings"),
    ({"work_item": {"number": "7"}}, "number must be int"),
    ({"work_item": []}, "work_item: expected an object"),
])
def test_params_of_wrong_shape_or_type_are_32602(params: Any, expected: str) -> None:
    code, message = error_of(call("session_spawn", params))
    assert code == -32602 and expected in message


@pytest.mark.parametrize(("prompt", "expected"), [
    ("raise", "hook Gate raised at session_spawn: ValueError: boom"),
    ("hook-error", "hook Gate failed at session_spawn: compliance database is down"),
    ("exit", "hook Gate raised at session_spawn: the hook called sys.exit(3)"),
])
def test_hook_that_raises_is_32000(prompt: str, expected: str) -> None:
    assert error_of(call("session_spawn", {"prompt": prompt})) == (-32000, expected)


@pytest.mark.parametrize(("prompt", "expected"), [
    ("wrong-type", "decision 'proceed' must be bool (got 'no' that is str)"),
    ("dict", "returned dict; expected SessionSpawn or None"),
    ("other-context", "returned a WorkItemStart (work_item_start's context)"),
])
def test_hook_answering_the_wrong_thing_is_32603_never_coerced(prompt: str, expected: str) -> None:
    code, message = error_of(call("session_spawn", {"prompt": prompt}))
    assert code == -32603
    assert message.startswith("hook Gate answered wrongly at session_spawn: ")
    assert expected in message


def test_notification_runs_the_hook_and_answers_nothing() -> None:
    seen: list[str] = []

    class Telemetry(LifecycleHooks):
        def phase_changed(self, ctx: PhaseChanged) -> None:
            seen.append(ctx.to_phase)

    body = json.dumps({"jsonrpc": "2.0", "method": "phase_changed",
                       "params": {"to_phase": "design"}}).encode()
    assert handle_request(Telemetry(), body) == b""
    assert seen == ["design"]
    bad = json.dumps({"jsonrpc": "2.0", "method": "nope", "params": {}}).encode()
    assert handle_request(Telemetry(), bad) == b""


def test_batch_is_answered_in_order_without_notifications() -> None:
    batch = [
        {"jsonrpc": "2.0", "method": "session_spawn", "params": {"prompt": "a"}, "id": 1},
        {"jsonrpc": "2.0", "method": "session_spawn", "params": {"prompt": "b"}},
        {"jsonrpc": "2.0", "method": "nope", "id": 2},
        3,
    ]
    answers = json.loads(handle_request(Gate(), json.dumps(batch).encode()))
    assert [a["id"] for a in answers] == [1, 2, None]
    assert answers[0]["result"] == {"prompt": "ACME: a"}
    assert [a.get("error", {}).get("code") for a in answers] == [None, -32601, -32600]
    only_notes = [{"jsonrpc": "2.0", "method": "session_spawn"}] * 2
    assert handle_request(Gate(), json.dumps(only_notes).encode()) == b""


@pytest.mark.parametrize("batch", [[], [{"jsonrpc": "2.0", "method": "x", "id": 1}] * 51])
def test_empty_or_oversized_batch_is_one_32600(batch: list[Any]) -> None:
    code, message = error_of(json.loads(handle_request(Gate(), json.dumps(batch).encode())))
    assert code == -32600 and "batch" in message


# ----------------------------------------------------------- hypothesis: never raises


def assert_valid_answer(body: bytes, out: bytes) -> None:
    """`out` is a valid JSON-RPC 2.0 answer to `body` (b"" only for notifications)."""
    assert isinstance(out, bytes)
    if out == b"":
        doc = json.loads(body)
        reqs = doc if isinstance(doc, list) else [doc]
        assert reqs and all(isinstance(r, dict) and "id" not in r for r in reqs)
        return
    answer = json.loads(out)
    answers = answer if isinstance(answer, list) else [answer]
    assert answers
    for a in answers:
        assert isinstance(a, dict) and a["jsonrpc"] == "2.0" and "id" in a
        assert a["id"] is None or type(a["id"]) in (int, str)
        assert ("result" in a) != ("error" in a)
        assert set(a) <= {"jsonrpc", "result", "error", "id"}
        if "error" in a:
            assert type(a["error"]["code"]) is int and isinstance(a["error"]["message"], str)
        else:
            assert a["result"] is None or isinstance(a["result"], dict)


TEXT = st.text(alphabet=st.sampled_from(list('ab_.-:é🙂"\\ \n\x00\ud800')), max_size=12)
SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | TEXT
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=6,
)
FIELDS = sorted({f.name for spec in SPECS.values() for f in spec.fields} | {"nope"})
MISSING = object()
VALUES: list[Any] = [
    "raise", "hook-error", "exit", "wrong-type", "dict", "other-context", "fact", "same", "ok",
    "", "é\ud800\x00", True, False, 0, 7, -1, 2**70, 1.5, None, [], ["a", "b"], ["a", 1],
    {}, {"ref": "local:a/b#1"}, {"number": "7"}, {"number": 7, "kind": "pull-request"},
    {"evil": 1}, [[]], {"a": {"b": []}},
]


class Picks:
    """Turns hypothesis' bytes into choices from fixed tables (cheap to generate, shrinks
    well, and lands on valid requests often enough to reach the hook)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.at = 0

    def pick(self, options: list[Any]) -> Any:
        byte = self.data[self.at] if self.at < len(self.data) else 0
        self.at += 1
        return options[byte % len(options)]

    def request(self) -> Any:
        parts = {
            "jsonrpc": self.pick(["2.0"] * 8 + ["1.0", 2.0, None, MISSING]),
            "method": self.pick([*POINTS, *POINTS, "nope", "", 7, None, MISSING]),
            "params": self.pick(["object"] * 6 + ["array", "scalar", MISSING]),
            "id": self.pick([1, 2, "a", "", None, 2**70, MISSING, MISSING, 1.5, True, [1]]),
            self.pick(["", "x", "token"]): self.pick([MISSING] * 9 + [1]),
        }
        if parts["params"] == "object":
            params = {self.pick(FIELDS): self.pick(VALUES)
                      for _ in range(self.pick([0, 1, 2, 3, 4]))}
            if parts["method"] == "session_spawn" and self.pick([True, False]):
                params["prompt"] = self.pick(VALUES[:9])  # steer the hook's behaviour
            parts["params"] = params
        elif parts["params"] == "array":
            parts["params"] = [self.pick(VALUES)]
        elif parts["params"] == "scalar":
            parts["params"] = self.pick(VALUES)
        req = {k: v for k, v in parts.items() if v is not MISSING}
        return req if self.pick([True] * 15 + [False]) else self.pick(VALUES)

    def body(self) -> bytes:
        size = self.pick([None] * 6 + [0, 1, 2, 3, 4])
        doc = self.request() if size is None else [self.request() for _ in range(size)]
        return json.dumps(doc).encode()


def examples(n: int) -> Any:
    return settings(max_examples=n, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow])


def encode(value: Any) -> bytes:
    return json.dumps(value).encode()


@examples(800)
@given(st.binary(max_size=200))
def test_handle_request_never_raises_on_random_bytes(body: bytes) -> None:
    assert_valid_answer(body, handle_request(Gate(), body))


@examples(300)
@given(JSON.map(encode))
def test_handle_request_never_raises_on_random_json(body: bytes) -> None:
    assert_valid_answer(body, handle_request(Gate(), body))


@examples(1500)
@given(st.binary(min_size=8, max_size=60).map(lambda data: Picks(data).body()))
def test_handle_request_never_raises_on_near_valid_requests(body: bytes) -> None:
    assert_valid_answer(body, handle_request(Gate(), body))


# ------------------------------------------------------------------------- HookServer


@pytest.fixture
def served(monkeypatch: Any) -> Iterator[HookServer]:
    monkeypatch.setenv("SERVER_TOKEN", "s3cret-token")
    with HookServer(Gate(), token_env="SERVER_TOKEN") as server:
        yield server


def conn_to(server: HookServer) -> http.client.HTTPConnection:
    return http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)


def post(conn: http.client.HTTPConnection, body: bytes, token: str | None = "s3cret-token",
         **headers: str) -> tuple[int, dict[str, str], bytes]:
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    conn.request("POST", "/", body=body, headers={"Content-Type": "application/json", **headers})
    resp = conn.getresponse()
    data = resp.read()
    return resp.status, dict(resp.getheaders()), data


REQUEST = json.dumps({"jsonrpc": "2.0", "method": "session_spawn", "params": {"prompt": "p"},
                      "id": 1}).encode()


def test_r4_4_health_is_open_to_all_and_lists_the_points_served(served: HookServer) -> None:
    conn = conn_to(served)
    conn.request("GET", "/health")
    resp = conn.getresponse()
    assert resp.status == 200
    assert json.loads(resp.read()) == {
        "ok": True, "status": "ok", "server": f"the-loop {__version__}",
        "points": ["work_item_start", "session_spawn", "input_received"],
    }
    conn.close()


@pytest.mark.parametrize("token", [None, "wrong", "s3cret-token-and-more", ""])
def test_r4_4_post_without_the_right_bearer_is_401(served: HookServer, token: str | None) -> None:
    conn = conn_to(served)
    status, headers, body = post(conn, REQUEST, token=token)
    conn.close()
    assert status == 401 and headers["WWW-Authenticate"] == "Bearer"
    assert json.loads(body)["error"]["message"] == "unauthorized: missing or wrong bearer token"


def test_r4_4_calls_share_one_keepalive_connection(served: HookServer) -> None:
    conn = conn_to(served)
    for _ in range(3):
        status, headers, body = post(conn, REQUEST)
        assert status == 200 and json.loads(body)["result"] == {"prompt": "ACME: p"}
        assert "Connection" not in headers
    sock = conn.sock
    status, _, _ = post(conn, REQUEST)
    assert conn.sock is sock  # http.client did not reconnect
    conn.close()


def test_notification_over_http_gets_204(served: HookServer) -> None:
    conn = conn_to(served)
    status, _, body = post(conn, b'{"jsonrpc":"2.0","method":"session_spawn"}')
    conn.close()
    assert (status, body) == (204, b"")


def test_request_over_the_cap_is_413_without_reading_it(served: HookServer) -> None:
    with socket.create_connection(("127.0.0.1", served.port), timeout=5) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer s3cret-token\r\n"
                     b"Content-Length: %d\r\n\r\n" % (MAX_REQUEST + 1))
        answer = read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 413 ")
    assert b"Connection: close" in answer


def test_chunked_request_is_411(served: HookServer) -> None:
    with socket.create_connection(("127.0.0.1", served.port), timeout=5) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
        assert read_until_closed(sock).startswith(b"HTTP/1.1 411 ")


@pytest.mark.parametrize(("method", "path", "status"), [
    ("GET", "/", 404), ("GET", "/metrics", 404), ("PUT", "/", 405), ("DELETE", "/x", 405),
])
def test_other_routes_are_refused(served: HookServer, method: str, path: str, status: int) -> None:
    conn = conn_to(served)
    conn.request(method, path)
    resp = conn.getresponse()
    resp.read()
    conn.close()
    assert resp.status == status


def test_trickling_client_is_hung_up_on() -> None:
    """A client sending its request a byte at a time cannot hold a server thread."""
    with HookServer(Gate(), request_timeout=0.5) as server, socket.create_connection(
        ("127.0.0.1", server.port), timeout=10,
    ) as sock:
        request = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
        closed = False
        for byte in request:
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                closed = True
                break
            time.sleep(0.1)
        assert closed or read_until_closed(sock) in (b"",)


def test_idle_keepalive_connection_is_closed_by_the_server() -> None:
    with HookServer(Gate(), idle_timeout=0.3) as server, socket.create_connection(
        ("127.0.0.1", server.port), timeout=10,
    ) as sock:
        assert read_until_closed(sock) == b""


def test_shutdown_closes_open_connections_and_frees_the_port() -> None:
    server = HookServer(Gate())
    server.serve_in_thread()
    conn = conn_to(server)
    assert post(conn, REQUEST, token=None)[0] == 200
    server.shutdown()
    server.shutdown()  # idempotent
    with pytest.raises(OSError):
        conn.request("POST", "/", body=REQUEST)
        conn.getresponse()
    conn.close()
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", server.port))


def test_shutdown_before_the_thread_runs_does_not_hang() -> None:
    """A shutdown() that lands while the thread is still opening its server stops it too
    (a loop.stop() spent inside create_server left about 1 in 75 threads serving)."""
    for _ in range(200):
        server = HookServer(Gate())
        thread = server.serve_in_thread()
        server.shutdown()
        assert not thread.is_alive()


def read_until_closed(sock: socket.socket) -> bytes:
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return data
        if not chunk:
            return data
        data += chunk


# ----------------------------------------------------------------------------- WSGI


def test_wsgi_app_has_the_same_protocol_auth_health_and_limits(monkeypatch: Any) -> None:
    monkeypatch.setenv("SERVER_TOKEN", "s3cret-token")
    client = Client(make_wsgi_app(Gate(), token_env="SERVER_TOKEN"))
    health = client.get("/health")
    assert health.status_code == 200
    assert health.json == {"ok": True, "status": "ok", "server": f"the-loop {__version__}",
                           "points": ["work_item_start", "session_spawn", "input_received"]}
    assert client.post("/", data=REQUEST).status_code == 401
    auth = {"Authorization": "Bearer s3cret-token"}
    ok = client.post("/hooks", data=REQUEST, headers=auth)
    assert ok.status_code == 200 and ok.json["result"] == {"prompt": "ACME: p"}
    note = client.post("/", data=b'{"jsonrpc":"2.0","method":"session_spawn"}', headers=auth)
    assert note.status_code == 204 and note.data == b""
    big = client.post("/", data=b" " * (MAX_REQUEST + 1), headers=auth)
    assert big.status_code == 413
    assert client.put("/").status_code == 405


HOOK_FILE = """\
from the_loop.sdk.hooks import LifecycleHooks, SessionSpawn

class Stamp(LifecycleHooks):
    def __init__(self, team="core"):
        self.team = team

    def session_spawn(self, ctx: SessionSpawn) -> SessionSpawn:
        ctx.prompt = f"[{self.team}] " + ctx.prompt
        return ctx
"""


def test_wsgi_app_from_env_loads_a_class_like_a_path_entry(tmp_path: Path) -> None:
    hook = tmp_path / "stamp.py"
    hook.write_text(HOOK_FILE, encoding="utf-8")
    app = app_from_env({"THE_LOOP_HOOK_PATH": str(hook), "THE_LOOP_HOOK_WITH": '{"team":"a"}',
                        "THE_LOOP_HOOK_DECISION_LOG": str(tmp_path / "served.db")})
    answer = Client(app).post("/", data=REQUEST)
    assert answer.json["result"] == {"prompt": "[a] p"}


@pytest.mark.parametrize(("env", "expected"), [
    ({}, "set exactly one of THE_LOOP_HOOK_PATH"),
    ({"THE_LOOP_HOOK_PATH": "/nonexistent/x.py"}, "THE_LOOP_HOOK_PATH: no file at"),
    ({"THE_LOOP_HOOK_MODULE": "json"}, "THE_LOOP_HOOK_MODULE: 'json' defines no LifecycleHooks"),
    ({"THE_LOOP_HOOK_MODULE": "json", "THE_LOOP_HOOK_WITH": "[1]"}, "THE_LOOP_HOOK_WITH: "),
    ({"THE_LOOP_HOOK_MODULE": "json", "THE_LOOP_HOOK_TOKEN_ENV": "UNSET_TOKEN_VAR_X"},
     "UNSET_TOKEN_VAR_X, which is unset or empty"),
])
def test_wsgi_app_from_env_errors_name_the_variable(env: dict[str, str], expected: str) -> None:
    with pytest.raises(HooksConfigError) as info:
        app_from_env(env)
    assert expected in str(info.value)
