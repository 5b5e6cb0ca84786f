"""Issue 31, items 11, 16 and 18, through a real `serve` on port 0: a request head whose body
length is ambiguous is refused before anything is read as a second request, the JSON API
redacts a token someone pasted into a comment as the console does, and redaction is literal,
as docs/security.md says."""

from __future__ import annotations

import signal
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from test_runtime_daemons import Client

from runtime_helpers import LoopDir, readline

TOKENS = {"ALICE_TOKEN": "alice-secret-31", "LOOP_TOKEN": "operator-secret-31",
          "DEPLOY_TOKEN": "deploy-key-31-abcdef"}


@contextmanager
def serving(ld: LoopDir) -> Iterator[tuple[str, int]]:
    """`serve` on port 0 with alice's token and a webhook channel whose token is a secret."""
    ld.write_config("serve: {tokenEnv: LOOP_TOKEN, tokens: {alice: ALICE_TOKEN}}\n",
                    channels="channels:\n  - {kind: webhook, url: 'http://127.0.0.1:9/hook', "
                             "tokenEnv: DEPLOY_TOKEN}\n")
    proc = ld.popen("serve", "--port", "0", "--quiet", env=TOKENS)
    try:
        url = readline(proc).split(" on ", 1)[1].strip()
        host, port = url.removeprefix("http://").rsplit(":", 1)
        yield host, int(port)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err


def exchange(host: str, port: int, raw: bytes) -> bytes:
    """Send `raw` on one connection and read until the server closes it (or 5 s)."""
    with socket.create_connection((host, port), timeout=5) as sock:
        sock.sendall(raw)
        got = b""
        try:
            while chunk := sock.recv(65536):
                got += chunk
        except TimeoutError:
            raise AssertionError(f"the server kept the connection open after {got!r}") from None
    return got


def smuggled(head: bytes) -> bytes:
    """A POST whose first 2 bytes are a body and whose rest is a second request (an
    /approve as alice) for a server that frames it by the first of its lengths."""
    second = (b'POST /items/1/input HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer '
              b'alice-secret-31\r\nContent-Type: application/json\r\nContent-Length: 20\r\n'
              b'\r\n{"text": "/approve"}')
    return (b"POST /items/1/input HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
            b"alice-secret-31\r\n" + head + b"\r\n{}" + second)


def test_issue31_item11_two_content_lengths_are_refused_and_nothing_is_smuggled(
        ld: LoopDir) -> None:
    """Two Content-Lengths: 400 naming them, the connection closed, and the request
    hidden in the body is not answered (no comment is written)."""
    ref = ld.add("At a gate")
    with serving(ld) as (host, port):
        got = exchange(host, port, smuggled(b"Content-Length: 2\r\nContent-Length: 200\r\n"))
    assert got.startswith(b"HTTP/1.1 400 "), got
    assert got.count(b"HTTP/1.1") == 1, got
    assert b"two Content-Length headers; send exactly one" in got
    assert ld.item(ref)["comments"] == []


def test_issue31_item11_transfer_encoding_is_refused_and_nothing_is_smuggled(
        ld: LoopDir) -> None:
    """Transfer-Encoding (chunked, with or without a Content-Length, on a GET too): 400, the
    connection closed, nothing after the head is read as a request."""
    ref = ld.add("At a gate")
    with serving(ld) as (host, port):
        for head in (b"Content-Length: 2\r\nTransfer-Encoding: chunked\r\n",
                     b"Transfer-Encoding: chunked\r\nContent-Length: 2\r\n",
                     b"Transfer-Encoding: identity\r\nContent-Length: 2\r\n"):
            got = exchange(host, port, smuggled(head))
            assert got.startswith(b"HTTP/1.1 400 "), (head, got)
            assert got.count(b"HTTP/1.1") == 1, got
            assert b"Transfer-Encoding is not supported here" in got
        got = exchange(host, port, b"GET /health HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: "
                                   b"chunked\r\n\r\n0\r\n\r\nGET /health HTTP/1.1\r\n\r\n")
        assert got.startswith(b"HTTP/1.1 400 ") and got.count(b"HTTP/1.1") == 1, got
        # One Content-Length is still served, on a connection kept open for the next.
        api = Client(f"http://{host}:{port}")
        assert api.call("GET", "/items/1", token="alice-secret-31")[0] == 200
    assert ld.item(ref)["comments"] == []


def test_issue31_item16_the_api_redacts_a_token_pasted_into_a_comment(ld: LoopDir) -> None:
    """bob pastes the webhook channel's token into a comment and a title: GET /items and
    GET /items/<ref> give `[redacted]` in its place, as the console shows it."""
    ref = ld.add("Rotate deploy-key-31-abcdef soon")
    ld.cli("items", "comment", ref, "the key is deploy-key-31-abcdef, use it", "--author",
           "bob")
    with serving(ld) as (host, port):
        api = Client(f"http://{host}:{port}")
        status, one = api.call("GET", f"/items/{ref.rsplit('#', 1)[1]}",
                               token="alice-secret-31")
        status_all, every = api.call("GET", "/items", token="alice-secret-31")
    assert (status, status_all) == (200, 200)
    assert one["comments"][0]["body"] == "the key is [redacted], use it"
    assert one["title"] == every[0]["title"] == "Rotate [redacted] soon"
    assert "deploy-key-31-abcdef" not in repr(one) + repr(every)



SHOUTING_HOOK = '''\
import os
from the_loop.sdk.hooks import LifecycleHooks


class Shout(LifecycleHooks):
    def work_item_start(self, ctx):
        token = os.environ["DEPLOY_TOKEN"]
        ctx.proceed = False
        ctx.reason = f"as is: {token}; shouted: {token.upper()}"
        return ctx
'''


def test_issue31_item18_redaction_is_literal_as_docs_security_says(ld: LoopDir) -> None:
    """A declared hook that quotes another entry's token as it is and upper-cased: the
    refusal comment shows `[redacted]` for the first and the upper-cased token as written,
    the limit docs/security.md states."""
    ld.write("hooks/shout.py", SHOUTING_HOOK)
    ld.write_config("hooks:\n  - {name: shout, path: hooks/shout.py}\n",
                    channels="channels:\n  - {kind: webhook, url: 'http://127.0.0.1:9/hook', "
                             "tokenEnv: DEPLOY_TOKEN}\n")
    ref = ld.add("Refused")
    ld.start(ref)
    ld.poll(env=TOKENS)
    [comment] = ld.comments(ref)
    assert comment == ("The start of this work item was refused by hook `shout` at "
                       "`work_item_start`: as is: [redacted]; shouted: DEPLOY-KEY-31-ABCDEF")
    doc = (Path(__file__).parents[2] / "docs" / "security.md").read_text(encoding="utf-8")
    assert "**Redaction is literal.**" in doc and "upper-cases another entry's token" in doc
