"""`HookServer`: one executor hosted over JSON-RPC 2.0 on http.server (stdlib).

HTTP/1.1 keep-alive, one write per answer and TCP_NODELAY; a listen backlog that holds a
burst of callers (`BACKLOG`); a deadline per request so a client trickling its bytes cannot
hold a thread. Routing, auth and limits are `wire.http_reply`'s (shared with the WSGI app);
the JSON-RPC answer is `jsonrpc.handle_request`'s.
"""

from __future__ import annotations

import contextlib
import io
import socket
import socketserver
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from the_loop.hooks.serving.jsonrpc import (
    AnyExecutor,
    OnCall,
    handle_request,
    health_body,
    served_points,
)
from the_loop.hooks.serving.wire import Reply, error_reply, http_reply, reason_of

#: Connections the kernel queues before the server accepts them (capped by net.core.somaxconn;
#: socketserver's default of 5 made callers in a burst of 200 time out on connect).
BACKLOG = 1024


class _DeadlineRaw(io.RawIOBase):
    """Socket reads: `idle` s to start a request, then `limit` s for all of it (a client
    trickling its request cannot hold a thread forever)."""

    def __init__(self, sock: socket.socket, idle: float, limit: float) -> None:
        super().__init__()
        self._sock = sock
        self._idle = idle
        self._limit = limit
        self._deadline: float | None = None

    def arm(self) -> None:
        self._deadline = None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._deadline is None:
            self._sock.settimeout(self._idle)
        else:
            left = self._deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the request did not arrive in time")
            self._sock.settimeout(left)
        n = self._sock.recv_into(buffer)
        if n and self._deadline is None:
            self._deadline = time.monotonic() + self._limit
        return n


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "the-loop-hooks"
    disable_nagle_algorithm = True
    server: _HTTPServer

    def setup(self) -> None:
        super().setup()
        self.rfile.close()
        self._raw = _DeadlineRaw(self.connection, self.server.idle_timeout,
                                 self.server.request_timeout)
        self.rfile = io.BufferedReader(self._raw, 65536)
        self.server.track(self.connection, True)

    def finish(self) -> None:
        self.server.track(self.connection, False)
        super().finish()

    def handle_one_request(self) -> None:
        self._raw.arm()
        super().handle_one_request()

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: no access log on stderr

    def _answer(self) -> None:
        hook = self.server.hook
        te = self.headers.get("Transfer-Encoding")
        try:
            if te is not None and self.command == "POST":
                reply = error_reply(411, "chunked request bodies are not supported; send "
                                         "Content-Length")
            else:
                reply = http_reply(
                    answer=hook.answer, health=hook.health, token_env=hook.token_env,
                    method=self.command, path=self.path,
                    authorization=self.headers.get("Authorization"),
                    content_length=self.headers.get("Content-Length"), read=self.rfile.read,
                )
        except (TimeoutError, OSError):
            self.close_connection = True  # a client too slow to send its body
            return
        self._write(reply)

    do_GET = do_POST = do_HEAD = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _answer

    def _write(self, reply: Reply) -> None:
        close = reply.close or self.close_connection
        lines = [f"HTTP/1.1 {reply.status} {reason_of(reply.status)}",
                 f"Server: {self.server_version}"]
        if reply.status != 204:
            lines += ["Content-Type: application/json", f"Content-Length: {len(reply.body)}"]
        lines += [f"{k}: {v}" for k, v in reply.headers]
        if close:
            lines.append("Connection: close")
            self.close_connection = True
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        body = b"" if self.command == "HEAD" else reply.body
        self.wfile.write(head + body)  # one write: no header/body split meets delayed ACK


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = BACKLOG
    hook: HookServer
    idle_timeout = 30.0
    request_timeout = 10.0

    def server_bind(self) -> None:
        # Skip HTTPServer.server_bind's getfqdn(): a reverse lookup can stall start-up.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], OSError):
            return  # a client that went away is not worth a traceback
        super().handle_error(request, client_address)

    def track(self, sock: socket.socket, add: bool) -> None:
        with self.hook._lock:
            if add:
                self.hook._open.add(sock)
            else:
                self.hook._open.discard(sock)


class _HTTPServer6(_HTTPServer):
    address_family = socket.AF_INET6


class HookServer:
    """Hosts one executor over JSON-RPC 2.0 on http.server (stdlib).

    `HookServer(executor, host="127.0.0.1", port=0, token_env="")` binds at once (port 0:
    any free port, see `.url`); `.serve_forever()` blocks, `.serve_in_thread()` returns the
    started thread, `.shutdown()` stops serving, closes the socket and open connections.
    With `token_env`, every POST needs `Authorization: Bearer $token_env` (read per request).
    `on_call` hears one `CallRecord` per call (point, status, time, keys ignored); `.points`
    are the points the executor answers (as the other the-loop's HookServer names them).
    """

    def __init__(self, executor: AnyExecutor, host: str = "127.0.0.1", port: int = 0,
                 token_env: str = "", *, idle_timeout: float = 30.0,
                 request_timeout: float = 10.0, on_call: OnCall | None = None) -> None:
        self.executor = executor
        self.token_env = token_env
        self.on_call = on_call
        self.health = health_body(executor)
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._started = False
        self._closed = False
        self._thread: threading.Thread | None = None
        cls = _HTTPServer6 if ":" in host else _HTTPServer
        self._httpd = cls((host, port), _Handler, bind_and_activate=False)
        self._httpd.hook = self
        self._httpd.idle_timeout = idle_timeout
        self._httpd.request_timeout = request_timeout
        try:
            self._httpd.server_bind()
            self._httpd.server_activate()
        except BaseException:
            self._httpd.server_close()
            raise
        self.host = host
        self.port = int(self._httpd.server_address[1])

    @property
    def points(self) -> tuple[str, ...]:
        """The points the executor answers with its own code (what `/health` lists)."""
        return served_points(self.executor)

    def answer(self, body: bytes) -> bytes:
        """The JSON-RPC answer to one request body."""
        return handle_request(self.executor, body, on_call=self.on_call)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    def _start(self) -> None:
        with self._lock:
            if self._closed or self._started:
                raise RuntimeError(f"HookServer {self.url} was already started or shut down")
            self._started = True

    def serve_forever(self) -> None:
        """Serve until `shutdown()` (from another thread) or Ctrl-C."""
        self._start()
        self._httpd.serve_forever(poll_interval=0.25)

    def serve_in_thread(self) -> threading.Thread:
        """Start serving in a daemon thread; returns it."""
        self._start()  # before the thread runs, so an early shutdown() waits for it
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.25,),
                                        name=f"HookServer {self.url}", daemon=True)
        self._thread.start()
        return self._thread

    def shutdown(self) -> None:
        """Stop serving, close the listening socket and every open connection (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            started = self._started
        if started:
            self._httpd.shutdown()
        self._httpd.server_close()
        with self._lock:
            open_now = list(self._open)
        for sock in open_now:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5)

    def __enter__(self) -> HookServer:
        self.serve_in_thread()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
