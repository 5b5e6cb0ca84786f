"""The console's tests: `the-loop serve` in a thread on port 0, and plain HTTP without redirects."""

from __future__ import annotations

import contextlib
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: str


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


def fetch(url: str, *, cookie: str = "", data: bytes | None = None,
          headers: dict[str, str] | None = None) -> Answer:
    """One request, redirects not followed; any status is an answer, not an exception."""
    req = urllib.request.Request(url, data=data, headers=dict(headers or {}))
    if cookie:
        req.add_header("Cookie", cookie)
    try:
        with _OPENER.open(req, timeout=60) as resp:
            return Answer(resp.status, dict(resp.headers), resp.read().decode("utf-8"))
    except urllib.error.HTTPError as exc:
        return Answer(exc.code, dict(exc.headers), exc.read().decode("utf-8", "replace"))


def sign_in(url: str, token: str) -> str:
    """The Cookie header value a sign-in with `token` sets (asserting it succeeded)."""
    got = fetch(f"{url}/console/signin", data=urllib.parse.urlencode({"token": token}).encode())
    assert got.status == 303, got
    return got.headers["Set-Cookie"].split(";", 1)[0]


@contextlib.contextmanager
def serving(config: Path, token_env: str = "") -> Iterator[str]:
    """`the-loop serve` on the config, on a free loopback port, in a thread; yields its URL."""
    from the_loop.config import read_config
    from the_loop.runtime.control import ControlServer
    from the_loop.runtime.service import Loop

    loop = Loop(read_config(config), strict_hooks=True, source="serve")
    server = ControlServer(loop, "127.0.0.1", 0, token_env)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.url
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
        server.close_loops()
