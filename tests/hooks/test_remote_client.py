"""The JSON-RPC client executor against real servers on port 0 (R4.2, R4.3, R6, abuse 2–5)."""

from __future__ import annotations

import json
import shutil
import socket
import socketserver
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from serving_helpers import free_port
from the_loop.events import EventLog, read_events
from the_loop.hooks import load_chain
from the_loop.hooks.engine.chain import Chain, Link
from the_loop.hooks.engine.executor import HookError
from the_loop.hooks.engine.points import POINTS, SessionSpawn, WorkItem, WorkItemStart
from the_loop.hooks.executors.remote import MAX_RESPONSE, RemoteExecutor
from the_loop.hooks.serving.server import HookServer
from the_loop.sdk.hooks import LifecycleHooks

TOKEN = "tok-9f8e7d6c5b4a-secret"
ITEM = WorkItem(ref="local:acme/app#7", tracker="local", repository="acme/app", number=7)


# ------------------------------------------------------------------------ test servers


class Request:
    """One request as a scripted server received it."""

    def __init__(self, conn_no: int, line: str, headers: dict[str, str], body: bytes) -> None:
        self.conn_no = conn_no
        self.line = line
        self.headers = headers
        self.body = body

    @property
    def json(self) -> Any:
        return json.loads(self.body)


Respond = Callable[[Request, socket.socket, threading.Event], str]


class Scripted:
    """A raw HTTP/1.1 server on 127.0.0.1:0; `respond(req, sock, stop)` writes the answer
    and returns "keep" or "close". Records every connection and request."""

    def __init__(self, respond: Respond, tls: ssl.SSLContext | None = None) -> None:
        self.respond = respond
        self.requests: list[Request] = []
        self.connections = 0
        self.stop = threading.Event()
        outer = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                outer.connections += 1
                conn_no = outer.connections
                sock: socket.socket = self.request
                sock.settimeout(5)
                if tls is None:
                    self.serve(sock, conn_no)
                    return
                try:
                    wrapped = tls.wrap_socket(sock, server_side=True)
                except OSError:
                    return
                with wrapped:
                    self.serve(wrapped, conn_no)

            def serve(self, sock: socket.socket, conn_no: int) -> None:
                buf = b""
                while not outer.stop.is_set():
                    try:
                        while b"\r\n\r\n" not in buf:
                            data = sock.recv(65536)
                            if not data:
                                return
                            buf += data
                        head, buf = buf.split(b"\r\n\r\n", 1)
                        line, *rest = head.decode("latin-1").split("\r\n")
                        headers = {k.strip().lower(): v.strip()
                                   for k, _, v in (h.partition(":") for h in rest)}
                        length = int(headers.get("content-length", "0"))
                        while len(buf) < length:
                            data = sock.recv(65536)
                            if not data:
                                return
                            buf += data
                        body, buf = buf[:length], buf[length:]
                        req = Request(conn_no, line, headers, body)
                        outer.requests.append(req)
                        if outer.respond(req, sock, outer.stop) == "close":
                            return
                    except OSError:
                        return

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,),
                                       daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


def http(status: int, body: bytes, *extra: str, reason: str = "X") -> bytes:
    head = [f"HTTP/1.1 {status} {reason}", f"Content-Length: {len(body)}", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def rpc_result(result: Any) -> Respond:
    """Answer every call with `result`, echoing the request's id."""

    def respond(req: Request, sock: socket.socket, stop: threading.Event) -> str:
        body = json.dumps({"jsonrpc": "2.0", "result": result, "id": req.json["id"]})
        sock.sendall(http(200, body.encode()))
        return "keep"

    return respond


def raw(data: bytes, then: str = "close") -> Respond:
    def respond(req: Request, sock: socket.socket, stop: threading.Event) -> str:
        sock.sendall(data)
        return then

    return respond


@pytest.fixture
def scripted() -> Iterator[Callable[[Respond], Scripted]]:
    servers: list[Scripted] = []

    def make(respond: Respond) -> Scripted:
        servers.append(Scripted(respond))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


@pytest.fixture
def remote() -> Iterator[Callable[..., RemoteExecutor]]:
    made: list[RemoteExecutor] = []

    def make(url: str, **kw: Any) -> RemoteExecutor:
        kw.setdefault("timeout", 2.0)
        made.append(RemoteExecutor(name="compliance", url=url, **kw))
        return made[-1]

    yield make
    for ex in made:
        ex.close()


def chain_of(executor: RemoteExecutor, required: bool = False) -> tuple[Chain, EventLog]:
    log = EventLog()
    return Chain([Link("compliance", executor, frozenset(POINTS), required)], log=log), log


def failed_error(log: EventLog) -> str:
    (event,) = log.of("hooks.failed")
    assert event["hook"] == "compliance"
    error: str = event["error"]
    assert "Traceback" not in error
    return error


class Prefix(LifecycleHooks):
    def session_spawn(self, ctx: SessionSpawn) -> SessionSpawn:
        ctx.prompt = "ACME: " + ctx.prompt
        return ctx


class Raises(LifecycleHooks):
    def session_spawn(self, ctx: SessionSpawn) -> SessionSpawn:
        raise HookError("compliance database is down")


# ------------------------------------------------------------------- against HookServer


def test_r4_2_decision_comes_back_from_hookserver(remote: Any) -> None:
    with HookServer(Prefix()) as server:
        chain, log = chain_of(remote(server.url))
        out = chain.run(SessionSpawn(prompt="fix the bug", work_item=ITEM))
    assert out.prompt == "ACME: fix the bug"
    assert out.work_item == ITEM
    (decided,) = log.of("hooks.decided")
    assert decided["changed"] == ["prompt"] and decided["hook"] == "compliance"


def test_r4_2_point_the_class_leaves_alone_passes_through(remote: Any) -> None:
    with HookServer(Prefix()) as server:
        chain, log = chain_of(remote(server.url))
        out = chain.run(WorkItemStart(work_item=ITEM))
    assert out.proceed is True
    assert log.memory == []


def test_r6_1_error_member_is_the_hooks_failure(remote: Any) -> None:
    with HookServer(Raises()) as server:
        chain, log = chain_of(remote(server.url))
        out = chain.run(SessionSpawn(prompt="p"))
    assert out.prompt == "p"
    error = failed_error(log)
    assert "JSON-RPC error -32000" in error and "compliance database is down" in error


def test_r4_3_wrong_token_gets_401_and_fails(remote: Any, monkeypatch: Any) -> None:
    monkeypatch.setenv("SERVER_TOKEN", TOKEN)
    monkeypatch.setenv("CLIENT_TOKEN", "not-the-token")
    with HookServer(Prefix(), token_env="SERVER_TOKEN") as server:
        chain, log = chain_of(remote(server.url, token_env="CLIENT_TOKEN"))
        out = chain.run(SessionSpawn(prompt="p"))
    assert out.prompt == "p"
    error = failed_error(log)
    assert "HTTP 401" in error and "bearer" in error and "not-the-token" not in error


def test_r4_3_right_token_is_accepted(remote: Any, monkeypatch: Any) -> None:
    monkeypatch.setenv("SERVER_TOKEN", TOKEN)
    with HookServer(Prefix(), token_env="SERVER_TOKEN") as server:
        chain, log = chain_of(remote(server.url, token_env="SERVER_TOKEN"))
        assert chain.run(SessionSpawn(prompt="p")).prompt == "ACME: p"
    assert log.of("hooks.failed") == []


@pytest.mark.parametrize("value", [None, ""])
def test_r4_3_abuse_5_unset_token_sends_nothing(
    scripted: Any, remote: Any, monkeypatch: Any, value: str | None
) -> None:
    if value is None:
        monkeypatch.delenv("HOOK_TOKEN", raising=False)
    else:
        monkeypatch.setenv("HOOK_TOKEN", value)
    server = scripted(rpc_result({"prompt": "x"}))
    chain, log = chain_of(remote(server.url, token_env="HOOK_TOKEN"))
    out = chain.run(SessionSpawn(prompt="p"))
    assert out.prompt == "p"
    assert "HOOK_TOKEN is unset or empty, so nothing was sent" in failed_error(log)
    assert server.connections == 0 and server.requests == []


def test_abuse_3_connection_refused_names_host_and_port(remote: Any) -> None:
    port = free_port()
    chain, log = chain_of(remote(f"http://127.0.0.1:{port}/hooks"))
    out = chain.run(SessionSpawn(prompt="p"))
    assert out.prompt == "p"
    assert f"connection refused by 127.0.0.1:{port}" in failed_error(log)


def test_concurrent_calls_from_threads_each_get_their_own_answer(remote: Any) -> None:
    errors: list[str] = []
    with HookServer(Prefix()) as server:
        chain, log = chain_of(remote(server.url))

        def work(n: int) -> None:
            for i in range(15):
                prompt = f"thread {n} call {i}"
                out = chain.run(SessionSpawn(prompt=prompt))
                if out.prompt != "ACME: " + prompt:
                    errors.append(out.prompt)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []
    assert log.of("hooks.failed") == []


# ------------------------------------------------------------------ keep-alive, resend


def test_keepalive_reuses_one_connection(scripted: Any, remote: Any) -> None:
    server = scripted(rpc_result(None))
    ex = remote(server.url)
    for _ in range(5):
        assert ex.call("session_spawn", SessionSpawn()) is None
    assert server.connections == 1 and len(server.requests) == 5


def test_keepalive_resends_once_when_server_dropped_the_idle_connection(
    scripted: Any, remote: Any
) -> None:
    def respond(req: Request, sock: socket.socket, stop: threading.Event) -> str:
        if req.conn_no == 1 and len(server.requests) == 2:
            return "close"  # read the request, close without a byte of answer
        return rpc_result({"prompt": "ok"})(req, sock, stop)

    server = scripted(respond)
    ex = remote(server.url)
    for _ in range(3):
        out = ex.call("session_spawn", SessionSpawn())
        assert out is not None and dict(out.values) == {"prompt": "ok"}
    ids = [r.json["id"] for r in server.requests]
    assert ids == [1, 2, 2, 3]  # the resend carries the same id
    assert [r.conn_no for r in server.requests] == [1, 1, 2, 2]


def test_no_resend_on_a_fresh_connection(scripted: Any, remote: Any) -> None:
    server = scripted(lambda req, sock, stop: "close")
    with pytest.raises(HookError, match="closed the connection without answering"):
        remote(server.url).call("session_spawn", SessionSpawn())
    assert len(server.requests) == 1


# ------------------------------------------------------------- what a server answers


def test_abuse_2_fact_in_result_ignored(scripted: Any, remote: Any) -> None:
    server = scripted(rpc_result({
        "prompt": "checked", "loop": "evil",
        "work_item": {"ref": "local:evil/x#1", "repository": "evil/x"},
    }))
    chain, log = chain_of(remote(server.url))
    out = chain.run(SessionSpawn(prompt="p", loop="acme", work_item=ITEM))
    assert out.prompt == "checked"
    assert out.loop == "acme" and out.work_item == ITEM
    (dropped,) = log.of("hooks.dropped")
    assert dropped["dropped"] == ["loop", "work_item"]


def test_abuse_2_unknown_key_ignored_and_recorded(scripted: Any, remote: Any) -> None:
    server = scripted(rpc_result({"proceed": False, "reason": "no", "delete_repo": True}))
    chain, log = chain_of(remote(server.url))
    out = chain.run(WorkItemStart(work_item=ITEM))
    assert out.proceed is False and out.reason == "no"
    assert not hasattr(out, "delete_repo")
    assert log.of("hooks.dropped")[0]["dropped"] == ["delete_repo"]


def test_abuse_2_wrong_typed_decision_fails_and_applies_nothing(
    scripted: Any, remote: Any
) -> None:
    server = scripted(rpc_result({"prompt": "changed", "proceed": "false"}))
    chain, log = chain_of(remote(server.url))
    out = chain.run(SessionSpawn(prompt="p"))
    assert out.prompt == "p" and out.proceed is True
    assert "decision 'proceed' must be bool" in failed_error(log)
    assert log.of("hooks.decided") == []


def test_an_answer_holding_a_lone_surrogate_is_the_hooks_failure_and_applies_nothing(
    scripted: Any, remote: Any
) -> None:
    """A decision of "\\ud800" is no text a harness, a log or a tracker can take: the hook
    failed, its answer is refused whole (issue 20, item 8)."""
    server = scripted(rpc_result({"prompt": "LEAK \ud800"}))
    chain, log = chain_of(remote(server.url))
    assert chain.run(SessionSpawn(prompt="p")).prompt == "p"
    assert failed_error(log) == (
        f"the answer from {server.url} holds a lone surrogate (\\ud800), which is not a "
        "character; a character is written as itself or as a surrogate pair")


def test_abuse_3_http_500_is_the_hooks_failure(scripted: Any, remote: Any) -> None:
    server = scripted(raw(http(500, b"database on fire", reason="Internal Server Error")))
    chain, log = chain_of(remote(server.url))
    assert chain.run(SessionSpawn(prompt="p")).prompt == "p"
    error = failed_error(log)
    assert error.startswith(f"HTTP 500 Internal Server Error from {server.url}")
    assert "database on fire" in error


def test_r6_4_abuse_3_slow_server_past_timeout_returns_within_bound(
    scripted: Any, remote: Any
) -> None:
    def respond(req: Request, sock: socket.socket, stop: threading.Event) -> str:
        stop.wait(10)
        return "close"

    server = scripted(respond)
    chain, log = chain_of(remote(server.url, timeout=0.5))
    started = time.monotonic()
    out = chain.run(SessionSpawn(prompt="p"))
    elapsed = time.monotonic() - started
    assert elapsed < 0.5 + 1.5
    assert out.prompt == "p"
    assert "no complete answer" in failed_error(log) and "within 0.5 s" in failed_error(log)
    assert len(server.requests) == 1  # a timeout is never resent


def test_abuse_3_trickling_server_is_bounded_by_the_whole_call(
    scripted: Any, remote: Any
) -> None:
    def respond(req: Request, sock: socket.socket, stop: threading.Event) -> str:
        body = json.dumps({"jsonrpc": "2.0", "result": None, "id": req.json["id"]}).encode()
        for byte in http(200, body + b" " * 100):
            sock.sendall(bytes([byte]))
            if stop.wait(0.2):
                break
        return "close"

    server = scripted(respond)
    chain, log = chain_of(remote(server.url, timeout=1.0))
    started = time.monotonic()
    chain.run(SessionSpawn(prompt="p"))
    assert time.monotonic() - started < 1.0 + 1.5
    assert "within 1 s" in failed_error(log)


def test_a_server_that_never_reads_the_request_is_bounded_by_the_deadline(remote: Any) -> None:
    """A listener that never accepts: the kernel takes the connection and the first few
    megabytes, then the send waits for room that never comes, until the deadline."""
    with socket.create_server(("127.0.0.1", 0)) as deaf:
        url = f"http://127.0.0.1:{deaf.getsockname()[1]}/"
        chain, log = chain_of(remote(url, timeout=0.5))
        started = time.monotonic()
        out = chain.run(SessionSpawn(prompt="x" * (32 << 20)))
        elapsed = time.monotonic() - started
    assert out.prompt == "x" * (32 << 20)
    assert "within 0.5 s" in failed_error(log)
    # Bounded, not hung (a send with no deadline waits here for good); the slack is for
    # building and encoding the 32 MB body on a loaded machine, which is not the deadline's.
    assert elapsed < 0.5 + 8


@pytest.mark.parametrize("answer", [
    http(200, b"").replace(b"Content-Length: 0", f"Content-Length: {MAX_RESPONSE + 1}".encode()),
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    + b"".join(b"10000\r\n" + b" " * 0x10000 + b"\r\n" for _ in range(17)) + b"0\r\n\r\n",
    b"HTTP/1.0 200 OK\r\n\r\n" + b" " * (MAX_RESPONSE + 10),
], ids=["content-length", "chunked", "until-close"])
def test_oversized_answer_is_refused(scripted: Any, remote: Any, answer: bytes) -> None:
    server = scripted(raw(answer))
    with pytest.raises(HookError, match=r"too large .*the cap is 1048576 bytes"):
        remote(server.url).call("session_spawn", SessionSpawn())


@pytest.mark.parametrize("head", [
    b"HTTP/1.1 200 OK\r\nX-Pad: " + b"a" * (2 << 20),
    b"HTTP/1.1 200 OK\r\n" + b"X-" * (1 << 20),
], ids=["one-endless-value", "one-endless-name"])
def test_an_endless_header_is_refused_at_the_head_cap_not_the_deadline(
    scripted: Any, remote: Any, head: bytes
) -> None:
    """A hostile server's one header that never ends: llhttp hands a header to us only once
    it is complete, so the cap is counted on the bytes read, before the 10 s deadline."""
    server = scripted(raw(head, then="keep"))
    with pytest.raises(HookError, match=r"not valid HTTP \(headers over 65536 bytes\)"):
        remote(server.url, timeout=10.0).call("session_spawn", SessionSpawn())


def test_redirect_not_followed_and_token_never_reaches_target(
    scripted: Any, remote: Any, monkeypatch: Any
) -> None:
    monkeypatch.setenv("HOOK_TOKEN", TOKEN)
    target = scripted(rpc_result({"prompt": "from the redirect target"}))
    redirect = http(307, b"", f"Location: {target.url}", reason="Temporary Redirect")
    server = scripted(raw(redirect, then="keep"))
    chain, log = chain_of(remote(server.url, token_env="HOOK_TOKEN"))
    assert chain.run(SessionSpawn(prompt="p")).prompt == "p"
    error = failed_error(log)
    assert "HTTP 307" in error and "redirects are never followed" in error
    assert server.requests[0].headers["authorization"] == f"Bearer {TOKEN}"
    assert target.connections == 0 and target.requests == []


@pytest.mark.parametrize(("answer", "expected"), [
    (http(200, b"<html>hi</html>"), "is not JSON"),
    (http(200, b'{"jsonrpc":"2.0","result":null,"id":999}'), "does not match the request's 1"),
    (http(200, b'{"result":null,"id":1}'), '"jsonrpc" must be "2.0"'),
    (http(200, b'{"jsonrpc":"2.0","result":null,"error":{},"id":1}'), "exactly one of"),
    (http(200, b'{"jsonrpc":"2.0","result":[1],"id":1}'), "must be null or an object"),
    (http(200, b'{"jsonrpc":"2.0","error":"bad","id":1}'), "malformed error member"),
    (http(200, b'{"jsonrpc":"2.0","error":{"code":-32602,"message":"no"},"id":null}'),
     'JSON-RPC error -32602 "no"'),
    (http(200, b""), "empty body"),
    (b"HTTP/1.1 204 No Content\r\n\r\n", "empty body"),
    (b"SMTP ready\r\n\r\n", "not valid HTTP"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}",
     "not valid HTTP (\"Duplicate Content-Length\")"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
     "not valid HTTP (\"Invalid character in chunk size\")"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 2x\r\n\r\n{}", "not valid HTTP"),
], ids=["html", "wrong-id", "no-jsonrpc", "both", "list", "bad-error", "error-id-null",
        "empty", "204", "not-http", "two-lengths", "bad-chunk-size", "bad-length"])
def test_malformed_answers_are_failures_a_person_understands(
    scripted: Any, remote: Any, answer: bytes, expected: str
) -> None:
    server = scripted(raw(answer))
    with pytest.raises(HookError) as info:
        remote(server.url).call("session_spawn", SessionSpawn())
    assert expected in str(info.value)
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_chunked_and_close_delimited_answers_are_read(scripted: Any, remote: Any) -> None:
    body = b'{"jsonrpc":"2.0","result":{"prompt":"chunked"},"id":1}'
    chunked = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
               + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))
    server = scripted(raw(chunked, then="keep"))
    out = remote(server.url).call("session_spawn", SessionSpawn())
    assert out is not None and dict(out.values) == {"prompt": "chunked"}
    closing = b"HTTP/1.0 200 OK\r\n\r\n" + body
    server = scripted(raw(closing))
    out = remote(server.url).call("session_spawn", SessionSpawn())
    assert out is not None and dict(out.values) == {"prompt": "chunked"}


# -------------------------------------------------------------------------------- TLS


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[Scripted, Path]]:
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a test certificate")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
         "-out", str(cert), "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
        check=True, capture_output=True,
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = Scripted(rpc_result({"prompt": "over tls"}), tls=context)
    server.url = server.url.replace("http://127.0.0.1", "https://localhost")
    yield server, cert
    server.close()


def test_https_with_a_trusted_certificate_keeps_the_connection(
    tls_server: tuple[Scripted, Path], remote: Any, monkeypatch: Any
) -> None:
    server, cert = tls_server
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    ex = remote(server.url)
    for _ in range(3):
        out = ex.call("session_spawn", SessionSpawn())
        assert out is not None and dict(out.values) == {"prompt": "over tls"}
    assert server.connections == 1


def test_https_with_an_untrusted_certificate_is_refused(
    tls_server: tuple[Scripted, Path], remote: Any, monkeypatch: Any, tmp_path: Path
) -> None:
    server, _ = tls_server
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "no-such-bundle.pem"))
    with pytest.raises(HookError, match=r"TLS certificate of localhost:\d+ rejected"):
        remote(server.url).call("session_spawn", SessionSpawn())
    assert server.requests == []


# ---------------------------------------------------------- declared in cli-config.yaml


def write_config(tmp_path: Path, hooks: str) -> Path:
    path = tmp_path / "cli-config.yaml"
    path.write_text(f"loop: acme\nstateDir: state\nhooks:\n{hooks}", encoding="utf-8")
    return path


def test_abuse_3_required_hook_unreachable_refuses_session_spawn(tmp_path: Path) -> None:
    config = write_config(tmp_path, f"""\
  - name: compliance
    url: http://127.0.0.1:{free_port()}/hooks
    required: true
    timeoutSeconds: 2
""")
    chain = load_chain(config)
    started = time.monotonic()
    out = chain.run(SessionSpawn(prompt="p", work_item=ITEM))
    assert time.monotonic() - started < 2 + 1.5
    assert out.proceed is False
    assert "required hook 'compliance' failed" in out.reason
    assert "connection refused" in out.reason
    events = [e["event"] for e in read_events(tmp_path / "state" / "events.jsonl")]
    assert events == ["hooks.loaded", "hooks.failed", "hooks.refused"]


def test_token_absent_from_every_event_and_error(
    tmp_path: Path, scripted: Any, monkeypatch: Any
) -> None:
    """Servers that echo the Authorization header back in every way they can."""
    monkeypatch.setenv("HOOK_TOKEN", TOKEN)

    def echo_500(req: Request, sock: socket.socket, stop: threading.Event) -> str:
        sock.sendall(http(500, f"you sent {req.headers['authorization']}".encode()))
        return "close"

    def echo_error(req: Request, sock: socket.socket, stop: threading.Event) -> str:
        error = {"code": -32000, "message": f"bad {req.headers['authorization']}",
                 "data": req.headers["authorization"]}
        body = json.dumps({"jsonrpc": "2.0", "error": error, "id": req.json["id"]})
        sock.sendall(http(200, body.encode()))
        return "close"

    def echo_redirect(req: Request, sock: socket.socket, stop: threading.Event) -> str:
        sock.sendall(http(302, b"", f"Location: http://x/?t={TOKEN}"))
        return "close"

    def echo_garbage(req: Request, sock: socket.socket, stop: threading.Event) -> str:
        sock.sendall(http(200, req.headers["authorization"].encode()))
        return "close"

    def echo_decision(req: Request, sock: socket.socket, stop: threading.Event) -> str:
        body = {"jsonrpc": "2.0", "id": req.json["id"],
                "result": {"reason": req.headers["authorization"], "proceed": "x"}}
        sock.sendall(http(200, json.dumps(body).encode()))
        return "close"

    servers = [scripted(f) for f in (echo_500, echo_error, echo_redirect, echo_garbage,
                                     echo_decision)]
    hooks = "".join(f"""\
  - name: echo-{i}
    url: {s.url}
    tokenEnv: HOOK_TOKEN
    timeoutSeconds: 2
""" for i, s in enumerate(servers))
    chain = load_chain(write_config(tmp_path, hooks))
    outcome = chain.invoke(WorkItemStart(work_item=ITEM))
    assert [s.status for s in outcome.steps] == ["failed"] * 5
    assert all(TOKEN not in step.error for step in outcome.steps)
    assert all("[redacted]" in step.error for step in outcome.steps[:4])
    assert all(s.requests[0].headers["authorization"] == f"Bearer {TOKEN}" for s in servers)
    text = (tmp_path / "state" / "events.jsonl").read_text(encoding="utf-8")
    assert text.count('"hooks.failed"') == 5
    assert TOKEN not in text
    assert TOKEN not in json.dumps([s.to_json() for s in outcome.steps])


