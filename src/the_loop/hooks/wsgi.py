"""The HTTP layer every host shares (`http_reply`), and the WSGI app for gunicorn and friends.

`make_wsgi_app(executor, token_env="")` answers exactly as `HookServer` does: `GET /health`
open to all (the points served), POST to any path for a JSON-RPC call, 401 without
`Authorization: Bearer $token_env` when a token is set (constant-time compare), 413 over
`MAX_REQUEST`. Slow clients are the WSGI server's business (gunicorn's `--timeout`, a proxy
in front of sync workers, or `--worker-class gthread`).

gunicorn loads a hook class from environment variables through `app_from_env()`:

    THE_LOOP_HOOK_PATH=/srv/hooks/compliance.py \\
    THE_LOOP_HOOK_TOKEN_ENV=COMPLIANCE_TOKEN \\
    gunicorn -w 2 -k gthread -b 127.0.0.1:8765 'the_loop.hooks.wsgi:app_from_env()'

- `THE_LOOP_HOOK_PATH` (a .py file) or `THE_LOOP_HOOK_MODULE` (a dotted module): exactly one.
- `THE_LOOP_HOOK_EXECUTOR`: the class, when the module defines several.
- `THE_LOOP_HOOK_WITH`: constructor keyword arguments, a JSON object.
- `THE_LOOP_HOOK_TOKEN_ENV`: the NAME of the variable holding the bearer token.
"""

from __future__ import annotations

import hmac
import json
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

    from the_loop.hooks.server import AnyExecutor

MAX_REQUEST = 1 << 20  # bytes of request body
UNAUTHORIZED = -32001
INVALID_REQUEST = -32600
ENV_PREFIX = "THE_LOOP_HOOK_"


@dataclass(frozen=True)
class Reply:
    """An HTTP answer, independent of the server that writes it."""

    status: int
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()
    close: bool = False


def http_reply(
    *,
    answer: Callable[[bytes], bytes],
    health: bytes,
    token_env: str,
    method: str,
    path: str,
    authorization: str | None,
    content_length: str | None,
    read: Callable[[int], bytes],
    unsized: bool = False,
) -> Reply:
    """Route one HTTP request: health, auth, size cap, then `answer(body)` (JSON-RPC).

    `read(n)` returns up to n body bytes. With `unsized` (the server already de-chunked the
    body), a request without Content-Length is read up to the cap.
    """
    route = path.split("?", 1)[0]
    if method in ("GET", "HEAD"):
        if route.rstrip("/") == "/health":
            return Reply(200, health)
        return _error(404, f"no such page {route!r}; POST JSON-RPC calls to this server, "
                           "GET /health lists the points it serves")
    if method != "POST":
        return _error(405, f"{method} is not supported; POST calls, GET /health",
                      (("Allow", "GET, POST"),))
    if token_env:
        expected = os.environ.get(token_env, "")
        given = (authorization or "").encode("utf-8", "replace")
        wanted = f"Bearer {expected}".encode("utf-8", "replace")
        if not (expected and hmac.compare_digest(given, wanted)):
            return _error(401, "unauthorized: missing or wrong bearer token",
                          (("WWW-Authenticate", "Bearer"),), close=True, code=UNAUTHORIZED)
    if not content_length:
        if not unsized:
            return _error(411, "send the body with a Content-Length header", close=True)
        body = read(MAX_REQUEST + 1)
    else:
        if not content_length.isdigit():
            return _error(400, f"bad Content-Length {content_length[:40]!r}", close=True)
        length = int(content_length)
        if length > MAX_REQUEST:
            return _error(413, f"request of {length} bytes; the cap is {MAX_REQUEST}",
                          close=True)
        body = read(length)
        if len(body) < length:
            return _error(400, "the body is shorter than its Content-Length", close=True)
    if len(body) > MAX_REQUEST:
        return _error(413, f"request over the cap of {MAX_REQUEST} bytes", close=True)
    out = answer(body)
    return Reply(200, out) if out else Reply(204)


def _error(status: int, message: str, headers: tuple[tuple[str, str], ...] = (), *,
           close: bool = False, code: int = INVALID_REQUEST) -> Reply:
    body = {"jsonrpc": "2.0", "error": {"code": code, "message": message}, "id": None}
    return Reply(status, json.dumps(body, separators=(",", ":")).encode("ascii"), headers,
                 close)


def error_reply(status: int, message: str) -> Reply:
    """A closing HTTP error whose body is a JSON-RPC error object."""
    return _error(status, message, close=True)


def reason_of(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


def make_wsgi_app(executor: AnyExecutor, token_env: str = "") -> WSGIApplication:
    """A WSGI application serving `executor` (same protocol, auth, health and limits)."""
    from the_loop.hooks.server import handle_request, health_body

    health = health_body(executor)

    def answer(body: bytes) -> bytes:
        return handle_request(executor, body)

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        stream = environ["wsgi.input"]
        reply = http_reply(
            answer=answer, health=health, token_env=token_env,
            method=str(environ.get("REQUEST_METHOD", "GET")),
            path=str(environ.get("PATH_INFO", "/")),
            authorization=environ.get("HTTP_AUTHORIZATION"),
            content_length=environ.get("CONTENT_LENGTH") or None,
            read=stream.read, unsized=True,
        )
        headers = list(reply.headers)
        if reply.status != 204:
            headers += [("Content-Type", "application/json"),
                        ("Content-Length", str(len(reply.body)))]
        start_response(f"{reply.status} {reason_of(reply.status)}", headers)
        return [b""] if environ.get("REQUEST_METHOD") == "HEAD" else [reply.body]

    return app


def app_from_env(environ: Mapping[str, str] | None = None) -> WSGIApplication:
    """The WSGI app for the hook class named by THE_LOOP_HOOK_* variables (see above)."""
    from the_loop.errors import HooksConfigError
    from the_loop.hooks.serve_cli import load_executor

    env = os.environ if environ is None else environ
    path = env.get(f"{ENV_PREFIX}PATH", "")
    module = env.get(f"{ENV_PREFIX}MODULE", "")
    if bool(path) == bool(module):
        raise HooksConfigError(
            f"set exactly one of {ENV_PREFIX}PATH (a .py file) and {ENV_PREFIX}MODULE (a "
            f"dotted module) to name the hook class to serve; got "
            f"{'both' if path else 'neither'}"
        )
    raw_with = env.get(f"{ENV_PREFIX}WITH", "") or "{}"
    try:
        with_: Any = json.loads(raw_with)
    except ValueError:
        with_ = None
    if not isinstance(with_, dict):
        raise HooksConfigError(
            f"{ENV_PREFIX}WITH: expected a JSON object of constructor keyword arguments, "
            f"got {raw_with[:80]!r}"
        )
    token_env = env.get(f"{ENV_PREFIX}TOKEN_ENV", "")
    if token_env and not os.environ.get(token_env):
        raise HooksConfigError(
            f"{ENV_PREFIX}TOKEN_ENV names {token_env}, which is unset or empty; export the "
            "token (the server refuses to start rather than accept every caller)"
        )
    names = {"path": f"{ENV_PREFIX}PATH", "module": f"{ENV_PREFIX}MODULE",
             "executor": f"{ENV_PREFIX}EXECUTOR", "with": f"{ENV_PREFIX}WITH"}
    executor = load_executor(path=path or None, module=module or None,
                             executor=env.get(f"{ENV_PREFIX}EXECUTOR", ""), with_=with_,
                             names=names)
    return make_wsgi_app(executor, token_env=token_env)
