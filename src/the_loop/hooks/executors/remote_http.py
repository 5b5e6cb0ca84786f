"""HTTP/1.1 for the remote executor: connections, and answers read under one deadline.

Every socket operation gets only the time left before the call's deadline (`left`), so a
server that trickles its answer cannot stretch a call. Bodies are framed by
Content-Length, chunks or the end of the connection, and refused past `MAX_RESPONSE`
without reading further. Failures are `HookError`s with a message for a person; a
connection closed by the server is `Closed` (with the count of answer bytes read, which
decides whether the executor may resend), a deadline is `TimeoutError`.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import select
import socket
import ssl
import threading
import time
from typing import Any

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
    """Reads an answer from one connection; every recv gets only the time left."""

    __slots__ = ("buf", "deadline", "received", "sock")

    def __init__(self, conn: Conn, deadline: float) -> None:
        self.sock = conn.sock
        self.buf = conn.buf
        self.deadline = deadline
        self.received = 0

    def fill(self) -> None:
        self.sock.settimeout(left(self.deadline))
        try:
            data = self.sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            raise Closed(self.received) from None
        if not data:
            raise Closed(self.received)
        self.received += len(data)
        self.buf += data

    def line(self, limit: int, where: str) -> bytes:
        while True:
            end = self.buf.find(b"\n")
            if end >= 0:
                out = bytes(self.buf[: end + 1])
                del self.buf[: end + 1]
                return out
            if len(self.buf) > limit:
                raise HookError(f"the answer from {where} has a header line over {limit} bytes")
            self.fill()

    def exactly(self, n: int) -> bytes:
        while len(self.buf) < n:
            self.fill()
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def until_close(self, cap: int, where: str) -> bytes:
        with contextlib.suppress(Closed):
            while len(self.buf) <= cap:
                self.fill()
        if len(self.buf) > cap:
            raise HookError(_too_large(where, f"more than {cap} bytes"))
        out = bytes(self.buf)
        self.buf.clear()
        return out


def _too_large(where: str, size: str) -> str:
    return (
        f"the answer from {where} is too large ({size}; the cap is {MAX_RESPONSE} bytes); "
        "nothing was read past the cap"
    )


def read_response(conn: Conn, deadline: float, where: str) -> Answer:
    """Read one HTTP/1.x answer: status, headers, body (framed by length, chunks or close)."""
    r = Reader(conn, deadline)
    bad = f"the answer from {where} is not valid HTTP"
    while True:
        status_line = r.line(MAX_HEAD, where).decode("latin-1").rstrip("\r\n")
        version, _, rest = status_line.partition(" ")
        code, _, reason = rest.partition(" ")
        if not version.startswith("HTTP/1.") or len(code) != 3 or not code.isdigit():
            raise HookError(f"{bad} (status line {quote(status_line[:80])})")
        status = int(code)
        headers = _read_headers(r, where, bad, len(status_line))
        if status == 101:
            raise HookError(f"HTTP 101 from {where}: switching protocols is not part of a call")
        if status >= 200:
            break  # 1xx interim answers (100 Continue) are skipped
    if 300 <= status < 400:
        target = headers.get("location", "")
        raise HookError(
            f"HTTP {status} {reason} from {where}"
            + (f" redirecting to {quote(target[:200])}" if target else "")
            + ": redirects are never followed (a bearer token must not travel to another "
            "host); set url to the final address"
        )
    tokens = {t.strip().lower() for t in headers.get("connection", "").split(",")}
    keep = "close" not in tokens and (version == "HTTP/1.1" or "keep-alive" in tokens)
    encoding = headers.get("transfer-encoding", "").lower()
    if status in (204, 304):
        body = b""
    elif encoding:
        if encoding.rsplit(",", 1)[-1].strip() != "chunked":
            raise HookError(f"{bad} (unsupported Transfer-Encoding {quote(encoding)})")
        body = _read_chunked(r, where, bad)
    elif "content-length" in headers:
        length_text = headers["content-length"]
        if not length_text.isdigit():
            raise HookError(f"{bad} (Content-Length {quote(length_text[:40])})")
        length = int(length_text)
        if length > MAX_RESPONSE:
            raise HookError(_too_large(where, f"Content-Length {length}"))
        body = r.exactly(length)
    else:
        keep = False
        body = r.until_close(MAX_RESPONSE, where)
    if r.buf:
        keep = False  # bytes nobody asked for: never reuse this connection
    return Answer(status, reason, body, keep)


def _read_headers(r: Reader, where: str, bad: str, size: int) -> dict[str, str]:
    """The header block up to its blank line, names lowercased, repeats joined with ", "
    (Content-Length excepted: two that differ are an error); `size` counts the status line
    against `MAX_HEAD`."""
    headers: dict[str, str] = {}
    while True:
        raw = r.line(MAX_HEAD, where)
        size += len(raw)
        if size > MAX_HEAD:
            raise HookError(f"{bad} (headers over {MAX_HEAD} bytes)")
        text = raw.decode("latin-1").rstrip("\r\n")
        if not text:
            return headers
        name, colon, value = text.partition(":")
        if not colon:
            raise HookError(f"{bad} (header line {quote(text[:80])})")
        key = name.strip().lower()
        value = value.strip()
        if key in headers and key != "content-length":
            headers[key] += ", " + value
        elif key in headers and headers[key] != value:
            raise HookError(f"{bad} (conflicting Content-Length headers)")
        else:
            headers[key] = value


def _read_chunked(r: Reader, where: str, bad: str) -> bytes:
    body = bytearray()
    while True:
        size_line = r.line(MAX_HEAD, where).split(b";", 1)[0].strip()
        try:
            size = int(size_line, 16)
        except ValueError:
            raise HookError(
                f"{bad} (chunk size {quote(size_line[:40].decode('latin-1'))})"
            ) from None
        if size < 0:
            raise HookError(f"{bad} (negative chunk size)")
        if size == 0:
            while r.line(MAX_HEAD, where).strip():
                pass  # trailers
            return bytes(body)
        if len(body) + size > MAX_RESPONSE:
            raise HookError(_too_large(where, "a chunked body over the cap"))
        body += r.exactly(size)
        if r.line(MAX_HEAD, where).strip():
            raise HookError(f"{bad} (chunk not followed by CRLF)")


def quote(text: str) -> str:
    if len(text) > MAX_TEXT:
        text = text[:MAX_TEXT] + "…"
    return json.dumps(text, ensure_ascii=False)


