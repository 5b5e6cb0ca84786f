"""`HookServer`: one executor hosted over JSON-RPC 2.0 by httptools (framing) on uvloop.

A small asyncio protocol: httptools (the parser uvicorn and Sanic use) frames each request,
uvloop schedules, `core.Core` decides. It keeps what a server owes its callers: HTTP/1.1
keep-alive and pipelining (answers in request order), one write per answer with
TCP_NODELAY (no delayed-ACK stall), backpressure (a caller that does not read its answers
stops being read, and what it already sent waits unanswered while its answers back up;
at most `MAX_PIPELINED` requests, plus those in one `SLICE` of a read, queue per
connection), a head of at most
`MAX_HEAD` bytes, a deadline for the whole request once its first byte arrived (a client
trickling its bytes is hung up on), an idle deadline between requests, a cut-off for a
caller that leaves its answers unread for `request_timeout`, answers to a caller that
half-closed after its requests, one 400 for a protocol upgrade, a listen backlog
for a burst of callers (`BACKLOG`) and a cap on open connections (`max_connections`; a
caller past it is answered 503 with `Retry-After: 1` and closed).

The event loop runs in the thread that calls `serve_forever` (or the one
`serve_in_thread` starts); a hook class runs in `Core.pool`, never on the loop's thread.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import functools
import socket
import threading
from typing import Any

import httptools

from the_loop.hooks.serving.core import Core
from the_loop.hooks.serving.jsonrpc import AnyExecutor, OnCall, served_points
from the_loop.hooks.serving.operations import Operations
from the_loop.hooks.serving.wire import (
    JSON_TYPE,
    MAX_REQUEST,
    REVISION_HEADER,
    Reply,
    reason_of,
)

#: Connections the kernel queues before the server accepts them (capped by
#: net.core.somaxconn): a burst of 1,000 callers connects without a dropped SYN.
BACKLOG = 4096
MAX_HEAD = 64 * 1024  # bytes of request line + headers
MAX_PIPELINED = 32  # requests read ahead of their answers on one connection
SLICE = 4096  # bytes parsed at a time from a longer read, so a full queue stops the parsing
MAX_CONNECTIONS = 4096  # default cap on open connections

_SERVER = b"Server: the-loop-hooks\r\n"


class _Limit(Exception):
    """A request's head broke a limit: answer `reply` and close."""

    def __init__(self, reply: Reply) -> None:
        super().__init__(reply.status)
        self.reply = reply


class _Conn(asyncio.Protocol):
    """One client connection: parse, queue in order, answer, keep alive or close."""

    def __init__(self, server: HookServer) -> None:
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
        self._reset()

    def _reset(self) -> None:
        self.url = b""
        self.method = ""
        self.head_size = 0
        self.authorization: str | None = None
        self.lengths: list[str] = []
        self.chunked = False
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
        self.deadline = self.loop.time() + server.idle_timeout

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
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
        self.eof = True
        return not self.in_message and (self.busy or bool(self.queue))

    def pause_writing(self) -> None:
        self.write_paused = True
        self.stalled = self.loop.time() + self.server.request_timeout
        self._pause()

    def resume_writing(self) -> None:
        self.write_paused = False
        self.stalled = None
        if not self.busy:
            self._next()

    # ---------------------------------------------------------------- httptools callbacks

    def on_message_begin(self) -> None:
        self._reset()
        self.in_message = self.in_head = self.head_began = True
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

    def on_body(self, body: bytes) -> None:
        if self.early is None:
            self.body.append(body)

    def on_message_complete(self) -> None:
        self.in_message = False
        self.deadline = None
        keep = bool(self.parser.should_keep_alive())
        head = self.method == "HEAD"
        item: Reply | bytes = self.early if self.early is not None else b"".join(self.body)
        self.queue.append((item, keep, head))
        if len(self.queue) >= MAX_PIPELINED:
            self._pause()
        if not self.busy:
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
                done = functools.partial(self._done, keep=keep, head=head)
                core.pool.submit(core.call, item, self.peer).add_done_callback(
                    functools.partial(_back_to_loop, self.loop, done))
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

    def _done(self, future: concurrent.futures.Future[Reply], *, keep: bool, head: bool
              ) -> None:
        self.busy = False
        if self.closing or future.cancelled():
            return
        exc = future.exception()
        reply = future.result() if exc is None else self.core.refuse(
            500, f"internal error: {type(exc).__name__}")
        self._write(reply, keep, head)
        self._next()

    def _write(self, reply: Reply, keep: bool, head: bool) -> None:
        close = reply.close or not keep or self.closing
        status = reply.status
        if (status == 200 and not close and not head and not reply.headers
                and reply.content_type is JSON_TYPE):
            body = reply.body  # the common answer, in one format and one write
            if reply.revision:
                self.transport.write(_OK_REV % (reply.revision.encode("latin-1"), len(body),
                                                body))
            else:
                self.transport.write(_OK % (len(body), body))
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
        self.in_message = self.in_head = False
        self.failed = True
        self.queue.append((reply, False, False))
        if not self.busy:
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


def _back_to_loop(loop: asyncio.AbstractEventLoop, done: Any, future: Any) -> None:
    """A pool thread's finished call, handed to the loop (gone after a shutdown: dropped)."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(done, future)


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


class HookServer:
    """Hosts one executor over JSON-RPC 2.0 (httptools on uvloop).

    `HookServer(executor, host="127.0.0.1", port=0, token_env="")` binds at once (port 0:
    any free port, see `.url`); `.serve_forever()` blocks, `.serve_in_thread()` returns the
    started thread, `.shutdown()` stops serving, closes the socket and open connections.
    With `token_env`, every POST needs `Authorization: Bearer $token_env` (read per request).
    `on_call` hears one `CallRecord` per call and per refused request.
    """

    def __init__(self, executor: AnyExecutor, host: str = "127.0.0.1", port: int = 0,
                 token_env: str = "", *, idle_timeout: float = 30.0,
                 request_timeout: float = 10.0, on_call: OnCall | None = None,
                 max_connections: int = MAX_CONNECTIONS, ops: Operations | None = None
                 ) -> None:
        self.executor = executor
        self.token_env = token_env
        self.on_call = on_call
        self.core = Core(executor, token_env, on_call=on_call, ops=ops)
        self.health = self.core.health
        self.idle_timeout = idle_timeout
        self.request_timeout = request_timeout
        self.max_connections = max_connections
        self.conns: set[_Conn] = set()
        self.loop = _new_loop()
        # Set (on the loop) by shutdown(): a future, not loop.stop(), so a shutdown that
        # comes while create_server is still running is not spent there and lost.
        self._stop: asyncio.Future[None] = self.loop.create_future()
        self._lock = threading.Lock()
        self._started = False
        self._closed = False
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._sock = _listen(host, port)
        self.host = host
        self.port = int(self._sock.getsockname()[1])

    @property
    def points(self) -> tuple[str, ...]:
        """The points the executor answers with its own code (what `/health` lists)."""
        return served_points(self.core.executor)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    def answer(self, body: bytes) -> bytes:
        """The JSON-RPC answer to one request body."""
        return self.core.call(body).body

    def _start(self) -> None:
        with self._lock:
            if self._closed or self._started:
                raise RuntimeError(f"HookServer {self.url} was already started or shut down")
            self._started = True

    def serve_forever(self) -> None:
        """Serve until `shutdown()` (from another thread) or Ctrl-C."""
        self._start()
        self._run()

    def serve_in_thread(self) -> threading.Thread:
        """Start serving in a daemon thread; returns it."""
        self._start()  # before the thread runs, so an early shutdown() waits for it
        self._thread = threading.Thread(target=self._run, name=f"HookServer {self.url}",
                                        daemon=True)
        self._thread.start()
        return self._thread

    def _run(self) -> None:
        loop = self.loop
        asyncio.set_event_loop(loop)
        try:
            if not self._closed:
                server = loop.run_until_complete(loop.create_server(
                    lambda: _Conn(self), sock=self._sock, backlog=BACKLOG))
                tick = max(0.05, min(self.idle_timeout, self.request_timeout) / 4)
                sweeper = loop.call_later(tick, self._sweep, tick)
                try:
                    loop.run_until_complete(self._stop)
                finally:
                    sweeper.cancel()
                    server.close()
                    for conn in list(self.conns):
                        conn.transport.abort()
                    loop.run_until_complete(asyncio.sleep(0))
        finally:
            asyncio.set_event_loop(None)
            self._sock.close()
            self.core.close()
            loop.close()
            self._stopped.set()

    def _wake(self) -> None:
        if not self._stop.done():
            self._stop.set_result(None)

    def _sweep(self, tick: float) -> None:
        now = self.loop.time()
        for conn in list(self.conns):
            conn.expire(now)
        self.loop.call_later(tick, self._sweep, tick)

    def shutdown(self) -> None:
        """Stop serving, close the listening socket and every open connection (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            started = self._started
        if not started:
            self._sock.close()
            self.loop.close()
            return
        with contextlib.suppress(RuntimeError):  # the loop already stopped (Ctrl-C)
            self.loop.call_soon_threadsafe(self._wake)
        if self._thread is not threading.current_thread():
            self._stopped.wait(5)
            if self._thread is not None:  # its last lines after setting _stopped
                self._thread.join(1)

    def __enter__(self) -> HookServer:
        self.serve_in_thread()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def _new_loop() -> asyncio.AbstractEventLoop:
    """uvloop's event loop where it is installed (not on Windows), else asyncio's."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - Windows
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def _listen(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(BACKLOG)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock
