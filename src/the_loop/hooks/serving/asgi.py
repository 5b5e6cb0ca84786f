"""The ASGI app for uvicorn and friends: the protocol, auth, health and limits of `hooks serve`.

`make_asgi_app(executor, token_env="")` decides every request through `core.Core`, as
`hooks serve` and the WSGI app do. A policy folder decides on the server's event loop; a
hook class runs in the core's thread pool, so a hook that blocks cannot stall the server's
other callers, and no hook ever runs inside the server's event loop. Loaded from the same
THE_LOOP_HOOK_* variables as the WSGI app (`app_from_env`, see `wsgi`):

    THE_LOOP_HOOK_POLICY=/srv/policies uvicorn --factory --host 127.0.0.1 --port 8765 \\
        the_loop.hooks.serving.asgi:app_from_env
    THE_LOOP_HOOK_POLICY=/srv/policies gunicorn -w 2 -k uvicorn_worker.UvicornWorker \\
        -b 127.0.0.1:8765 'the_loop.hooks.serving.asgi:app_from_env()'
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from the_loop.hooks.serving.core import Core
from the_loop.hooks.serving.jsonrpc import AnyExecutor, OnCall
from the_loop.hooks.serving.wire import MAX_REQUEST, REVISION_HEADER, Reply
from the_loop.hooks.serving.wsgi import core_from_env

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def make_asgi_app(executor: AnyExecutor, token_env: str = "", *,
                  on_call: OnCall | None = None) -> ASGIApp:
    """An ASGI 3 application serving `executor` (same protocol, auth, health and limits);
    it warns once on stderr when it listens beyond loopback with no `token_env`."""
    return asgi_app(Core(executor, token_env, on_call=on_call, warn_open=True))


def asgi_app(core: Core) -> ASGIApp:
    """The ASGI application deciding through `core`."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(core, receive, send)
            return
        if scope["type"] != "http":
            return  # websockets are not part of the protocol: the server refuses them
        authorization: str | None = None
        lengths: list[str] = []
        chunked = False
        for name, value in scope["headers"]:
            if name == b"authorization":
                authorization = value.decode("latin-1")
            elif name == b"content-length":
                lengths.append(value.decode("latin-1"))
            elif name == b"transfer-encoding":
                chunked = True
        method = scope["method"]
        decided = core.head(method, scope["path"], authorization, lengths, chunked=chunked,
                            unsized=True)
        if isinstance(decided, Reply):
            await _send(send, decided, method)
            return
        body = await _body(receive, decided)
        if body is None:
            reply = core.refuse(413, f"request over the cap of {MAX_REQUEST} bytes")
        else:
            client = scope.get("client")
            peer = str(client[0]) if client else ""
            if core.inline:
                reply = core.call(body, peer)
            else:
                reply = await asyncio.get_running_loop().run_in_executor(core.pool, core.call,
                                                                         body, peer)
        await _send(send, reply, method)

    return app


async def _body(receive: Receive, length: int) -> bytes | None:
    """The request body, framed by the server (None past the cap)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_REQUEST:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


async def _send(send: Send, reply: Reply, method: str) -> None:
    headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in reply.headers]
    if reply.revision:
        headers.append((REVISION_HEADER.lower().encode(), reply.revision.encode("latin-1")))
    if reply.status != 204:
        headers += [(b"content-type", reply.content_type.encode("latin-1")),
                    (b"content-length", str(len(reply.body)).encode())]
    if reply.close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": reply.status, "headers": headers})
    await send({"type": "http.response.body",
                "body": b"" if method == "HEAD" else reply.body})


async def _lifespan(core: Core, receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            core.close()
            if core.ops is not None:
                core.ops.close()
            await send({"type": "lifespan.shutdown.complete"})
            return


def app_from_env(environ: Mapping[str, str] | None = None) -> ASGIApp:
    """The ASGI app for what the THE_LOOP_HOOK_* variables name (see `wsgi`)."""
    return asgi_app(core_from_env(environ))

