"""The server half of the remote protocol: `handle_request` (any framework) and `HookServer`.

`handle_request(executor, body) -> bytes` is the whole JSON-RPC 2.0 logic and never raises:

- -32700 the body is not JSON (or not UTF-8); -32600 not a valid request object (an extra
  member, a `jsonrpc` other than "2.0", a non-string method, an id that is not a string, an
  integer or null); -32601 a method outside the catalog of points; -32602 params that are
  not an object of the point's context fields with the right types.
- -32000 the hook raised; -32603 the hook answered something the chain would reject (not a
  context of the point's type, a decision of the wrong type). Nothing is coerced.
- A success answers only the decisions that differ from the params, or `null`.
- A catalog point the executor does not override answers `null`: it is what the same class
  does when declared by `path:`, so a `url:` entry without `on:` (every point) works
  unchanged instead of failing at the points the class leaves alone.
- Notifications (no `id`) run the hook and get no answer (`b""`; HTTP 204). Batches are
  supported as the spec says: answered in order, notifications left out, `b""` when only
  notifications; an empty batch, or one over `MAX_BATCH`, is a single -32600.

`HookServer` hosts one executor on `http.server` (HTTP/1.1 keep-alive, one write per answer
and TCP_NODELAY); `wsgi.http_reply` is the HTTP layer it shares with the WSGI app: `GET /health`
open to all, POST to any path for calls, 401 without the right bearer, 413 over the cap.
"""

from __future__ import annotations

import contextlib
import io
import json
import socket
import socketserver
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from the_loop.hooks.chain import copy_context, describe_exception, read_answer
from the_loop.hooks.executor import (
    Executor,
    HookError,
    LifecycleHooks,
    default_points,
    handler_for,
)
from the_loop.hooks.points import POINTS, context_from_json, unknown_point_message
from the_loop.hooks.wsgi import Reply, error_reply, http_reply, reason_of

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
HOOK_RAISED = -32000
UNAUTHORIZED = -32001

MAX_BATCH = 50
_MAX_MESSAGE = 2000
_MEMBERS = frozenset(("jsonrpc", "method", "params", "id"))
_JSON_TYPES = {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
               int: "a number", float: "a number", type(None): "null"}

AnyExecutor = LifecycleHooks | Executor


# ------------------------------------------------------------------------- JSON-RPC


def handle_request(executor: AnyExecutor, body: bytes) -> bytes:
    """Answer one JSON-RPC 2.0 request (or batch) for `executor`; never raises."""
    try:
        return _handle(executor, body)
    except Exception as exc:  # a bug here must still answer valid JSON-RPC
        return _dumps(_error(None, INTERNAL_ERROR, f"internal error: {type(exc).__name__}"))


def served_points(executor: AnyExecutor) -> tuple[str, ...]:
    """The points the executor answers with its own code (what /health lists)."""
    return default_points(executor)


def _handle(executor: AnyExecutor, body: bytes | str) -> bytes:
    try:
        text = body if isinstance(body, str) else bytes(body)
        doc = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        why = "not UTF-8" if isinstance(exc, UnicodeDecodeError) else "not JSON"
        return _dumps(_error(None, PARSE_ERROR, f"parse error: the body is {why}"))
    if isinstance(doc, list):
        if not doc:
            return _dumps(_error(None, INVALID_REQUEST, "invalid request: an empty batch"))
        if len(doc) > MAX_BATCH:
            return _dumps(_error(
                None, INVALID_REQUEST,
                f"invalid request: a batch of {len(doc)} requests; at most {MAX_BATCH}",
            ))
        answers = [a for a in (_one(executor, item) for item in doc) if a is not None]
        return _dumps(answers) if answers else b""
    answer = _one(executor, doc)
    return b"" if answer is None else _dumps(answer)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _one(executor: AnyExecutor, req: Any) -> dict[str, Any] | None:
    """The answer to one request object, or None for a notification."""
    if not isinstance(req, dict):
        return _error(None, INVALID_REQUEST,
                      f"invalid request: expected an object, got {_json_type(req)}")
    rid = req.get("id")
    if not (rid is None or type(rid) in (int, str)):
        return _error(None, INVALID_REQUEST,
                      f"invalid request: id must be a string, an integer or null, got "
                      f"{_json_type(rid)}")
    extra = sorted(str(k) for k in req if k not in _MEMBERS)
    if extra:
        return _error(rid, INVALID_REQUEST,
                      f"invalid request: unexpected member(s) {', '.join(extra)}; a request "
                      "has jsonrpc, method, params and id")
    if req.get("jsonrpc") != "2.0":
        return _error(rid, INVALID_REQUEST,
                      f'invalid request: "jsonrpc" must be "2.0", got {_short(req.get("jsonrpc"))}')
    method = req.get("method")
    if not isinstance(method, str):
        return _error(rid, INVALID_REQUEST,
                      f"invalid request: method must be a string, got {_json_type(method)}")
    answer = _call(executor, method, req.get("params", {}), rid)
    return answer if "id" in req else None


def _call(executor: AnyExecutor, point: str, params: Any, rid: Any) -> dict[str, Any]:
    if point not in POINTS:
        return _error(rid, METHOD_NOT_FOUND, f"method not found: {unknown_point_message(point)}")
    if isinstance(params, list):
        return _error(rid, INVALID_PARAMS,
                      "invalid params: send an object of context fields by name, not an array")
    try:
        ctx = context_from_json(point, params)
    except Exception as exc:
        return _error(rid, INVALID_PARAMS, f"invalid params: {exc}")
    if point not in served_points(executor):
        return _result(rid, None)
    name = type(executor).__name__
    try:
        answer = handler_for(executor, point)(copy_context(ctx))
    except HookError as exc:
        return _error(rid, HOOK_RAISED, f"hook {name} failed at {point}: {exc}")
    except (Exception, SystemExit, GeneratorExit) as exc:
        return _error(rid, HOOK_RAISED, f"hook {name} raised at {point}: {describe_exception(exc)}")
    # Read the answer back exactly as the chain does: decisions only, typed, never coerced.
    changes, _dropped, error = read_answer(ctx, answer)
    if error:
        return _error(rid, INTERNAL_ERROR, f"hook {name} answered wrongly at {point}: {error}")
    return _result(rid, changes or None)


def _result(rid: Any, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "result": result, "id": rid}


def _error(rid: Any, code: int, message: str) -> dict[str, Any]:
    if len(message) > _MAX_MESSAGE:
        message = message[:_MAX_MESSAGE] + "…"
    return {"jsonrpc": "2.0", "error": {"code": code, "message": message}, "id": rid}


def _dumps(doc: Any) -> bytes:
    return json.dumps(doc, separators=(",", ":"), allow_nan=False).encode("ascii")


def _json_type(value: Any) -> str:
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:80] + "…"


# ----------------------------------------------------------------------------- HTTP


def health_body(executor: AnyExecutor) -> bytes:
    """The body of `GET /health`: the points this executor serves."""
    return _dumps({"status": "ok", "points": list(served_points(executor))})


class _DeadlineRaw(io.RawIOBase):
    """Socket reads: `idle` s to start a request, then `limit` s for all of it (a client
    trickling its request cannot hold a thread forever)."""

    def __init__(self, sock: socket.socket, idle: float, limit: float) -> None:
        super().__init__()
        self._sock = sock
        self._idle = idle
        self._limit = limit
        self._deadline: float | None = None

    def arm(self) -> None:
        self._deadline = None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._deadline is None:
            self._sock.settimeout(self._idle)
        else:
            left = self._deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the request did not arrive in time")
            self._sock.settimeout(left)
        n = self._sock.recv_into(buffer)
        if n and self._deadline is None:
            self._deadline = time.monotonic() + self._limit
        return n


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "the-loop-hooks"
    disable_nagle_algorithm = True
    server: _HTTPServer

    def setup(self) -> None:
        super().setup()
        self.rfile.close()
        self._raw = _DeadlineRaw(self.connection, self.server.idle_timeout,
                                 self.server.request_timeout)
        self.rfile = io.BufferedReader(self._raw, 65536)
        self.server.track(self.connection, True)

    def finish(self) -> None:
        self.server.track(self.connection, False)
        super().finish()

    def handle_one_request(self) -> None:
        self._raw.arm()
        super().handle_one_request()

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: no access log on stderr

    def _answer(self) -> None:
        hook = self.server.hook
        te = self.headers.get("Transfer-Encoding")
        try:
            if te is not None and self.command == "POST":
                reply = error_reply(411, "chunked request bodies are not supported; send "
                                         "Content-Length")
            else:
                reply = http_reply(
                    answer=hook.answer, health=hook.health, token_env=hook.token_env,
                    method=self.command, path=self.path,
                    authorization=self.headers.get("Authorization"),
                    content_length=self.headers.get("Content-Length"), read=self.rfile.read,
                )
        except (TimeoutError, OSError):
            self.close_connection = True  # a client too slow to send its body
            return
        self._write(reply)

    do_GET = do_POST = do_HEAD = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _answer

    def _write(self, reply: Reply) -> None:
        close = reply.close or self.close_connection
        lines = [f"HTTP/1.1 {reply.status} {reason_of(reply.status)}",
                 f"Server: {self.server_version}"]
        if reply.status != 204:
            lines += ["Content-Type: application/json", f"Content-Length: {len(reply.body)}"]
        lines += [f"{k}: {v}" for k, v in reply.headers]
        if close:
            lines.append("Connection: close")
            self.close_connection = True
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        body = b"" if self.command == "HEAD" else reply.body
        self.wfile.write(head + body)  # one write: no header/body split meets delayed ACK


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    hook: HookServer
    idle_timeout = 30.0
    request_timeout = 10.0

    def server_bind(self) -> None:
        # Skip HTTPServer.server_bind's getfqdn(): a reverse lookup can stall start-up.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], OSError):
            return  # a client that went away is not worth a traceback
        super().handle_error(request, client_address)

    def track(self, sock: socket.socket, add: bool) -> None:
        with self.hook._lock:
            if add:
                self.hook._open.add(sock)
            else:
                self.hook._open.discard(sock)


class _HTTPServer6(_HTTPServer):
    address_family = socket.AF_INET6


class HookServer:
    """Hosts one executor over JSON-RPC 2.0 on http.server (stdlib).

    `HookServer(executor, host="127.0.0.1", port=0, token_env="")` binds at once (port 0:
    any free port, see `.url`); `.serve_forever()` blocks, `.serve_in_thread()` returns the
    started thread, `.shutdown()` stops serving, closes the socket and open connections.
    With `token_env`, every POST needs `Authorization: Bearer $token_env` (read per request).
    """

    def __init__(self, executor: AnyExecutor, host: str = "127.0.0.1", port: int = 0,
                 token_env: str = "", *, idle_timeout: float = 30.0,
                 request_timeout: float = 10.0) -> None:
        self.executor = executor
        self.token_env = token_env
        self.health = health_body(executor)
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._started = False
        self._closed = False
        self._thread: threading.Thread | None = None
        cls = _HTTPServer6 if ":" in host else _HTTPServer
        self._httpd = cls((host, port), _Handler, bind_and_activate=False)
        self._httpd.hook = self
        self._httpd.idle_timeout = idle_timeout
        self._httpd.request_timeout = request_timeout
        try:
            self._httpd.server_bind()
            self._httpd.server_activate()
        except BaseException:
            self._httpd.server_close()
            raise
        self.host = host
        self.port = int(self._httpd.server_address[1])

    def answer(self, body: bytes) -> bytes:
        """The JSON-RPC answer to one request body."""
        return handle_request(self.executor, body)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    def _start(self) -> None:
        with self._lock:
            if self._closed or self._started:
                raise RuntimeError(f"HookServer {self.url} was already started or shut down")
            self._started = True

    def serve_forever(self) -> None:
        """Serve until `shutdown()` (from another thread) or Ctrl-C."""
        self._start()
        self._httpd.serve_forever(poll_interval=0.25)

    def serve_in_thread(self) -> threading.Thread:
        """Start serving in a daemon thread; returns it."""
        self._start()  # before the thread runs, so an early shutdown() waits for it
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.25,),
                                        name=f"HookServer {self.url}", daemon=True)
        self._thread.start()
        return self._thread

    def shutdown(self) -> None:
        """Stop serving, close the listening socket and every open connection (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            started = self._started
        if started:
            self._httpd.shutdown()
        self._httpd.server_close()
        with self._lock:
            open_now = list(self._open)
        for sock in open_now:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5)

    def __enter__(self) -> HookServer:
        self.serve_in_thread()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
