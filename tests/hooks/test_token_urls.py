"""Issue 11 rule 5: only literal loopback addresses and `localhost` itself are loopback.

One function (`util.url_may_carry_token`) decides where a bearer token may go: hooks `url:`
entries, webhook channels and `hooks serve`'s listen rule all follow it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from runtime_helpers import LoopDir
from the_loop.errors import HooksConfigError
from the_loop.hooks import load_chain
from the_loop.util import is_loopback, url_may_carry_token

LOOPBACK = ["127.0.0.1", "127.8.9.10", "::1", "[::1]", "localhost", "LOCALHOST"]
NOT_LOOPBACK = ["anything.localhost", "localhost.localdomain", "localhost.", "evil.com",
                "10.0.0.1", "0.0.0.0", "::", "127.0.0.1.nip.io", ""]


@pytest.mark.parametrize("host", LOOPBACK)
def test_literal_loopback_addresses_and_localhost_are_loopback(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize("host", NOT_LOOPBACK)
def test_every_other_name_is_not_loopback(host: str) -> None:
    assert not is_loopback(host)


@pytest.mark.parametrize(("url", "may"), [
    ("https://hooks.acme.example/x", True),
    ("https://anything.localhost/x", True),
    ("http://127.0.0.1:8765/", True),
    ("http://[::1]:8765/", True),
    ("http://localhost/x", True),
    ("http://anything.localhost/x", False),
    ("http://hooks.acme.example/x", False),
    ("ftp://127.0.0.1/x", False),
    ("http://[::1/x", False),  # not a URL
])
def test_a_token_goes_only_over_https_or_to_a_literal_loopback_host(url: str, may: bool) -> None:
    assert url_may_carry_token(url) is may


def test_a_hooks_url_entry_to_a_dot_localhost_name_is_refused(
    write_config: Callable[..., Path],
) -> None:
    cfg = write_config("hooks:\n  - name: remote\n    url: http://anything.localhost:8765/\n"
                       "    tokenEnv: HOOK_TOKEN\n")
    with pytest.raises(HooksConfigError) as info:
        load_chain(cfg)
    assert str(info.value).startswith("hooks[0] ('remote') → url: plain http:// is only "
                                      "allowed to a loopback host")
    assert "use https://anything.localhost:8765/" in str(info.value)


def test_a_webhook_channel_with_a_token_to_a_dot_localhost_name_is_refused(ld: LoopDir) -> None:
    ld.write_config(channels="channels:\n  - {kind: webhook, url: 'http://chat.localhost/h', "
                             "tokenEnv: T}\n")
    code, _, err = ld.run("items", "list")
    assert code == 1
    assert "a bearer token is never sent in clear: use https:// for chat.localhost" in err


def test_hooks_serve_on_a_dot_localhost_name_needs_a_token(tmp_path: Path) -> None:
    (tmp_path / "rules").mkdir()
    result = subprocess.run(
        [sys.executable, "-m", "the_loop", "hooks", "serve", "--policy", "rules",
         "--host", "me.localhost", "--port", "0"],
        capture_output=True, text=True, cwd=tmp_path, env=dict(os.environ), timeout=30,
    )
    assert result.returncode == 2
    assert "--host me.localhost: refusing to listen beyond loopback" in result.stderr
