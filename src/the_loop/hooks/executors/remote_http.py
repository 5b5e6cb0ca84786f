"""HTTP/1.1 for the remote executor: connections, and answers read under one deadline.

Every socket operation gets only the time left before the call's deadline (`left`): a
plain socket is non-blocking and waits in `poll` for that long, a TLS socket in its own
timeout. So a server that trickles its answer, or never reads, cannot stretch a call.
httptools (llhttp, the parser uvicorn uses) frames the bytes read — status line, headers,
Content-Length, chunks — so duplicate lengths, bad chunk sizes and the like are judged by
kept code; a body with neither length nor chunks ends with the connection. Bodies are
refused past `MAX_RESPONSE` without reading further. Failures are `HookError`s with a
message for a person; a connection closed by the server is `Closed` (with the count of
answer bytes read, which decides whether the executor may resend), a deadline is
`TimeoutError`.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import math
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
    """One connection, whose every wait gets only the time left before a deadline.

    A plain socket is non-blocking and waits in `poll` (a call costs one send, one poll and
    one recv, not a `settimeout` and a poll before each); a TLS socket (whose library may
    hold bytes `poll` cannot see), or one where `select.poll` is missing, waits in the
    socket's own timeout, set to the time left before each operation.
    """

    __slots__ = ("poller", "ready", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.ready = False  # a wait saw bytes (or the end) to read
        self.poller: Any = None
        if not isinstance(sock, ssl.SSLSocket) and hasattr(select, "poll"):
            sock.setblocking(False)
            self.poller = select.poll()
            self.poller.register(sock, select.POLLIN)

    def send(self, data: bytes, deadline: float) -> None:
        """Send all of `data` before `deadline`, then wait for the answer's first bytes
        (TimeoutError when the deadline passes)."""
        sock = self.sock
        if self.poller is None:
            sock.settimeout(left(deadline))
            sock.sendall(data)
            return
        try:
            sent = sock.send(data)
        except BlockingIOError:
            sent = 0
        if sent < len(data):  # the socket's buffer is full: wait for room, then the rest
            view = memoryview(data)[sent:]
            while view:
                self._wait(select.POLLOUT, deadline)
                with contextlib.suppress(BlockingIOError):
                    view = view[sock.send(view):]
        self._wait(select.POLLIN, deadline)
        self.ready = True

    def recv(self, deadline: float) -> bytes:
        """The next bytes the server sent (b"" at its end), waiting at most until
        `deadline` (TimeoutError when it passes)."""
        sock = self.sock
        if self.poller is None:
            sock.settimeout(left(deadline))
            return sock.recv(65536)
        while True:
            if self.ready:
                self.ready = False
            else:
                self._wait(select.POLLIN, deadline)
            try:
                return sock.recv(65536)
            except BlockingIOError:  # woken with nothing to read: wait again
                pass

    def _wait(self, event: int, deadline: float) -> None:
        poller = self.poller
        if event != select.POLLIN:
            poller.modify(self.sock, event)
        try:
            while not poller.poll(math.ceil(left(deadline) * 1000)):
                pass  # poll rounds to milliseconds: `left` ends the wait once none are left
        finally:
            if event != select.POLLIN:
                poller.modify(self.sock, select.POLLIN)


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


def still_open(conn: Conn) -> bool:
    """An idle connection is usable only if nothing (not even EOF) is waiting on it."""
    sock = conn.sock
    if conn.poller is not None:  # non-blocking: one peek tells
        try:
            sock.recv(1, socket.MSG_PEEK)
        except BlockingIOError:
            return True
        except OSError:
            return False
        return False  # EOF, or bytes nobody asked for
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

    __slots__ = ("conn", "deadline", "received")

    def __init__(self, conn: Conn, deadline: float) -> None:
        self.conn = conn
        self.deadline = deadline
        self.received = 0

    def recv(self) -> bytes:
        try:
            data = self.conn.recv(self.deadline)
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


_READ = {b"location": "location", b"transfer-encoding": "transfer-encoding",
         b"content-length": "content-length"}  # the headers an answer is judged by


class _Message:
    """httptools' callbacks for one answer: status, the headers a call reads (`_READ`;
    repeats joined with ", "), body; the limits are checked as the bytes arrive."""

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
        key = _READ.get(name.lower())
        if key is None:
            return
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


def exchange(conn: Conn, request: bytes, deadline: float, where: str) -> Answer:
    """Send `request` and read one HTTP/1.x answer, framed by httptools (llhttp): status,
    headers, a body by Content-Length, chunks or the end of the connection, each wait
    given the time left. The parser is ready before the send, so the thread goes from the
    send straight to waiting for the answer (a server in the same process gets the GIL).
    A connection closed before the request went out is `Closed(0)`."""
    r = Reader(conn, deadline)
    msg = _Message(where)
    parser = msg.parser = httptools.HttpResponseParser(msg)
    try:
        conn.send(request, deadline)
    except (BrokenPipeError, ConnectionResetError):
        raise Closed(0) from None
    while True:
        try:
            data = r.recv()
        except Closed:
            if not (msg.until_close and msg.status):
                raise
            msg.keep = False  # the body ended with the connection
            break
        _feed(parser, msg, data)
        if msg.in_head and not msg.done:  # one header that never ends stops at the cap
            msg.unfinished += len(data)
            if msg.unfinished > MAX_HEAD:
                raise HookError(f"{msg.bad} (headers over {MAX_HEAD} bytes)")
        if msg.done:
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


