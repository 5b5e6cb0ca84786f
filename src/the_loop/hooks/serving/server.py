"""`HookServer`: one executor hosted over JSON-RPC 2.0 by httptools (framing) on uvloop.

A small asyncio protocol: httptools (the parser uvicorn and Sanic use) frames each request,
uvloop schedules, `core.Core` decides. It keeps what a server owes its callers: HTTP/1.1
keep-alive and pipelining (answers in request order), one write per answer with
TCP_NODELAY (no delayed-ACK stall), backpressure (a caller that does not read its answers
stops being read, and what it already sent waits unanswered while its answers back up;
at most `MAX_PIPELINED` requests, plus those in one `SLICE` of a read, queue per
connection), a head of at most
`MAX_HEAD` bytes, a deadline for the whole request once its first byte arrived (a client
trickling its bytes is hung up on), `head_timeout` for a new connection to send its first
request (sockets opened and left silent cannot hold the cap for the idle deadline), an idle
deadline between requests, `100 Continue` to a caller that expects it, a cut-off for a
caller that leaves its answers unread for `request_timeout`, answers to a caller that
half-closed after its requests, one 400 for a protocol upgrade, a listen backlog
for a burst of callers (`BACKLOG`) and a cap on open connections (`max_connections`; a
caller past it is answered 503 with `Retry-After: 1` and closed).

The event loop runs in the thread that calls `serve_forever` (or the one
`serve_in_thread` starts); a hook class runs in `Core.pool`, never on the loop's thread,
and its thread hands the answer back to the loop, a connection's one writer. A connection's
protocol (framing, ordering, answering) is `connection.Connection`.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading

from the_loop.hooks.serving.connection import (
    MAX_HEAD,
    MAX_PIPELINED,
    SLICE,
    Connection,
)
from the_loop.hooks.serving.core import Core
from the_loop.hooks.serving.jsonrpc import AnyExecutor, OnCall, served_points
from the_loop.hooks.serving.operations import Operations

#: Connections the kernel queues before the server accepts them (capped by
#: net.core.somaxconn): a burst of 1,000 callers connects without a dropped SYN.
BACKLOG = 4096
MAX_CONNECTIONS = 4096  # default cap on open connections
#: Seconds a new connection has to complete its first request (then the idle deadline).
HEAD_TIMEOUT = 5.0

__all__ = ["BACKLOG", "HEAD_TIMEOUT", "MAX_CONNECTIONS", "MAX_HEAD", "MAX_PIPELINED", "SLICE",
           "HookServer"]

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
                 request_timeout: float = 10.0, head_timeout: float = HEAD_TIMEOUT,
                 on_call: OnCall | None = None,
                 max_connections: int = MAX_CONNECTIONS, ops: Operations | None = None
                 ) -> None:
        self.executor = executor
        self.token_env = token_env
        self.on_call = on_call
        self.core = Core(executor, token_env, on_call=on_call, ops=ops)
        self.health = self.core.health
        self.idle_timeout = idle_timeout
        self.request_timeout = request_timeout
        self.head_timeout = head_timeout
        self.max_connections = max_connections
        self.conns: set[Connection] = set()
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
                    lambda: Connection(self), sock=self._sock, backlog=BACKLOG))
                tick = max(0.05, min(self.idle_timeout, self.request_timeout,
                                     self.head_timeout) / 4)
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
