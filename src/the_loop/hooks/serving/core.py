"""The one JSON-RPC core every hook server shares: routing, auth, limits, health, the call.

`hooks serve` (httptools on uvloop), the ASGI app and the WSGI app read an HTTP request's
head, ask `Core.head` what to do with it (a `Reply` now, or how many body bytes to read),
then hand the body to `Core.call`, and write the `Reply` each returns. So every server
decides the same way, and `Core.record` is the one place where "a request was answered"
is visible: each call's `CallRecord` (from `jsonrpc`) and each refusal at the HTTP level
(401, 413, …) reach the host's `on_call` there, one record per request that named no
point, one per call otherwise (a batch makes several).

Rules (`wire` holds the codes and `Reply`):

- `GET`/`HEAD` on a path ending in `/health` answers the health body, open to all and not
  recorded (a refused reload's errors only with the bearer token, a count without); with
  `ops` (`operations.Operations`), `/ready` answers 200 or 503 for a load balancer and
  `/metrics` the Prometheus metrics (behind the token unless public); any other `GET` is
  404, other methods 405.
- `POST` is a call: 401 without `Authorization: Bearer $token_env` when a token is set (the
  scheme in any case, the token compared in constant time), 400 for two Content-Length
  headers or a malformed one, 411 for none (or a chunked body where the server does not
  de-chunk), 413 over `MAX_REQUEST`.
- `Core.inline` says whether the call may run on the server's event loop: a policy folder
  (compiled rules, bounded by construction) does; a hook class or a chain (which may block
  on I/O, or call `asyncio.run`) runs in `Core.pool`, so one hook that blocks cannot stall
  the server's other callers.
"""

from __future__ import annotations

import contextlib
import functools
import hmac
import json
import os
import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import CancelledError, Executor, Future
from typing import Any, ParamSpec, TypeVar

from the_loop.hooks.serving.exposure import warn_if_open
from the_loop.hooks.serving.jsonrpc import (
    AnyExecutor,
    CallRecord,
    OnCall,
    handle_request,
    health_body,
)
from the_loop.hooks.serving.operations import Operations
from the_loop.hooks.serving.wire import (
    INVALID_REQUEST,
    MAX_REQUEST,
    UNAUTHORIZED,
    Reply,
    error_reply,
    is_health,
    route_of,
)
from the_loop.metrics import CONTENT_TYPE as METRICS_TYPE

#: Calls to a hook class that may run at once (threads are started as calls need them);
#: more wait their turn, health checks and policy calls never do.
POOL_THREADS = 64
_MAX_LENGTH_DIGITS = 12  # a Content-Length longer than this is over the cap, whatever it says


_P = ParamSpec("_P")
_T = TypeVar("_T")


#: A job for `HookThreads.run`: `fn`, its arguments, and what to do with its outcome.
Then = Callable[[Any, BaseException | None], None]


class HookThreads(Executor):
    """Up to `size` daemon threads running hook calls, started as calls need them.

    Unlike `ThreadPoolExecutor` (whose threads the interpreter joins at exit), a hook that
    never returns cannot keep a stopped server's process from exiting on Ctrl-C or SIGTERM.
    """

    def __init__(self, size: int, name: str) -> None:
        self._size, self._name = size, name
        self._work: queue.SimpleQueue[tuple[Callable[..., Any], tuple[Any, ...], Then] | None]
        self._work = queue.SimpleQueue()
        self._lock = threading.Lock()  # guards the three counts below
        self._threads = 0
        self._idle = 0  # threads waiting for work that no job has claimed yet
        self._closed = False

    def run(self, fn: Callable[..., Any], args: tuple[Any, ...], then: Then) -> None:
        """Run `fn(*args)` in one of the threads, then `then(result, None)` there, or
        `then(None, exc)` when it raised (`CancelledError` for a job shut down before it
        ran). The thread counts as idle before `then` runs: a call that `then` leads to
        (a server's next request once the answer is out) finds it, and no other thread is
        started or woken for it."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the hook threads were shut down")
            self._work.put((fn, args, then))
            if self._idle:
                self._idle -= 1
            elif self._threads < self._size:
                self._threads += 1
                threading.Thread(target=self._serve, name=f"{self._name}_{self._threads}",
                                 daemon=True).start()

    def submit(self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs
               ) -> Future[_T]:
        """`Executor.submit` (for `loop.run_in_executor`), on `run`."""
        future: Future[_T] = Future()

        def call() -> _T:
            if not future.set_running_or_notify_cancel():
                raise CancelledError  # the caller cancelled it first
            return fn(*args, **kwargs)

        self.run(call, (), functools.partial(_settle, future))
        return future

    def _serve(self) -> None:
        while (job := self._work.get()) is not None:
            fn, args, then = job
            del job
            try:
                result, failure = fn(*args), None
            except BaseException as exc:  # `then` carries it
                result, failure = None, exc
            with self._lock:
                self._idle += 1
            then(result, failure)
            del fn, args, then, result, failure

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Take no more calls; cancel the waiting ones when asked; each thread ends after
        the call it runs (`wait` is not honoured: a hook may never return)."""
        with self._lock:
            self._closed = True
            while cancel_futures:
                try:
                    job = self._work.get_nowait()
                except queue.Empty:
                    break
                if job is not None:
                    job[2](None, CancelledError())
            for _ in range(self._threads):
                self._work.put(None)


def _settle(future: Future[Any], result: Any, failure: BaseException | None) -> None:
    if future.done():  # cancelled before it ran
        return
    if isinstance(failure, CancelledError):
        future.cancel()
    elif failure is not None:
        future.set_exception(failure)
    else:
        future.set_result(result)


def runs_inline(executor: AnyExecutor) -> bool:
    """A served policy folder decides on the event loop; anything else in a thread."""
    return bool(getattr(executor, "served_inline", False))


class Core:
    """What a hook server decides about each request, whatever HTTP stack carries it."""

    def __init__(self, executor: AnyExecutor, token_env: str = "", *,
                 on_call: OnCall | None = None, warn_open: bool = False,
                 ops: Operations | None = None) -> None:
        """`warn_open`: the app does not choose where it listens (WSGI, ASGI): warn once
        when it listens beyond loopback with no token (`exposure.warn_if_open`), at start
        or, when the server binds after loading the app, at the first request.
        `ops`: the decision log, metrics and readiness (`operations`); it hears every
        call first and passes it on to `on_call`."""
        self.executor = executor
        self.token_env = token_env
        self.ops = ops
        if ops is not None:
            ops.forward = on_call
            ops.serving(str(getattr(executor, "revision", "")), executor)
        self.on_call = ops.record if ops is not None else on_call
        self.health = health_body(executor)
        self.inline = runs_inline(executor)
        self._pool: HookThreads | None = None
        self._exposure_known = not warn_open or warn_if_open(token_env)

    def swap(self, executor: AnyExecutor) -> None:
        """Serve `executor` from the next call on (a call reads the executor once, so no
        call sees two); it must run where the old one did (inline or in the pool)."""
        self.executor = executor
        self.health = health_body(executor)
        if self.ops is not None:
            self.ops.serving(str(getattr(executor, "revision", "")), executor)

    @property
    def pool(self) -> HookThreads:
        """The threads hook calls run in (created on first use)."""
        if self._pool is None:
            self._pool = HookThreads(POOL_THREADS, "hook")
        return self._pool

    def close(self) -> None:
        """Stop the pool's threads once they finish what they run."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def head(self, method: str, path: str, authorization: str | None,
             lengths: Sequence[str], *, chunked: bool = False, unsized: bool = False
             ) -> Reply | int:
        """A `Reply` for a request decided by its head, or the number of body bytes to
        read and pass to `call` (-1: a body the server de-chunked, read up to the cap).

        `lengths` are the Content-Length header values as sent (two are refused);
        `unsized`: the server de-chunks bodies itself (WSGI, ASGI).
        """
        if not self._exposure_known:
            self._exposure_known = True
            warn_if_open(self.token_env)
        if method in ("GET", "HEAD"):
            if is_health(path):
                return Reply(200, self._health(authorization))
            if self.ops is not None:
                served = self._operations(route_of(path), authorization)
                if served is not None:
                    return served
            route = path.split("?", 1)[0]
            return self.refuse(404, f"no such page {route[:80]!r}; POST JSON-RPC calls to this "
                                    "server, GET /health lists the points it serves",
                               close=False)
        if method != "POST":
            return self.refuse(405, f"{method[:20]} is not supported; POST calls, GET /health",
                               (("Allow", "GET, POST"),), close=False)
        if chunked and not unsized and not lengths:
            return self.refuse(411, "chunked request bodies are not supported; send "
                                    "Content-Length")
        if self.token_env and not self._authorized(authorization):
            return self.refuse(401, "unauthorized: missing or wrong bearer token",
                               (("WWW-Authenticate", "Bearer"),), code=UNAUTHORIZED)
        if len(lengths) > 1:
            return self.refuse(400, "two Content-Length headers; send exactly one")
        if not lengths:
            if chunked:
                return -1  # the server de-chunked it
            return self.refuse(411, "send the body with a Content-Length header")
        return self._length(lengths[0])

    def _health(self, authorization: str | None) -> bytes:
        """The health body; a refused reload's errors (they quote the refused files and
        name absolute paths) only to a caller with the bearer token, a count to the rest
        (issue 31, item 12)."""
        if self.ops is None:
            return self.health
        doc = json.loads(self.health)
        doc.update(self.ops.health())
        failure = doc.get("reload")
        if isinstance(failure, dict) and "errors" in failure:
            failure = doc["reload"] = dict(failure)
            failure["error_count"] = len(failure["errors"])
            if not (self.token_env and self._authorized(authorization)):
                del failure["errors"]
        return json.dumps(doc, separators=(",", ":")).encode()

    def _operations(self, route: str, authorization: str | None) -> Reply | None:
        """`/ready` (open to all, like /health) and `/metrics` (behind the token unless
        public); None for any other page."""
        ops = self.ops
        assert ops is not None
        if route == "ready":
            why = ops.ready()
            body = json.dumps({"ready": not why, "revision": ops.revision, "why": why},
                              separators=(",", ":")).encode()
            return Reply(503 if why else 200, body)
        if route == "metrics":
            if self.token_env and not ops.metrics_public and not self._authorized(
                    authorization):
                # Told to the host's log, never counted as a call: a scrape is not one.
                return self.refuse(401, "unauthorized: /metrics needs the bearer token "
                                        "(or start the server with --metrics-public)",
                                   (("WWW-Authenticate", "Bearer"),), close=False,
                                   code=UNAUTHORIZED, counted=False)
            return Reply(200, ops.metrics.text(), content_type=METRICS_TYPE)
        return None

    def _length(self, given: str) -> Reply | int:
        text = given.strip()
        if not (text.isascii() and text.isdigit()):
            return self.refuse(400, f"bad Content-Length {given[:40]!r}; expected a number "
                                    "of bytes")
        if len(text) > _MAX_LENGTH_DIGITS:
            return self.refuse(413, f"a Content-Length of {len(text)} digits; the cap is "
                                    f"{MAX_REQUEST} bytes")
        length = int(text)
        if length > MAX_REQUEST:
            return self.refuse(413, f"request of {length} bytes; the cap is {MAX_REQUEST}")
        return length

    def secrets(self) -> list[str]:
        """What this server holds, read now: its own token and, for a declared chain, every
        entry's `tokenEnv` value; no answer carries any of them (`handle_request`)."""
        own = os.environ.get(self.token_env, "") if self.token_env else ""
        held = getattr(self.executor, "secrets", None)
        return [*([own] if own else []), *(held() if callable(held) else [])]

    def _authorized(self, authorization: str | None) -> bool:
        expected = os.environ.get(self.token_env, "")
        scheme, _, given = (authorization or "").strip().partition(" ")
        return bool(expected) and scheme.lower() == "bearer" and hmac.compare_digest(
            given.strip().encode("utf-8", "replace"), expected.encode("utf-8", "replace"))

    def call(self, body: bytes, peer: str = "") -> Reply:
        """The answer to a POST's body (runs the hook: on `pool` unless `inline`); `peer`
        names the caller in records when no token does."""
        if len(body) > MAX_REQUEST:
            return self.refuse(413, f"request over the cap of {MAX_REQUEST} bytes")
        executor = self.executor  # read once: a reload between calls, never within one
        out = handle_request(executor, body, on_call=self.on_call, secrets=self.secrets,
                             caller=self.token_env or peer)
        revision = str(getattr(executor, "revision", ""))
        return Reply(200, out, revision=revision) if out else Reply(204, revision=revision)

    def refuse(self, status: int, message: str, headers: tuple[tuple[str, str], ...] = (),
               *, close: bool = True, code: int | None = None, counted: bool = True) -> Reply:
        """An HTTP refusal (a JSON-RPC error body), recorded as one call; `counted=False`
        (a page that is not a call, /metrics): told to the host's log only."""
        call = CallRecord("(request)", f"http {status}", 0.0, failure=message)
        if counted:
            self.record(call)
        elif self.ops is not None and self.ops.forward is not None:
            with contextlib.suppress(Exception):
                self.ops.forward(call)
        return error_reply(status, message, headers, close=close,
                           code=INVALID_REQUEST if code is None else code)

    def record(self, call: CallRecord) -> None:
        """Tell the host about one answered request (a log that fails costs its line only)."""
        if self.on_call is not None:
            with contextlib.suppress(Exception):
                self.on_call(call)

