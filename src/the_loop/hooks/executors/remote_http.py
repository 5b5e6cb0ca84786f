"""HTTP/1.1 for the remote executor: connections, and answers read under one deadline.

Every socket operation gets only the time left before the call's deadline (`left`), so a
server that trickles its answer cannot stretch a call. httptools (llhttp, the parser
uvicorn uses) frames the bytes read — status line, headers, Content-Length, chunks —
so duplicate lengths, bad chunk sizes and the like are judged by kept code; a body with
neither length nor chunks ends with the connection. Bodies are refused past
`MAX_RESPONSE` without reading further. Failures are `HookError`s with a message for a
person; a connection closed by the server is `Closed` (with the count of answer bytes read,
which decides whether the executor may resend), a deadline is `TimeoutError`.
"""

from __future__ import annotations

import ipaddress
import json
import select
import socket
import ssl
import threading
import time
from typing import Any

import httptools

from the_loop.hooks.engine.executor import HookError

MAX_RESPONSE = 1 << 20  # bytes of body
MAX_HEAD = 64 * 1024  # bytes of status line + headers
MAX_TEXT = 300  # characters of a server's text quoted in an error


class Closed(Exception):
    """The server closed (or reset) the connection; `received` bytes of answer were read."""

    def __init__(self, received: int) -> None:
        super().__init__(received)
        self.received = received


class Conn:
    """One connection: its socket and the bytes read past the last answer."""

    __slots__ = ("buf", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = bytearray()


class Answer:
    """One HTTP answer: status, reason, body, and whether the connection may be reused."""

    __slots__ = ("body", "keep", "reason", "status")

    def __init__(self, status: int, reason: str, body: bytes, keep: bool) -> None:
        self.status = status
        self.reason = reason
        self.body = body
        self.keep = keep


def left(deadline: float) -> float:
    """Seconds left before `deadline`; raises TimeoutError when none are."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError("deadline passed")
    return remaining


def close_all(conns: list[Conn]) -> None:
    while conns:
        conns.pop().sock.close()


def still_open(sock: socket.socket) -> bool:
    """An idle connection is usable only if nothing (not even EOF) is waiting on it."""
    if isinstance(sock, ssl.SSLSocket) and sock.pending():
        return False
    try:
        if hasattr(select, "poll"):
            poller = select.poll()
            poller.register(sock, select.POLLIN | select.POLLPRI)
            return not poller.poll(0)
        readable, _, _ = select.select([sock], [], [], 0)
        return not readable
    except (OSError, ValueError):
        return False


AddrInfo = list[tuple[Any, Any, int, str, Any]]


def resolve(host: str, port: int, deadline: float) -> AddrInfo:
    """getaddrinfo bounded by the deadline (a literal address needs no lookup)."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    box: list[Any] = []

    def lookup() -> None:
        try:
            box.append(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except OSError as exc:
            box.append(exc)

    worker = threading.Thread(target=lookup, name=f"resolve {host}", daemon=True)
    worker.start()
    worker.join(left(deadline))
    if not box:
        raise TimeoutError("name resolution")
    if isinstance(box[0], OSError):
        raise box[0]
    result: AddrInfo = box[0]
    return result


class Reader:
    """Reads an answer's bytes from one connection; every recv gets only the time left."""

    __slots__ = ("deadline", "received", "sock")

    def __init__(self, conn: Conn, deadline: float) -> None:
        self.sock = conn.sock
        self.deadline = deadline
        self.received = 0

    def recv(self) -> bytes:
        self.sock.settimeout(left(self.deadline))
        try:
            data = self.sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            raise Closed(self.received) from None
        if not data:
            raise Closed(self.received)
        self.received += len(data)
        return data


def _too_large(where: str, size: str) -> str:
    return (
        f"the answer from {where} is too large ({size}; the cap is {MAX_RESPONSE} bytes); "
        "nothing was read past the cap"
    )


class _Message:
    """httptools' callbacks for one answer: status, headers (names lowercased, repeats
    joined with ", "), body; the limits are checked as the bytes arrive."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.bad = f"the answer from {where} is not valid HTTP"
        self.parser: Any = None
        self.status = 0
        self.reason = b""
        self.head = 0
        self.in_head = True  # llhttp holds a header until it ends: count the bytes read
        self.unfinished = 0  # bytes read while the head was unfinished
        self.headers: dict[str, str] = {}
        self.body: list[bytes] = []
        self.size = 0
        self.until_close = False  # no length and no chunks: the body ends with the connection
        self.done = False
        self.keep = False
        self.extra = False  # bytes past the answer: never reuse the connection

    def on_message_begin(self) -> None:
        if self.done:
            self.extra = True
            return
        self.reason, self.head, self.headers = b"", 0, {}
        self.in_head, self.unfinished = True, 0

    def on_status(self, reason: bytes) -> None:
        self.reason += reason
        self._count(len(reason) + 13)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value) + 4)
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1").strip()
        self.headers[key] = f"{self.headers[key]}, {text}" if key in self.headers else text

    def _count(self, n: int) -> None:
        self.head += n
        if self.head > MAX_HEAD:
            raise HookError(f"{self.bad} (headers over {MAX_HEAD} bytes)")

    def on_headers_complete(self) -> None:
        self.in_head = False
        if self.done:
            return
        self.status = status = self.parser.get_status_code()
        if status == 101:
            raise HookError(f"HTTP 101 from {self.where}: switching protocols is not part of "
                            "a call")
        if 300 <= status < 400:
            target = self.headers.get("location", "")
            raise HookError(
                f"HTTP {status} {self.reason.decode('latin-1')} from {self.where}"
                + (f" redirecting to {quote(target[:200])}" if target else "")
                + ": redirects are never followed (a bearer token must not travel to another "
                "host); set url to the final address"
            )
        encoding = self.headers.get("transfer-encoding", "").lower()
        if encoding and encoding.rsplit(",", 1)[-1].strip() != "chunked":
            raise HookError(f"{self.bad} (unsupported Transfer-Encoding {quote(encoding)})")
        length = self.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > MAX_RESPONSE:
            raise HookError(_too_large(self.where, f"Content-Length {int(length)}"))
        self.until_close = (status >= 200 and status not in (204, 304) and not encoding
                            and length is None)

    def on_body(self, chunk: bytes) -> None:
        if self.done:
            return
        self.size += len(chunk)
        if self.size > MAX_RESPONSE:
            raise HookError(_too_large(self.where, "more than the cap" if self.until_close
                                       else "a chunked body over the cap"))
        self.body.append(chunk)

    def on_message_complete(self) -> None:
        if self.done:
            return
        if self.status < 200:  # 1xx interim answers (100 Continue) are skipped
            self.body, self.size = [], 0
            return
        self.done = True
        self.keep = bool(self.parser.should_keep_alive())


def read_response(conn: Conn, deadline: float, where: str) -> Answer:
    """Read one HTTP/1.x answer, framed by httptools (llhttp): status, headers, a body by
    Content-Length, chunks or the end of the connection, each read given the time left."""
    r = Reader(conn, deadline)
    msg = _Message(where)
    parser = msg.parser = httptools.HttpResponseParser(msg)
    data = bytes(conn.buf)
    conn.buf.clear()
    while True:
        if data:
            _feed(parser, msg, data)
            if msg.in_head and not msg.done:  # one header that never ends stops at the cap
                msg.unfinished += len(data)
                if msg.unfinished > MAX_HEAD:
                    raise HookError(f"{msg.bad} (headers over {MAX_HEAD} bytes)")
        if msg.done:
            break
        try:
            data = r.recv()
        except Closed:
            if not (msg.until_close and msg.status):
                raise
            msg.keep = False  # the body ended with the connection
            break
    return Answer(msg.status, msg.reason.decode("latin-1"), b"".join(msg.body),
                  msg.keep and not msg.extra)


def _feed(parser: Any, msg: _Message, data: bytes) -> None:
    try:
        parser.feed_data(data)
    except HookError:
        raise
    except httptools.HttpParserUpgrade:
        msg.extra = True  # bytes past the answer's head belong to another protocol
    except httptools.HttpParserError as exc:
        cause = exc.__context__
        if isinstance(cause, HookError):
            raise cause from None
        if msg.done:
            msg.extra = True  # garbage after a complete answer: do not reuse
            return
        why = str(exc).strip() or type(exc).__name__
        raise HookError(f"{msg.bad} ({quote(why[:80])})") from None


def quote(text: str) -> str:
    if len(text) > MAX_TEXT:
        text = text[:MAX_TEXT] + "…"
    return json.dumps(text, ensure_ascii=False)


