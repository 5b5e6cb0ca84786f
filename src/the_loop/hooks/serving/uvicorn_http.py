"""uvicorn's httptools protocol with the deadlines `hooks serve` keeps, for the ASGI app.

uvicorn bounds a connection only between requests (`--timeout-keep-alive`): a connection
that never sends a request, a head trickled a byte a second, a body that never ends are kept
for good, and its httptools protocol reads a head of any size (issue 31, item 14: a 1 byte/s
head stayed open 45 s; 5,000 half-sent heads were kept). `BoundedHttpTools` is uvicorn's own
`HttpToolsProtocol` plus what `hooks serve` adds (`connection.Connection`): a new connection
has `head_timeout` to complete its first request, each request `request_timeout` from its
first byte to its last, and a head at most `MAX_HEAD` bytes (431). uvicorn's own options give
the rest (docs/remote-hooks.md names them all):

    THE_LOOP_HOOK_POLICY=/srv/policies uvicorn --factory --host 127.0.0.1 --port 8765 \\
        --http the_loop.hooks.serving.uvicorn_http:BoundedHttpTools \\
        --limit-concurrency 4096 --backlog 4096 --timeout-keep-alive 30 \\
        the_loop.hooks.serving.asgi:app_from_env

Imported only by uvicorn (`--http`); nothing else here imports uvicorn.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from the_loop.hooks.serving.connection import MAX_HEAD
from the_loop.hooks.serving.server import HEAD_TIMEOUT

__all__ = ["BoundedHttpTools"]

_TOO_LARGE = (b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: text/plain; "
              b"charset=utf-8\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s")


class BoundedHttpTools(HttpToolsProtocol):
    """`HttpToolsProtocol` with a first-request deadline, a request deadline and a head cap
    (see the module doc); subclass it to change the numbers."""

    head_timeout: float = HEAD_TIMEOUT
    request_timeout: float = 10.0
    max_head: int = MAX_HEAD

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._in_head = False
        self._head_bytes = 0

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, self._expire)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm(min(self.head_timeout, self.timeout_keep_alive or self.head_timeout))

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._in_head:
            self._head_bytes += len(data)
            if self._head_bytes > self.max_head:
                message = f"request head over {self.max_head} bytes".encode()
                self.transport.write(_TOO_LARGE % (len(message), message))
                self.transport.close()
                return
        super().data_received(data)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head, self._head_bytes = True, 0
        self._arm(self.request_timeout)  # the whole request, head and body

    def on_headers_complete(self) -> None:
        self._in_head = False
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._disarm()  # answering is the app's time, then uvicorn's keep-alive deadline
        super().on_message_complete()
