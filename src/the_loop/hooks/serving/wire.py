"""What every hook server's HTTP side shares: JSON-RPC codes, the request cap, `Reply`.

The routing, auth and limits themselves are decided once, in `core.Core`; a server writes
the `Reply` it gets. Every error body is a JSON-RPC error object (`error_reply`).

`read_json` and `NotUnicode` (how every JSON body is read) live in `the_loop.jsonread`, which
the runtime's control plane uses too; they are named here as well for the serving modules.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from http import HTTPStatus

from the_loop.jsonread import NotUnicode as NotUnicode
from the_loop.jsonread import read_json as read_json

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
HOOK_RAISED = -32000
UNAUTHORIZED = -32001

MAX_REQUEST = 1 << 20  # bytes of request body


JSON_TYPE = "application/json"
REVISION_HEADER = "X-Policy-Revision"


@dataclass(frozen=True)
class Reply:
    """An HTTP answer, independent of the server that writes it."""

    status: int
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()
    close: bool = False
    content_type: str = JSON_TYPE
    revision: str = ""  # the policy revision that answered (header X-Policy-Revision)


def route_of(path: str) -> str:
    """The last segment of a request path, without its query ('health', 'ready', …)."""
    return path.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]


def is_health(path: str) -> bool:
    """Whether a request path asks for the health check (any path ending in /health)."""
    return path.split("?", 1)[0].rstrip("/").endswith("/health")


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
