"""Issue 14: our policies served to any the-loop, and our client against a server of theirs.

Every point, a request shaped exactly as the open-source the-loop sends it (its `params`,
its bearer header), sent to `hooks serve --policy`, `--declared`, `--path` and to the WSGI
app under gunicorn (policy and declared-chain modes), gets the decisions our rules say.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from any_loop_data import EXPECTED, PARAMS, RULES, THEIR_STYLE_HOOK, upstream_request
from serving_helpers import Served, get, gunicorn, post
from the_loop.hooks import load_chain
from the_loop.hooks.engine.points import POINTS, SPECS, WorkItem, context_from_json

TOKEN = "any-loop-bearer-1"
AUTH = {"Authorization": f"Bearer {TOKEN}"}

LATE_APPROVER = '''\
from the_loop.sdk.hooks import InputReceived, LifecycleHooks, WorkItemStart


class LateApprover(LifecycleHooks):
    """Runs after the policy and tries to undo its refusals: a refusal sticks."""

    def work_item_start(self, ctx: WorkItemStart) -> WorkItemStart:
        ctx.proceed = True
        return ctx

    def input_received(self, ctx: InputReceived) -> InputReceived:
        ctx.proceed = True
        return ctx
'''


@dataclass
class Host:
    name: str
    url: str
    headers: dict[str, str]


def _folder(root: Path) -> Path:
    (root / "rules").mkdir()
    (root / "rules" / "house.yaml").write_text(RULES, encoding="utf-8")
    (root / "house_rules.py").write_text(THEIR_STYLE_HOOK, encoding="utf-8")
    (root / "late_approver.py").write_text(LATE_APPROVER, encoding="utf-8")
    (root / "cli-config.yaml").write_text(
        "loop: acme\nstateDir: state\nhooks:\n"
        "  - name: house\n    policy: rules\n    required: true\n"
        "  - name: late-approver\n    path: late_approver.py\n", encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Host]]:
    root = _folder(tmp_path_factory.mktemp("any-loop"))
    env = {"ANY_LOOP_TOKEN": TOKEN}
    served = {
        "policy": Served(["hooks", "serve", "--policy", "rules", "--port", "0",
                          "--token-env", "ANY_LOOP_TOKEN"], root, env),
        "declared": Served(["hooks", "serve", "--declared", "--config", "cli-config.yaml",
                            "--port", "0"], root),
        "path": Served(["hooks", "serve", "--path", "house_rules.py", "--port", "0",
                        "--quiet"], root),
    }
    out = {name: Host(name, s.url, AUTH if name == "policy" else {})
           for name, s in served.items()}
    try:
        g1, g2 = root / "g-policy", root / "g-config"
        g1.mkdir()
        g2.mkdir()
        with gunicorn({"THE_LOOP_HOOK_POLICY": str(root / "rules"), **env,
                       "THE_LOOP_HOOK_TOKEN_ENV": "ANY_LOOP_TOKEN"}, g1) as gp, \
             gunicorn({"THE_LOOP_HOOK_CONFIG": str(root / "cli-config.yaml")}, g2,
                      worker_class="gthread") as gc:
            out["gunicorn-policy"] = Host("gunicorn-policy", gp + "hooks/", AUTH)
            out["gunicorn-config"] = Host("gunicorn-config", gc, {})
            yield out
        for log in (g1 / "gunicorn.log", g2 / "gunicorn.log"):
            assert "Traceback" not in log.read_text()
    finally:
        for s in served.values():
            s.kill()


HOSTS = ["policy", "declared", "path", "gunicorn-policy", "gunicorn-config"]


@pytest.mark.parametrize("point", list(POINTS))
@pytest.mark.parametrize("host", HOSTS)
def test_their_request_gets_the_decisions_our_rules_say(
    hosts: dict[str, Host], host: str, point: str
) -> None:
    h = hosts[host]
    status, answer = post(h.url, upstream_request(point, rid=11), h.headers)
    assert status == 200, answer
    assert answer == {"jsonrpc": "2.0", "id": 11, "result": EXPECTED[point]}


@pytest.mark.parametrize("host", HOSTS)
def test_their_health_check_is_ok_on_any_path_ending_in_health(
    hosts: dict[str, Host], host: str
) -> None:
    base = hosts[host].url
    status, health = get(base + "health")
    assert status == 200
    assert health["ok"] is True and health["status"] == "ok"
    assert health["points"] == list(POINTS)  # the rules (and the hook class) cover all seven
    assert get(base + "deep/prefix/health/")[0] == 200
    assert get(base + "healthz")[0] == 404


@pytest.mark.parametrize("host", ["policy", "gunicorn-policy"])
def test_without_their_bearer_header_the_call_is_401(hosts: dict[str, Host], host: str) -> None:
    status, answer = post(hosts[host].url, upstream_request("session_spawn"))
    assert status == 401 and answer["error"]["code"] == -32001


@pytest.mark.parametrize("host", HOSTS)
def test_a_known_field_of_the_wrong_type_is_still_32602(
    hosts: dict[str, Host], host: str
) -> None:
    request = upstream_request("session_spawn")
    request["params"]["work_item"]["provider"] = 7
    status, answer = post(hosts[host].url, request, hosts[host].headers)
    assert status == 200
    assert answer["error"]["code"] == -32602
    assert "tracker must be str" in answer["error"]["message"]


# ------------------------------------------------- our client, a server answering their way


class TheirWayServer:
    """A server that answers as the other loop's does: every decision in the result (changed
    or not), `{"ok": true}` health, -32000 for a hook error, 401 with -32600 without auth."""

    def __init__(self, token: str, fail_at: str = "") -> None:
        hook_ns: dict[str, Any] = {}
        exec(compile(THEIR_STYLE_HOOK, "house_rules.py", "exec"), hook_ns)
        hook = hook_ns["HouseRules"]()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, doc: Any) -> None:
                body = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self._send(200, {"ok": True, "points": list(POINTS)})

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Authorization") != f"Bearer {token}":
                    self._send(401, {"jsonrpc": "2.0", "id": None,
                                     "error": {"code": -32600, "message": "unauthorized"}})
                    return
                call = json.loads(body)
                outer.received.append(call)
                point, rid = call["method"], call["id"]
                if point == fail_at:
                    self._send(200, {"jsonrpc": "2.0", "id": rid, "error": {
                        "code": -32000, "message": "RuntimeError: compliance db down"}})
                    return
                ctx = context_from_json(point, _ours(point, call["params"]))
                out = getattr(hook, point)(ctx) or ctx
                result = {d.name: getattr(out, d.name) for d in SPECS[point].decisions}
                self._send(200, {"jsonrpc": "2.0", "id": rid, "result": result})

        self.received: list[dict[str, Any]] = []
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/hooks"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _ours(point: str, params: dict[str, Any]) -> dict[str, Any]:
    """Their server reads our params tolerantly: it keeps the keys its catalog has, and a
    work item's tracker is what it reads as `provider` (it has no `tracker`)."""
    names = {f.name for f in SPECS[point].fields}
    out = {k: v for k, v in params.items() if k in names}
    for key in ("work_item", "endpoint"):
        if isinstance(out.get(key), dict):
            record = {k: v for k, v in out[key].items() if k not in ("tracker", "provider")}
            out[key] = {**record, "tracker": out[key].get("provider", "")}
    return out


OUR_CONTEXTS: dict[str, dict[str, Any]] = {
    "work_item_start": {"actor": "mallory"},
    "session_spawn": {"prompt": "Fix the login bug."},
    "session_spawned": {"session_id": "quiet-42"},
    "waiting_for_input": {"node": "design", "question": "Which database?"},
    "input_received": {"kind": "command", "actor": "mallory", "control": "stop",
                       "text": "/stop"},
    "phase_changed": {"to_phase": "design"},
    "work_item_complete": {"work_item": WorkItem.from_ref("github:acme/app#7",
                                                          kind="pull-request").to_json()},
}


def _declare(tmp_path: Path, url: str) -> Path:
    config = tmp_path / "cli-config.yaml"
    config.write_text(f"loop: acme\nstateDir: state\nhooks:\n  - name: theirs\n    url: {url}\n"
                      "    tokenEnv: THEIR_TOKEN\n    required: true\n", encoding="utf-8")
    return config


@pytest.mark.parametrize("point", list(POINTS))
def test_our_client_applies_a_server_answering_their_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, point: str
) -> None:
    monkeypatch.setenv("THEIR_TOKEN", TOKEN)
    server = TheirWayServer(TOKEN)
    try:
        chain = load_chain(_declare(tmp_path, server.url))
        data = {"work_item": WorkItem.from_ref("github:acme/app#7").to_json(),
                **OUR_CONTEXTS[point]}
        ctx = context_from_json(point, data)
        out = chain.run(ctx)
        changed = {d.name: getattr(out, d.name) for d in SPECS[point].decisions
                   if getattr(out, d.name) != getattr(ctx, d.name)}
        assert changed == EXPECTED[point]
        sent = server.received[0]["params"]["work_item"]
        assert (sent["tracker"], sent["provider"]) == ("github", "github")
    finally:
        server.close()


def test_our_client_sends_provider_and_our_own_server_reports_nothing_ignored(
    tmp_path: Path
) -> None:
    """Both names of the tracker travel; a server of ours reads them as one field."""
    from the_loop.hooks.serving.server import HookServer
    from the_loop.sdk.hooks import LifecycleHooks

    seen: list[Any] = []
    calls: list[Any] = []

    class Spy(LifecycleHooks):
        def session_spawn(self, ctx: Any) -> None:
            seen.append(ctx.work_item)

    with HookServer(Spy(), on_call=calls.append) as server:
        out = load_chain(_declare_open(tmp_path, server.url)).run(context_from_json(
            "session_spawn", {"work_item": WorkItem.from_ref("github:acme/app#7").to_json(),
                              "endpoint": WorkItem.from_ref("local:acme/app#8").to_json()}))
    assert out.proceed is True
    assert [(w.tracker, w.provider) for w in seen] == [("github", "github")]
    assert [c.ignored for c in calls] == [()], calls


def _declare_open(tmp_path: Path, url: str) -> Path:
    config = tmp_path / "cli-config.yaml"
    config.write_text(f"loop: acme\nstateDir: state\nhooks:\n  - name: ours\n    url: {url}\n"
                      "    required: true\n", encoding="utf-8")
    return config


def test_their_servers_error_code_fails_the_hook_and_required_refuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("THEIR_TOKEN", TOKEN)
    server = TheirWayServer(TOKEN, fail_at="session_spawn")
    try:
        out = load_chain(_declare(tmp_path, server.url)).run(
            context_from_json("session_spawn", {"prompt": "p"}))
        assert out.proceed is False
        assert "JSON-RPC error -32000" in out.reason and "compliance db down" in out.reason
    finally:
        server.close()


def test_their_401_fails_the_hook_with_the_status(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("THEIR_TOKEN", "not-the-token")
    server = TheirWayServer(TOKEN)
    try:
        out = load_chain(_declare(tmp_path, server.url)).run(
            context_from_json("work_item_start", {}))
        assert out.proceed is False and "HTTP 401" in out.reason
    finally:
        server.close()


def test_the_shipped_policies_answer_their_requests(tmp_path: Path) -> None:
    """Their calls to `hooks serve --policy policies/` get our refusals; a point whose rules
    read a fact they never send (labels) is answered with an error naming the rule, never
    decided as if the item had no labels (issue 36)."""
    policies = Path(__file__).parents[2] / "policies"
    served = Served(["hooks", "serve", "--policy", str(policies), "--port", "0"], tmp_path)
    try:
        start = upstream_request("work_item_start")
        start["params"]["work_item"]["repository"] = "acme/secret"
        assert post(served.url, start)[1]["result"] == {
            "proceed": False,
            "reason": "acme/secret is not on this loop's allow list (acme/app, acme/docs)"}
        spawn = post(served.url, upstream_request("session_spawn"))[1]["error"]
        assert spawn["code"] == -32000 and (
            "policy rule 'trusted-prs-only' (20-sessions.yaml) reads labels at session_spawn, "
            "which the caller did not send") in spawn["message"]
        approve = upstream_request("input_received")
        approve["params"]["command"] = "approve"
        assert post(served.url, approve)[1]["result"] == {
            "proceed": False, "reason": "only maintainers (alice, bob) may approve; mallory "
                                        "is not one"}
    finally:
        served.kill()


# ------------------------------------- issue 30.9: their hooks read their own names from us


class TheirNamesOnly:
    """A server that reads `params` as the other loop's `from_params` does: only the keys
    its own catalog (params.json) has. Its gate refuses a `stop` unless alice asked, and its
    session hook keeps the `harness_session_id` it was sent."""

    def __init__(self) -> None:
        outer = self
        self.seen: list[dict[str, Any]] = []

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                call = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                theirs = {k: v for k, v in call["params"].items()
                          if k in PARAMS[call["method"]]}
                outer.seen.append(theirs)
                result = None
                if (call["method"] == "input_received" and theirs.get("command") == "stop"
                        and theirs.get("actor") != "alice"):
                    result = {"proceed": False, "reason": "only alice may stop"}
                body = json.dumps({"jsonrpc": "2.0", "id": call["id"], "result": result})
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body.encode())

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/hooks"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_their_gate_on_stop_fires_when_our_client_calls_it(tmp_path: Path) -> None:
    """Our client sends the control word as `command` too: their gate reads that name."""
    server = TheirNamesOnly()
    try:
        out = load_chain(_declare_open(tmp_path, server.url)).run(context_from_json(
            "input_received", {"kind": "command", "actor": "mallory", "control": "stop",
                               "text": "/stop"}))
    finally:
        server.close()
    assert (out.proceed, out.reason) == (False, "only alice may stop")
    assert server.seen[0]["command"] == "stop"


def test_our_client_sends_the_session_id_as_harness_session_id_too(tmp_path: Path) -> None:
    server = TheirNamesOnly()
    try:
        load_chain(_declare_open(tmp_path, server.url)).run(
            context_from_json("session_spawned", {"session_id": "s-42"}))
    finally:
        server.close()
    assert server.seen[0]["harness_session_id"] == "s-42"


@pytest.mark.parametrize("point", list(POINTS))
def test_every_name_both_loops_share_travels_under_their_name_with_their_type(
    point: str
) -> None:
    """Checked against tests/data/upstream-wire/params.json: each of their keys that names a
    field of ours (by our name or an alias) is in what our client sends, with their JSON
    type; a work item carries `provider`."""
    from the_loop.hooks.engine.dialect import ALIASES, wire_params

    sent = wire_params(context_from_json(point, {}))
    ours = {f.name for f in SPECS[point].fields}
    for key, default in PARAMS[point].items():
        if key in ours or ALIASES.get(point, {}).get(key) in ours:
            assert key in sent, key
            assert type(sent[key]) is type(default), key
            if isinstance(default, dict):
                assert set(default) <= set(sent[key]), key


def test_our_own_server_reports_nothing_ignored_when_our_client_sends_both_names(
    tmp_path: Path
) -> None:
    from the_loop.hooks.serving.server import HookServer
    from the_loop.sdk.hooks import LifecycleHooks

    calls: list[Any] = []
    with HookServer(LifecycleHooks(), on_call=calls.append) as server:
        chain = load_chain(_declare_open(tmp_path, server.url))
        chain.run(context_from_json("input_received", {"control": "stop"}))
        chain.run(context_from_json("session_spawned", {"session_id": "s-1"}))
    assert [c.ignored for c in calls] == [(), ()], calls
