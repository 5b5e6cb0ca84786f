"""Issue 20 item 8: text that is not Unicode (bytes that are not UTF-8, a lone surrogate)
is refused where it comes in — `serve`'s control plane (400), a hook server and the WSGI
app (-32700), the CLI (a usage error) — and whatever comes next is served as before."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from werkzeug.test import Client

from runtime_helpers import LoopDir
from serving_helpers import raw
from the_loop.cli import main
from the_loop.hooks.serving.hosted import policy_executor
from the_loop.hooks.serving.server import HookServer
from the_loop.hooks.serving.wsgi import make_wsgi_app

TOKEN = "not-unicode-control-token"
BOTS = """\
rules:
  - name: no-bots
    on: input_received
    when: "regex_match('^bot-', actor)"
    set:
      proceed: false
      reason: "bots may not talk to agents"
"""
LONE = (b"\\ud800", "holds a lone surrogate (\\ud800), which is not a character; a character "
                    "is written as itself or as a surrogate pair")
ENCODED = (b"\xed\xa0\x80", "is not UTF-8 (byte 0xed at offset {at}); send UTF-8 text")
LATIN1 = (b"\xff", "is not UTF-8 (byte 0xff at offset {at}); send UTF-8 text")
BAD = [LONE, ENCODED, LATIN1]
IDS = ["escaped-lone-surrogate", "utf8-encoded-surrogate", "latin-1-byte"]


def _call(actor: bytes) -> bytes:
    return (b'{"jsonrpc":"2.0","method":"input_received","id":1,"params":{"text":"hi",'
            b'"actor":"bot-' + actor + b'"}}')


def _says(bad: tuple[bytes, str], body: bytes) -> str:
    return bad[1].format(at=body.index(b"bot-") + 4)


@pytest.fixture
def bots(tmp_path: Path) -> Path:
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "bots.yaml").write_text(BOTS, encoding="utf-8")
    return tmp_path / "rules"


def _post(url: str, body: bytes, path: str = "/", token: str = "") -> tuple[int, bytes]:
    auth = f"\r\nAuthorization: Bearer {token}".encode() if token else b""
    return raw(url, b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Length: "
               + str(len(body)).encode() + auth, body)


@pytest.mark.parametrize("bad", BAD, ids=IDS)
def test_hook_server_refuses_text_that_is_not_unicode_and_its_rules_still_match(
        bots: Path, bad: tuple[bytes, str]) -> None:
    with HookServer(policy_executor(bots)) as server:
        body = _call(bad[0])
        status, answer = _post(server.url, body)
        assert (status, json.loads(answer)) == (200, {"jsonrpc": "2.0", "id": None, "error": {
            "code": -32700, "message": f"parse error: the body {_says(bad, body)}"}})
        # a surrogate pair is one character: the rule reads it and matches
        status, answer = _post(server.url, _call(b"\\ud83d\\ude00"))
        assert json.loads(answer)["result"] == {"proceed": False,
                                                "reason": "bots may not talk to agents"}


@pytest.mark.parametrize("bad", BAD, ids=IDS)
def test_wsgi_app_refuses_text_that_is_not_unicode(bots: Path, bad: tuple[bytes, str]) -> None:
    client = Client(make_wsgi_app(policy_executor(bots)))
    body = _call(bad[0])
    answer = client.post("/", data=body)
    assert answer.json["error"] == {"code": -32700,
                                    "message": f"parse error: the body {_says(bad, body)}"}
    assert client.post("/", data=_call(b"1")).json["result"]["proceed"] is False


@pytest.fixture
def control(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[LoopDir, str]]:
    """`serve`'s control plane on a loopback port, in this process; yields (loop dir, url)."""
    from the_loop.config import read_config
    from the_loop.runtime.control import ControlServer
    from the_loop.runtime.service import Loop

    monkeypatch.setenv("LOOP_TOKEN", TOKEN)
    with LoopDir(tmp_path, "serve: {tokenEnv: LOOP_TOKEN}\n") as ld:
        loop = Loop(read_config(ld.config), strict_hooks=True, source="serve")
        server = ControlServer(loop, "127.0.0.1", 0, "LOOP_TOKEN")
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield ld, server.url
        finally:
            server.shutdown()
            server.server_close()
            thread.join()
            server.close_loops()


@pytest.mark.parametrize("bad", BAD, ids=IDS)
def test_serve_answers_400_to_a_comment_that_is_not_unicode_and_stores_nothing(
        control: tuple[LoopDir, str], bad: tuple[bytes, str]) -> None:
    ld, url = control
    ref = ld.add()
    body = (b'{"event":"comment","ref":"' + ref.encode() + b'","author":"bob","body":"bot-'
            + bad[0] + b'"}')
    status, answer = _post(url, body, "/webhook", TOKEN)
    assert (status, json.loads(answer)) == (400, {"error": f"the body {_says(bad, body)}"})
    assert ld.item(ref)["comments"] == []
    status, answer = _post(url, b'{"event":"comment","ref":"' + ref.encode()
                           + b'","author":"bob","body":"hello \\ud83d\\ude00"}', "/webhook",
                           TOKEN)
    assert status == 200, answer
    assert [c["body"] for c in ld.item(ref)["comments"]] == ["hello \U0001f600"]


def test_hooks_run_context_with_a_lone_surrogate_is_a_usage_error(
        bots: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = bots.parent / "cli-config.yaml"
    config.write_text("hooks:\n  - {name: house, policy: rules}\n", encoding="utf-8")
    context = bots.parent / "ctx.json"
    context.write_bytes(b'{"actor": "bot-\\udc00", "text": "hi"}')
    code = main(["--config", str(config), "hooks", "run", "input_received", "--context",
                 str(context)])
    assert code == 2
    assert capsys.readouterr().err == (
        f"the-loop: --context {context}: the context holds a lone surrogate (\\udc00), which "
        "is not a character; a character is written as itself or as a surrogate pair\n")


@pytest.mark.parametrize("arg", ["hi \udcff", "hi \ud800"], ids=["undecodable-byte", "lone"])
def test_a_command_line_argument_that_is_not_utf8_is_a_usage_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], arg: str) -> None:
    """The shell passed bytes the locale could not decode (Python keeps them as lone
    surrogates): one usage line showing them, not an 'unexpected error … bug'."""
    with pytest.raises(SystemExit) as stopped:
        main(["--config", str(tmp_path / "none.yaml"), "reply", "1", arg])
    assert stopped.value.code == 2
    shown = "hi \\xff" if arg.endswith("\udcff") else "hi \\ud800"
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"the-loop: error: argument '{shown}' is not UTF-8 text; pass text in UTF-8 (check "
        "the encoding of the terminal or script that wrote it)")
