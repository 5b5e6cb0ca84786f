"""One caller's connection to `HookServer` (`server.py`): an asyncio protocol on httptools.

As in uvicorn's httptools protocol, the connection frames requests and hands each to a
`Cycle`, one request from its first byte to its answer; `core.Core` decides. Answers go out
in request order, each in one write, and only the event loop writes: a hook class's call
runs in `Core.pool`, and the thread that ran it hands the answer back to the loop
(`loop.call_soon_threadsafe`), touching nothing else. Every field here is the loop's.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import socket
from typing import Any, Protocol

import httptools

from the_loop.hooks.serving.core import Core
from the_loop.hooks.serving.wire import (
    JSON_TYPE,
    MAX_REQUEST,
    REVISION_HEADER,
    Reply,
    reason_of,
)

MAX_HEAD = 64 * 1024  # bytes of request line + headers
MAX_PIPELINED = 32  # requests read ahead of their answers on one connection
SLICE = 4096  # bytes parsed at a time from a longer read, so a full queue stops the parsing


class Host(Protocol):
    """What a connection reads from its server (`server.HookServer`)."""

    core: Core
    loop: asyncio.AbstractEventLoop
    conns: set[Connection]
    idle_timeout: float
    request_timeout: float
    head_timeout: float
    max_connections: int


_SERVER = b"Server: the-loop-hooks\r\n"
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


class _Limit(Exception):
    """A request's head broke a limit: answer `reply` and close."""

    def __init__(self, reply: Reply) -> None:
        super().__init__(reply.status)
        self.reply = reply


class Cycle:
    """One request: what its head said and its body while it is read, then its answer.

    `reply` is set when the request is decided: at its head (a refusal, /health), by an
    inline call, or when its call in the pool returns; `running` while that call runs."""

    __slots__ = ("authorization", "body", "chunked", "head", "head_began", "head_size",
                 "in_head", "keep", "lengths", "owes_100", "reply", "running", "url")

    def __init__(self, reply: Reply | None = None) -> None:
        self.url = b""
        self.authorization: str | None = None
        self.lengths: list[str] = []
        self.chunked = False
        self.owes_100 = False  # `Expect: 100-continue`, not answered yet
        self.in_head = True  # between the request's first byte and the end of its head
        self.head_began = True  # in the read being parsed: that read's bytes do not count
        self.head_size = 0  # bytes of the head read after the read it began in
        self.body: list[bytes] = []
        self.head = False  # a HEAD request: its answer has no body
        self.keep = False  # the connection stays open after the answer
        self.reply = reply
        self.running = False


class Connection(asyncio.Protocol):
    """One client connection: frame, queue in order, answer, keep alive or close."""

    def __init__(self, server: Host) -> None:
        self.server = server
        self.core = server.core
        self.loop = server.loop
        self.transport: Any = None
        self.parser: Any = None
        self.peer = ""
        self.cycle: Cycle | None = None  # the request being read
        self.queue: collections.deque[Cycle] = collections.deque()  # read, not yet answered
        self.paused = False  # reading paused: the queue is full or the caller reads nothing
        self.write_paused = False
        self.deadline: float | None = None  # closed at this time (loop.time())
        self.stalled: float | None = None  # answers unread since: hung up on at this time
        self.eof = False  # the caller half-closed: answer what it sent, then close
        self.held = b""  # bytes read but not parsed yet: they wait for the queue to drain
        self.failed = False  # a request could not be read: nothing after it is parsed

    # ------------------------------------------------------------------ asyncio protocol

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        server = self.server
        server.conns.add(self)
        if len(server.conns) > server.max_connections:
            reply = self.core.refuse(503, f"over {server.max_connections} open connections; "
                                          "retry in a second", (("Retry-After", "1"),))
            self._write(reply, keep=False, head=False)
            return
        peer = transport.get_extra_info("peername")
        self.peer = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        with contextlib.suppress(OSError, AttributeError):
            transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP,
                                                          socket.TCP_NODELAY, 1)
        self.parser = httptools.HttpRequestParser(self)
        # until its first request is whole, a connection has `head_timeout`, not the idle
        # deadline: idle sockets opened by the thousand cannot hold the cap (issue 31, 17)
        self.deadline = self.loop.time() + min(server.head_timeout, server.idle_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.conns.discard(self)

    def data_received(self, data: bytes) -> None:
        if len(data) <= SLICE:
            self._feed(data)
            return
        for at in range(0, len(data), SLICE):
            if len(self.queue) >= MAX_PIPELINED and not self.failed:
                self.held = data[at:]  # parsed once the answers before it drain
                self._pause()
                return
            self._feed(data[at:at + SLICE])

    def _feed(self, data: bytes) -> None:
        if self.failed or self.transport.is_closing():
            return
        try:
            self.parser.feed_data(data)
            self._count_head(len(data))
        except _Limit as limit:
            self._fail(limit.reply)
        except httptools.HttpParserUpgrade:
            self._fail(self.core.refuse(400, "protocol upgrades are not supported"))
        except httptools.HttpParserError as exc:
            self._fail(self._unreadable(exc))

    def _count_head(self, read: int) -> None:
        """Count a head still unfinished after a read (from the read after the one it began
        in: a head is cut at MAX_HEAD plus at most one SLICE, and requests pipelined before
        it never count)."""
        cycle = self.cycle
        if cycle is not None and cycle.in_head:
            if cycle.head_began:
                cycle.head_began = False
            else:
                cycle.head_size += read
            if cycle.head_size > MAX_HEAD:
                raise _Limit(self.core.refuse(431, f"request head over {MAX_HEAD} bytes"))

    def _unreadable(self, exc: httptools.HttpParserError) -> Reply:
        cause = exc.__context__
        if isinstance(cause, _Limit):
            return cause.reply
        if "Content-Length overflow" in str(exc):
            return self.core.refuse(413, "a Content-Length too long to read; the cap is "
                                         f"{MAX_REQUEST} bytes")
        return self.core.refuse(400, f"malformed HTTP request ({_why(exc)})")

    def eof_received(self) -> bool:
        """The caller shut its side: answer the requests it finished, then close."""
        self.eof = True
        return self.cycle is None and bool(self.queue)

    def pause_writing(self) -> None:
        self.write_paused = True
        self.stalled = self.loop.time() + self.server.request_timeout
        self._pause()

    def resume_writing(self) -> None:
        self.write_paused = False
        self.stalled = None
        self._next()

    # ---------------------------------------------------------------- httptools callbacks

    def on_message_begin(self) -> None:
        self.cycle = Cycle()
        self.deadline = self.loop.time() + self.server.request_timeout

    def on_url(self, url: bytes) -> None:
        assert self.cycle is not None
        self.cycle.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        cycle = self.cycle
        assert cycle is not None
        lower = name.lower()
        if lower == b"authorization":
            cycle.authorization = value.decode("latin-1")
        elif lower == b"content-length":
            cycle.lengths.append(value.decode("latin-1"))
        elif lower == b"transfer-encoding":
            cycle.chunked = True
        elif lower == b"expect" and value.strip().lower() == b"100-continue":
            cycle.owes_100 = True

    def on_headers_complete(self) -> None:
        cycle = self.cycle
        assert cycle is not None
        cycle.in_head = False
        parser = self.parser
        if parser.should_upgrade():  # one answer, before llhttp stops at the head
            raise _Limit(self.core.refuse(400, "protocol upgrades are not supported"))
        method = parser.get_method().decode("latin-1")
        cycle.head = method == "HEAD"
        decided = self.core.head(method, cycle.url.decode("latin-1"), cycle.authorization,
                                 cycle.lengths, chunked=cycle.chunked)
        if isinstance(decided, Reply):
            if decided.close:
                raise _Limit(decided)  # refuse now: never read a body we would not use
            cycle.reply = decided
            cycle.owes_100 = False
        elif cycle.owes_100:
            cycle.owes_100 = parser.get_http_version() == "1.1"
            self._continue()

    def on_body(self, body: bytes) -> None:
        cycle = self.cycle
        assert cycle is not None
        cycle.owes_100 = False  # the caller did not wait for it
        if cycle.reply is None:
            cycle.body.append(body)

    def on_message_complete(self) -> None:
        cycle = self.cycle
        assert cycle is not None
        self.cycle = None
        cycle.keep = bool(self.parser.should_keep_alive())
        self.deadline = None
        self.queue.append(cycle)
        if len(self.queue) >= MAX_PIPELINED:
            self._pause()
        self._next()

    # ------------------------------------------------------------------------- answering

    def _next(self) -> None:
        """Write the queued answers in request order as far as they are decided, starting
        the first undecided one's call (inline, or in the pool); then `_after_answers`."""
        transport = self.transport
        queue = self.queue
        while queue and not self.write_paused and not transport.is_closing():
            cycle = queue[0]
            if cycle.reply is None:
                if cycle.running:
                    break
                if not self.core.inline:
                    self._start(cycle)
                    break
                cycle.reply = self.core.call(b"".join(cycle.body), self.peer)
            queue.popleft()
            self._write(cycle.reply, cycle.keep, cycle.head)
        if not transport.is_closing():
            self._after_answers()

    def _after_answers(self) -> None:
        """What is due once the answers that can go out are out: close after a half-close,
        resume reading, the idle deadline, or the `100 Continue` owed to the request being
        read."""
        queue = self.queue
        if self.eof and not queue and not self.held:
            self.transport.close()
            return
        if len(queue) < MAX_PIPELINED:
            self._resume()
        if not queue:
            if self.cycle is None:
                self.deadline = self.loop.time() + self.server.idle_timeout
            elif self.cycle.owes_100:
                self._continue()

    def _start(self, cycle: Cycle) -> None:
        """Run the cycle's call in the pool; its thread hands the answer back to the loop."""
        cycle.running = True
        self.core.pool.run(self.core.call, (b"".join(cycle.body), self.peer),
                           lambda reply, failure: _soon(self.loop, self._answered, cycle,
                                                        reply, failure))

    def _answered(self, cycle: Cycle, reply: Reply | None, failure: BaseException | None
                  ) -> None:
        """On the loop: the pool's answer to `cycle`; write it and go on."""
        cycle.running = False
        if isinstance(failure, concurrent.futures.CancelledError):  # the server shut down
            return
        if reply is None:  # the caller gets a 500, never silence
            reply = self.core.refuse(500, f"internal error: {type(failure).__name__}")
        cycle.reply = reply
        self._next()

    def _continue(self) -> None:
        """Send `100 Continue` for the request being read once every answer before it is
        out (an interim answer never overtakes an earlier request's), unless its body has
        begun to come anyway (issue 31, item 13: curl waited a second per call)."""
        cycle = self.cycle
        if (cycle is not None and cycle.owes_100 and not self.queue
                and not self.transport.is_closing()):
            cycle.owes_100 = False
            self.transport.write(_CONTINUE)

    def _write(self, reply: Reply, keep: bool, head: bool) -> None:
        close = reply.close or not keep
        data = _common(reply, not close and not head)
        if data is None:
            data = _framed(reply, close, head)
        self.transport.write(data)  # one write: no header/body split
        if close:
            self.deadline = None
            self.transport.close()

    def _fail(self, reply: Reply) -> None:
        """A request that cannot be read: answer it after those before it, then close."""
        self.cycle = None
        self.failed = True
        self.queue.append(Cycle(reply))
        self._next()
        self._pause()

    def _pause(self) -> None:
        if not self.paused and not self.transport.is_closing():
            self.paused = True
            self.transport.pause_reading()

    def _resume(self) -> None:
        if self.paused and not self.write_paused and not self.transport.is_closing():
            self.paused = False
            if self.held:
                held, self.held = self.held, b""
                self.data_received(held)
                if self.paused or self.transport.is_closing():
                    return
            self.transport.resume_reading()

    def expire(self, now: float) -> None:
        """Hang up when the client overran its deadline (idle, or a request too slow), or
        left its answers unread for `request_timeout` (cut off: a close would wait for it
        to read them, holding its slot under the connection cap for good)."""
        if self.stalled is not None and now >= self.stalled:
            self.transport.abort()
        elif self.deadline is not None and now >= self.deadline:
            self.deadline = None
            self.transport.close()
            if self.transport.get_write_buffer_size():
                self.stalled = now + self.server.request_timeout


def _soon(loop: asyncio.AbstractEventLoop, fn: Any, *args: Any) -> None:
    """From a pool thread: `fn(*args)` on the loop (gone after a shutdown: dropped)."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(fn, *args)


def _common(reply: Reply, plain: bool) -> bytes | None:
    """The bytes of the common answer (200, JSON, kept alive) in one format; None for
    any other, which `_framed` builds."""
    if not (plain and reply.status == 200 and not reply.close and not reply.headers
            and reply.content_type is JSON_TYPE):
        return None
    body = reply.body
    if reply.revision:
        return _OK_REV % (reply.revision.encode("latin-1"), len(body), body)
    return _OK % (len(body), body)


def _framed(reply: Reply, close: bool, head: bool) -> bytes:
    """Any answer: status line, headers (`Connection: close` when `close`), then its body
    unless it answers a HEAD."""
    status = reply.status
    parts = [_status_line(status), _SERVER]
    if status != 204:
        parts.append(b"Content-Type: %s\r\nContent-Length: %d\r\n"
                     % (reply.content_type.encode("latin-1"), len(reply.body)))
    if reply.revision:
        parts.append(b"%s: %s\r\n" % (REVISION_HEADER.encode(),
                                        reply.revision.encode("latin-1")))
    parts += [f"{k}: {v}\r\n".encode("latin-1") for k, v in reply.headers]
    if close:
        parts.append(b"Connection: close\r\n")
    parts.append(b"\r\n")
    if not head:
        parts.append(reply.body)
    return b"".join(parts)


_OK = (b"HTTP/1.1 200 OK\r\n" + _SERVER
       + b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s")
_OK_REV = (b"HTTP/1.1 200 OK\r\n" + _SERVER + REVISION_HEADER.encode() + b": %s\r\n"
           + b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s")
_STATUS_LINES: dict[int, bytes] = {}


def _status_line(status: int) -> bytes:
    line = _STATUS_LINES.get(status)
    if line is None:
        line = _STATUS_LINES[status] = b"HTTP/1.1 %d %s\r\n" % (status,
                                                                  reason_of(status).encode())
    return line


def _why(exc: Exception) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text[:80]
