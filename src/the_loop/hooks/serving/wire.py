"""The HTTP layer every hook server shares: JSON-RPC codes, `Reply`, and `http_reply` routing.

`HookServer` (http.server) and the WSGI app (gunicorn and friends) both hand each HTTP
request to `http_reply` and write the `Reply` it returns, so health, authentication and
size limits are decided once:

- `GET` (or `HEAD`) on any path ending in `/health` answers the health body, open to all;
  any other `GET` is 404, other methods 405.
- `POST` to any path is a JSON-RPC call: 401 without `Authorization: Bearer $token_env`
  when a token is set (constant-time compare), 411 without a length, 400 for a malformed
  one, 413 over `MAX_REQUEST`. Every error body is a JSON-RPC error object.

`read_json` is how every JSON body is read — a hook server's request, `serve`'s control
plane, a hook's answer, `hooks run --context` — so text that is not Unicode (bytes that are
not UTF-8, a lone surrogate) is refused the same way everywhere (docs/security.md).
"""

from __future__ import annotations

import hmac
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
HOOK_RAISED = -32000
UNAUTHORIZED = -32001

MAX_REQUEST = 1 << 20  # bytes of request body
_MAX_LENGTH_DIGITS = 12  # a Content-Length longer than this is over the cap, whatever it says


#: A `\uD800`–`\uDFFF` escape: only a body holding one can parse to a lone surrogate.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class NotUnicode(ValueError):
    """A JSON body that is not Unicode text; `str()` completes "the body …"."""


def read_json(body: bytes | str, **options: Any) -> Any:
    """`json.loads(body, **options)` for a body that must be Unicode text (issue 20, item 8).

    Refused with `NotUnicode`: bytes that are not UTF-8 (UTF-8-encoded surrogates included,
    which `json.loads` on bytes would let through), and a string holding a lone surrogate
    (`"\ud800"` with no partner: valid JSON syntax, but no character). Such a string cannot
    be stored, matched by RE2, written to a log or encoded again, so it is refused where it
    comes in instead of failing later in whatever touches it. A surrogate pair is a
    character and passes. Other errors are `json.loads`'s own (`ValueError`,
    `RecursionError`).
    """
    if isinstance(body, str):
        text = body
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise _lone(exc) from None
    else:
        try:
            text = body.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise NotUnicode(f"is not UTF-8 (byte 0x{body[exc.start]:02x} at offset "
                             f"{exc.start}); send UTF-8 text") from None
    doc = json.loads(text, **options)
    if _SURROGATE_ESCAPE.search(text):  # rare: only then is the document walked again
        try:
            json.dumps(doc, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as exc:
            raise _lone(exc) from None
    return doc


def _lone(exc: UnicodeEncodeError) -> NotUnicode:
    code = ord(exc.object[exc.start])
    return NotUnicode(f"holds a lone surrogate (\\u{code:04x}), which is not a character; "
                      "a character is written as itself or as a surrogate pair")


@dataclass(frozen=True)
class Reply:
    """An HTTP answer, independent of the server that writes it."""

    status: int
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()
    close: bool = False


def is_health(path: str) -> bool:
    """Whether a request path asks for the health check (any path ending in /health)."""
    return path.split("?", 1)[0].rstrip("/").endswith("/health")


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
        if is_health(route):
            return Reply(200, health)
        return _error(404, f"no such page {route[:80]!r}; POST JSON-RPC calls to this server, "
                           "GET /health lists the points it serves")
    if method != "POST":
        return _error(405, f"{method[:20]} is not supported; POST calls, GET /health",
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
        length_text = content_length.strip()
        if not (length_text.isascii() and length_text.isdigit()):
            return _error(400, f"bad Content-Length {content_length[:40]!r}; expected a "
                               "number of bytes", close=True)
        if len(length_text) > _MAX_LENGTH_DIGITS:
            return _error(413, f"a Content-Length of {len(length_text)} digits; the cap is "
                               f"{MAX_REQUEST} bytes", close=True)
        length = int(length_text)
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


def error_reply(status: int, message: str, headers: tuple[tuple[str, str], ...] = (), *,
                close: bool = True, code: int = INVALID_REQUEST) -> Reply:
    """An HTTP error (closing unless told otherwise) whose body is a JSON-RPC error object."""
    return _error(status, message, headers, close=close, code=code)


def reason_of(status: int) -> str:
    """The reason phrase of an HTTP status."""
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"
