"""The JSON-RPC 2.0 client executor for `url:` entries: one bounded POST per invocation.

Contract, each rule tested in tests/hooks/test_remote_client.py:
- One POST per call, body `{"jsonrpc":"2.0","method":<point>,"params":<context>,"id":<int>}`,
  sent with a single write.
- `timeoutSeconds` bounds the whole call — name resolution, connect, TLS, send and every
  read — through one deadline; each socket operation gets only the time that is left, so a
  server trickling one byte at a time cannot stretch it.
- The bearer token is read from `$tokenEnv` at call time; unset or empty fails the call
  before any connection is opened. The token never appears in an error message.
- Redirects are never followed (a bearer token must not travel to another host); answers
  larger than `MAX_RESPONSE` are refused without reading further.
- The answer is checked (`jsonrpc`, `id`, exactly one of `result`/`error`, `result` null or
  an object) and becomes `Decisions(values=<decision keys>, dropped=<the other keys>)`; the
  chain type-checks the values and records `hooks.dropped` / `hooks.failed`.
- Connections are kept alive in a small per-executor pool (thread-safe: a connection is used
  by one call at a time). When a pooled connection turns out to be closed by the server, the
  request is sent once more on a fresh connection — only if not one byte of an answer was
  read. A resend is acceptable here: a server that closes an idle keep-alive connection has
  not read the request on it, and a hook call asks for a decision about a context the loop
  sends in full, so answering it twice gives the same answer. The resend carries the same
  `id`, so a server with side effects (telemetry) can recognise a duplicate. Timeouts and
  answers cut short after their first byte are never resent.
- Every failure is a `HookError` whose message a person understands; nothing else escapes.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import ssl
import threading
import time
import weakref
from typing import Any
from urllib.parse import urlsplit

from the_loop import __version__
from the_loop.hooks.engine.dialect import wire_params
from the_loop.hooks.engine.executor import CalledAtEveryPoint, Decisions, HookError
from the_loop.hooks.engine.points import SPECS, Context
from the_loop.hooks.executors.remote_http import (
    MAX_RESPONSE,
    MAX_TEXT,
    Answer,
    Closed,
    Conn,
    close_all,
    exchange,
    left,
    quote,
    resolve,
    still_open,
)
from the_loop.jsonread import NotUnicode, read_json

__all__ = ["MAX_RESPONSE", "RemoteExecutor", "read_answer", "request_body"]

MAX_IDLE = 8  # idle keep-alive connections kept per executor

_encode = json.JSONEncoder(separators=(",", ":")).encode  # ASCII: escapes what is not
_DECISIONS = {point: frozenset(d.name for d in spec.decisions) for point, spec in SPECS.items()}


class RemoteExecutor(CalledAtEveryPoint):
    """Calls a remote hook server over JSON-RPC 2.0; one instance per `url:` entry."""

    def __init__(
        self,
        *,
        name: str,
        url: str,
        token_env: str = "",
        headers: dict[str, str] | None = None,
        timeout: float = 10.0,
    ) -> None:
        self.name = name
        self.url = url
        self.token_env = token_env
        self.headers = dict(headers or {})
        self.timeout = float(timeout)
        parts = urlsplit(url)
        self._tls = parts.scheme == "https"
        self._host = parts.hostname or "localhost"
        self._port = parts.port or (443 if self._tls else 80)
        netloc = parts.netloc.rpartition("@")[2]
        path = parts.path or "/"
        #: The URL as shown in messages: no query string (it may carry something private).
        self.where = f"{parts.scheme}://{netloc}{path}"
        target = path + (f"?{parts.query}" if parts.query else "")
        lines = [
            f"POST {target} HTTP/1.1", f"Host: {netloc}", "Content-Type: application/json",
            "Accept: application/json", f"User-Agent: the-loop/{__version__}",
        ]
        lines += [f"{key}: {value}" for key, value in self.headers.items()]
        self._head = ("\r\n".join(lines) + "\r\n").encode("utf-8")
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._idle: list[Conn] = []
        self._ssl: ssl.SSLContext | None = None
        self._finalizer = weakref.finalize(self, close_all, self._idle)

    # ------------------------------------------------------------------ Executor protocol

    def close(self) -> None:
        """Close the idle connections (the executor stays usable)."""
        with self._lock:
            close_all(self._idle)

    # ----------------------------------------------------------------------------- a call

    def call(self, point: str, ctx: Context) -> Decisions | None:
        """Send `ctx` to the server at `point`; the decisions it answers, or None."""
        token = ""
        if self.token_env:
            token = os.environ.get(self.token_env, "")
            if not token:
                raise HookError(
                    f"tokenEnv {self.token_env} is unset or empty, so nothing was sent to "
                    f"{self.where}; export {self.token_env} in the loop's environment"
                )
            if any(c in token for c in "\r\n\0"):
                raise HookError(
                    f"the value of {self.token_env} (tokenEnv) contains a line break or NUL, "
                    f"so nothing was sent to {self.where}"
                )
        try:
            return self._call(point, ctx, token)
        except HookError as exc:
            raise HookError(_redact(str(exc), token)) from None
        except Exception as exc:  # the one boundary: nothing foreign escapes
            text = f"{self.where}: unexpected client error: {type(exc).__name__}: {exc}"
            raise HookError(_redact(text, token)) from None

    def _call(self, point: str, ctx: Context, token: str) -> Decisions | None:
        req_id = next(self._ids)
        body = request_body(point, ctx, req_id)
        head = self._head
        if token:
            head += f"Authorization: Bearer {token}\r\n".encode()
        request = b"%sContent-Length: %d\r\n\r\n%s" % (head, len(body), body)
        deadline = time.monotonic() + self.timeout
        answer = self._exchange(request, deadline)
        # The token goes before anything is quoted or cut: a server that echoes the header
        # (in an error page past the quoted prefix, or in a decision) never carries it on.
        text = _redact_bytes(answer.body, token)
        if not 200 <= answer.status < 300:
            raise HookError(
                f"HTTP {answer.status} {answer.reason} from {self.where}"
                + _server_says(text)
            )
        if not text:
            raise HookError(
                f"HTTP {answer.status} with an empty body from {self.where}; a call expects "
                "a JSON-RPC response"
            )
        try:
            doc = read_json(text)
        except NotUnicode as exc:
            raise HookError(f"the answer from {self.where} {exc}") from None
        except (ValueError, RecursionError):
            raise HookError(
                f"the answer from {self.where} is not JSON (it starts with "
                f"{quote(text[:60].decode('utf-8', 'replace'))})"
            ) from None
        return read_answer(self.where, point, req_id, _redact_doc(doc, token))

    # ------------------------------------------------------------------------- transport

    def _exchange(self, request: bytes, deadline: float) -> Answer:
        for attempt in (1, 2):
            conn, reused = self._acquire(deadline, fresh=attempt == 2)
            try:
                answer = exchange(conn, request, deadline, self.where)
            except Closed as exc:
                conn.sock.close()
                if exc.received == 0 and reused and attempt == 1:
                    continue  # the server had closed the idle connection: resend once
                if exc.received == 0:
                    raise HookError(
                        f"{self.where} closed the connection without answering"
                    ) from None
                raise HookError(
                    f"{self.where} closed the connection in the middle of its answer"
                ) from None
            except TimeoutError:
                conn.sock.close()
                raise HookError(
                    f"no complete answer from {self.where} within {self.timeout:g} s "
                    "(timeoutSeconds); the call was abandoned"
                ) from None
            except ssl.SSLError as exc:
                conn.sock.close()
                raise HookError(f"TLS error talking to {self.where}: {exc.reason}") from None
            except OSError as exc:
                conn.sock.close()
                raise HookError(
                    f"network error talking to {self.where}: {exc.strerror or exc}"
                ) from None
            except BaseException:
                conn.sock.close()
                raise
            if answer.keep:
                self._release(conn)
            else:
                conn.sock.close()
            return answer
        raise AssertionError("unreachable")  # pragma: no cover

    def _acquire(self, deadline: float, *, fresh: bool = False) -> tuple[Conn, bool]:
        with self._lock:
            if fresh:  # after a stale connection the others are likely stale too
                close_all(self._idle)
            while self._idle:
                conn = self._idle.pop()
                if still_open(conn):
                    return conn, True
                conn.sock.close()
        return Conn(self._connect(deadline)), False

    def _release(self, conn: Conn) -> None:
        with self._lock:
            if len(self._idle) < MAX_IDLE and self._finalizer.alive:
                self._idle.append(conn)
                return
        conn.sock.close()

    def _connect(self, deadline: float) -> socket.socket:
        hostport = f"{self._host}:{self._port}"
        try:
            infos = resolve(self._host, self._port, deadline)
        except TimeoutError:
            raise HookError(
                f"could not resolve {self._host} within {self.timeout:g} s (timeoutSeconds)"
            ) from None
        except OSError as exc:
            raise HookError(
                f"cannot resolve host {self._host!r} of {self.where}: {exc.strerror or exc}"
            ) from None
        failure: OSError | None = None
        for family, socktype, proto, _, addr in infos:
            sock = socket.socket(family, socktype, proto)
            try:
                sock.settimeout(left(deadline))
                sock.connect(addr)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if self._tls:
                    sock.settimeout(left(deadline))
                    return self._tls_context().wrap_socket(sock, server_hostname=self._host)
                return sock
            except TimeoutError:
                sock.close()
                raise HookError(
                    f"could not connect to {hostport} ({self.where}) within "
                    f"{self.timeout:g} s (timeoutSeconds)"
                ) from None
            except ssl.SSLCertVerificationError as exc:
                sock.close()
                raise HookError(
                    f"TLS certificate of {hostport} rejected: {exc.verify_message}"
                ) from None
            except ssl.SSLError as exc:
                sock.close()
                raise HookError(f"TLS handshake with {hostport} failed: {exc.reason}") from None
            except OSError as exc:
                sock.close()
                failure = exc
        if isinstance(failure, ConnectionRefusedError):
            raise HookError(
                f"connection refused by {hostport} ({self.where}); is the hook server running?"
            )
        why = (failure.strerror or str(failure)) if failure else "no address"
        raise HookError(f"cannot connect to {hostport} ({self.where}): {why}")

    def _tls_context(self) -> ssl.SSLContext:
        with self._lock:
            if self._ssl is None:
                self._ssl = ssl.create_default_context()
            return self._ssl


def request_body(point: str, ctx: Context, req_id: int) -> bytes:
    """The JSON-RPC request for `ctx` at `point`, as the hook gets it (a `command:` hook too)."""
    return _encode(
        # wire_params: our names and, beside them, the other the-loop's (`provider`,
        # `command`, `harness_session_id`), for its hooks (issue 20.16, issue 30.9)
        {"jsonrpc": "2.0", "method": point, "params": wire_params(ctx), "id": req_id}
    ).encode("ascii")


def read_answer(where: str, point: str, req_id: int, doc: Any) -> Decisions | None:
    """Check a JSON-RPC response and turn its result into a patch of decisions (what a
    `command:` hook prints is read by it too)."""
    bad = f"the answer from {where} is not a JSON-RPC 2.0 response"
    if not isinstance(doc, dict):
        raise HookError(f"{bad}: expected an object, got {_json_type(doc)}")
    if doc.get("jsonrpc") != "2.0":
        raise HookError(f'{bad}: "jsonrpc" must be "2.0", got {_short(doc.get("jsonrpc"))}')
    has_result, has_error = "result" in doc, "error" in doc
    if has_result == has_error:
        which = "both" if has_result else "neither"
        raise HookError(f'{bad}: it must carry exactly one of "result" and "error", got {which}')
    answer_id = doc.get("id")
    id_matches = type(answer_id) is int and answer_id == req_id
    if has_error and (id_matches or answer_id is None):
        raise HookError(_error_text(where, doc["error"]))
    if not id_matches:
        raise HookError(f"{bad}: its id {_short(answer_id)} does not match the request's {req_id}")
    result = doc["result"]
    if result is None:
        return None
    if not isinstance(result, dict):
        raise HookError(
            f"the result from {where} must be null or an object of decisions, got "
            f"{_json_type(result)}"
        )
    decisions = _DECISIONS[point]
    values = {k: v for k, v in result.items() if k in decisions}
    dropped = [k for k in result if k not in decisions]
    return Decisions(values=values, dropped=dropped)


def _error_text(where: str, error: Any) -> str:
    if not (
        isinstance(error, dict)
        and type(error.get("code")) is int
        and isinstance(error.get("message"), str)
    ):
        return (
            f"the answer from {where} carries a malformed error member (expected "
            f'{{"code": int, "message": str}}, got {_short(error)})'
        )
    text = f"JSON-RPC error {error['code']} {quote(error['message'])} from {where}"
    if "data" in error:
        text += f" (data: {_short(error['data'])})"
    return text


def _server_says(body: bytes) -> str:
    """A short quote of an error page: the JSON-RPC message when there is one."""
    if not body:
        return ""
    try:
        doc = json.loads(body)
        message = doc["error"]["message"]
        if isinstance(message, str):
            return f": {quote(message)}"
    except (ValueError, RecursionError, KeyError, TypeError):
        pass
    text = " ".join(body[:MAX_TEXT].decode("utf-8", "replace").split())
    return f": {quote(text)}" if text else ""


def _short(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + "…"


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
             int: "a number", float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _redact(text: str, token: str) -> str:
    return text.replace(token, "[redacted]") if token else text


def _redact_doc(doc: Any, token: str) -> Any:
    """A decoded answer with the token removed from every string: JSON can spell a token
    in many escaped forms, its decoded text in one."""
    if not token:
        return doc
    if isinstance(doc, str):
        return doc.replace(token, "[redacted]")
    if isinstance(doc, dict):
        return {_redact_doc(k, token): _redact_doc(v, token) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_redact_doc(v, token) for v in doc]
    return doc


def _redact_bytes(body: bytes, token: str) -> bytes:
    """`body` without the token, raw or as JSON would escape it."""
    if not token:
        return body
    for form in {token, json.dumps(token)[1:-1]}:
        body = body.replace(form.encode("utf-8"), b"[redacted]")
    return body
