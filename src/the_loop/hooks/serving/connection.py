"""One caller's connection to `HookServer` (`server.py`): an asyncio protocol on httptools.

httptools frames each request; `core.Core` decides; answers go out in request order, each
in one write. A hook class's call runs in `Core.pool`: the thread that ran it, once it is
idle again, sends the common answer itself on a duplicate of the socket (so a closed
socket's number, reused for another caller, is never written to) and wakes the event loop
only when something waits there (more requests, a half-close, paused reading); every other
answer the loop writes. `busy` and what the loop hands over change under one lock.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import functools
import os
import socket
import threading
import time
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


class Duplicates:
    """Sockets duplicated for answers sent from the pool, at most `limit` open at once (a
    connection keeps its duplicate until it closes): a burst of callers costs no more file
    descriptors than the pool has threads; a call on a connection past the bound is
    answered by the loop."""

    def __init__(self, limit: int) -> None:
        self._lock = threading.Lock()
        self._left = limit

    def take(self, transport: Any) -> int:
        """A duplicate of the transport's socket; -1 past the bound or where there is none."""
        with self._lock:
            if self._left <= 0:
                return -1
            self._left -= 1
        try:
            return os.dup(transport.get_extra_info("socket").fileno())
        except (OSError, AttributeError, ValueError):
            self.give(-1)
            return -1

    def give(self, fd: int) -> None:
        """Close a duplicate `take` gave (-1: one it could not make)."""
        if fd >= 0:
            os.close(fd)
        with self._lock:
            self._left += 1


class Host(Protocol):
    """What a connection reads from its server (`server.HookServer`)."""

    core: Core
    duplicates: Duplicates
    loop: asyncio.AbstractEventLoop
    conns: set[Connection]
    idle_timeout: float
    request_timeout: float
    head_timeout: float
    max_connections: int


_SERVER = b"Server: the-loop-hooks\r\n"


class _Limit(Exception):
    """A request's head broke a limit: answer `reply` and close."""

    def __init__(self, reply: Reply) -> None:
        super().__init__(reply.status)
        self.reply = reply


class Connection(asyncio.Protocol):
    """One client connection: parse, queue in order, answer, keep alive or close."""

    def __init__(self, server: Host) -> None:
        self.server = server
        self.core = server.core
        self.loop = server.loop
        self.transport: Any = None
        self.parser: Any = None
        self.queue: collections.deque[tuple[Reply | bytes, bool, bool]] = collections.deque()
        self.busy = False  # a call is running in the pool
        self.closing = False
        self.paused = False
        self.write_paused = False
        self.in_message = False
        self.in_head = False  # between a request's first byte and the end of its head
        self.head_began = False  # the head began in the read being parsed
        self.deadline: float | None = None
        self.stalled: float | None = None  # answers unread since: hung up on at this time
        self.eof = False  # the caller half-closed: answer what it sent, then close
        self.held = b""  # bytes read but not parsed yet: they wait for the queue to drain
        self.failed = False  # a request could not be read: nothing after it is parsed
        self.peer = ""
        self.waiting_100 = False  # a 100 Continue is owed once the answers before it are out
        # `busy` goes false in the pool thread that answered; it, what the loop hands over
        # (queue, in_message, eof, deadline) and `fd` change under this lock
        self.lock = threading.Lock()
        self.fd = -1  # a duplicate of the socket, for answers sent from the pool
        self._reset()

    def _reset(self) -> None:
        self.url = b""
        self.method = ""
        self.head_size = 0
        self.authorization: str | None = None
        self.lengths: list[str] = []
        self.chunked = False
        self.expect = False  # `Expect: 100-continue`: answer 100 before the body is read
        self.early: Reply | None = None
        self.body: list[bytes] = []

    # ------------------------------------------------------------------ asyncio protocol

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        server = self.server
        server.conns.add(self)
        if len(server.conns) > server.max_connections:
            self.closing = True
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
        self.closing = True
        self.server.conns.discard(self)
        self.drop()

    def drop(self) -> None:
        """Close the connection's duplicate: it ends now, not when a running hook returns
        (which may be never)."""
        with self.lock:
            if self.fd >= 0:
                self.server.duplicates.give(self.fd)
                self.fd = -1

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
        if self.closing or self.failed:
            return
        try:
            self.parser.feed_data(data)
            if self.in_head:  # a head still unfinished after this read: count its bytes
                # (from the read after the one it began in: a head is cut at MAX_HEAD plus
                # at most one SLICE, and requests pipelined before it never count)
                self.head_size += 0 if self.head_began else len(data)
                self.head_began = False
                if self.head_size > MAX_HEAD:
                    raise _Limit(self.core.refuse(431, f"request head over {MAX_HEAD} bytes"))
        except _Limit as limit:
            self._fail(limit.reply)
        except httptools.HttpParserUpgrade:
            self._fail(self.core.refuse(400, "protocol upgrades are not supported"))
        except httptools.HttpParserError as exc:
            cause = exc.__context__
            if isinstance(cause, _Limit):
                self._fail(cause.reply)
            elif "Content-Length overflow" in str(exc):
                self._fail(self.core.refuse(413, "a Content-Length too long to read; the cap "
                                                 f"is {MAX_REQUEST} bytes"))
            else:
                self._fail(self.core.refuse(400, f"malformed HTTP request ({_why(exc)})"))

    def eof_received(self) -> bool:
        """The caller shut its side: answer the requests it finished, then close."""
        with self.lock:
            self.eof = True
            return not self.in_message and (self.busy or bool(self.queue))

    def pause_writing(self) -> None:
        self.write_paused = True
        self.stalled = self.loop.time() + self.server.request_timeout
        self._pause()

    def resume_writing(self) -> None:
        self.write_paused = False
        self.stalled = None
        with self.lock:
            idle = not self.busy
        if idle:
            self._next()

    # ---------------------------------------------------------------- httptools callbacks

    def on_message_begin(self) -> None:
        self._reset()
        self.in_head = self.head_began = True
        with self.lock:
            self.in_message = True
            self.deadline = self.loop.time() + self.server.request_timeout

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        lower = name.lower()
        if lower == b"authorization":
            self.authorization = value.decode("latin-1")
        elif lower == b"content-length":
            self.lengths.append(value.decode("latin-1"))
        elif lower == b"transfer-encoding":
            self.chunked = True
        elif lower == b"expect" and value.strip().lower() == b"100-continue":
            self.expect = True

    def on_headers_complete(self) -> None:
        self.in_head = False
        if self.parser.should_upgrade():  # one answer, before llhttp stops at the head
            raise _Limit(self.core.refuse(400, "protocol upgrades are not supported"))
        self.method = method = self.parser.get_method().decode("latin-1")
        path = self.url.decode("latin-1")
        decided = self.core.head(method, path, self.authorization, self.lengths,
                                 chunked=self.chunked)
        if isinstance(decided, Reply):
            if decided.close:
                raise _Limit(decided)  # refuse now: never read a body we would not use
            self.early = decided
        elif self.expect and self.parser.get_http_version() == "1.1":
            with self.lock:
                self.waiting_100 = True
            self._continue()

    def _continue(self) -> None:
        """Send `100 Continue` for the request being read once every answer before it is
        out (an interim answer never overtakes an earlier request's), unless its body has
        begun to come anyway (issue 31, item 13: curl waited a second per call)."""
        with self.lock:
            due = self.waiting_100 and not self.busy and not self.queue and not self.closing
            if due:
                self.waiting_100 = False
        if due:
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        self.waiting_100 = False  # the caller did not wait for it
        if self.early is None:
            self.body.append(body)

    def on_message_complete(self) -> None:
        keep = bool(self.parser.should_keep_alive())
        head = self.method == "HEAD"
        item: Reply | bytes = self.early if self.early is not None else b"".join(self.body)
        with self.lock:
            self.in_message = False
            self.waiting_100 = False
            self.deadline = None
            self.queue.append((item, keep, head))
            idle = not self.busy
        if len(self.queue) >= MAX_PIPELINED:
            self._pause()
        if idle:
            self._next()

    # ------------------------------------------------------------------------- answering

    def _next(self) -> None:
        core = self.core
        while self.queue and not self.busy and not self.closing and not self.write_paused:
            item, keep, head = self.queue.popleft()
            if isinstance(item, Reply):
                self._write(item, keep, head)
            elif core.inline:
                self._write(core.call(item, self.peer), keep, head)
            else:
                self.busy = True
                if self.fd < 0:  # kept for the connection's next calls
                    self.fd = self.server.duplicates.take(self.transport)
                core.pool.submit(core.call, item, self.peer).add_done_callback(
                    functools.partial(self._answer, keep, head))
                return
        if not self.closing:
            if self.eof and not self.queue and not self.busy and not self.held:
                self.closing = True
                self.transport.close()
                return
            if len(self.queue) < MAX_PIPELINED:
                self._resume()
            if not self.queue and not self.in_message:
                self.deadline = self.loop.time() + self.server.idle_timeout
            elif self.waiting_100:
                self._continue()

    def _answer(self, keep: bool, head: bool, future: concurrent.futures.Future[Reply]
                ) -> None:
        """In the pool thread, once it counts as idle again (else on the loop): send the
        common answer on `fd`, a duplicate of the connection's socket (so it cannot be
        closed and reused for another caller meanwhile), then wake the loop only if
        something waits for it. Anything else (an error status, a full socket buffer,
        answers to pipelined requests) the loop writes."""
        try:
            reply = future.result()
        except concurrent.futures.CancelledError:  # the server shut down
            self.drop()
            return
        except BaseException as exc:  # the caller gets a 500, never silence
            reply = self.core.refuse(500, f"internal error: {type(exc).__name__}")
        data = _common(reply, keep and not head)
        rest, answered, waiting = b"", False, False
        with self.lock:
            fd = self.fd
            # the loop writes nothing while a call runs, so an empty buffer stays empty
            if (data is not None and fd >= 0 and not self.closing and not self.write_paused
                    and not self.transport.get_write_buffer_size()):
                try:
                    rest = data[os.write(fd, data):]
                except BlockingIOError:
                    rest = data
                except OSError:  # the caller is gone: the loop hears it on its side
                    rest = b""
                if not rest:
                    answered, self.busy = True, False
                    waiting = (bool(self.queue) or self.eof or self.paused
                               or self.waiting_100)
                    if not waiting and not self.in_message:  # loop.time()'s clock, here
                        self.deadline = time.monotonic() + self.server.idle_timeout
        if not answered:
            _soon(self.loop, self._done, reply, keep, head, rest)
        elif waiting:
            _soon(self.loop, self._after)

    def _done(self, reply: Reply, keep: bool, head: bool, rest: bytes) -> None:
        """On the loop: write what the pool thread could not (`rest` of its answer, or
        all of `reply`), then go on with the queue."""
        with self.lock:
            self.busy = False
        if self.closing:
            return
        if rest:
            self.transport.write(rest)
        else:
            self._write(reply, keep, head)
        self._next()

    def _after(self) -> None:
        if not self.busy and not self.closing:
            self._next()

    def _write(self, reply: Reply, keep: bool, head: bool) -> None:
        close = reply.close or not keep or self.closing
        status = reply.status
        data = _common(reply, not close and not head)
        if data is not None:
            self.transport.write(data)  # the common answer, in one format and one write
            return
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
        self.transport.write(b"".join(parts))  # one write: no header/body split
        if close:
            self.closing = True
            self.deadline = None
            self.transport.close()

    def _fail(self, reply: Reply) -> None:
        """A request that cannot be read: answer it after those before it, then close."""
        self.in_head = False
        self.failed = True
        with self.lock:
            self.in_message = False
            self.queue.append((reply, False, False))
            idle = not self.busy
        if idle:
            self._next()
        self._pause()

    def _pause(self) -> None:
        if not self.paused and not self.closing:
            self.paused = True
            self.transport.pause_reading()

    def _resume(self) -> None:
        if self.paused and not self.write_paused and not self.closing:
            self.paused = False
            if self.held:
                held, self.held = self.held, b""
                self.data_received(held)
                if self.paused or self.closing:
                    return
            self.transport.resume_reading()

    def expire(self, now: float) -> None:
        """Hang up when the client overran its deadline (idle, or a request too slow), or
        left its answers unread for `request_timeout` (cut off: a close would wait for it
        to read them, holding its slot under the connection cap for good)."""
        if self.stalled is not None and now >= self.stalled:
            self.closing = True
            self.transport.abort()
        elif self.deadline is not None and now >= self.deadline:
            self.closing = True
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
    any other, which `Connection._write` builds."""
    if not (plain and reply.status == 200 and not reply.close and not reply.headers
            and reply.content_type is JSON_TYPE):
        return None
    body = reply.body
    if reply.revision:
        return _OK_REV % (reply.revision.encode("latin-1"), len(body), body)
    return _OK % (len(body), body)


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
