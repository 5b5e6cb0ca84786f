"""The console's decision pages over a hook server's own log: a real `hooks serve --policy
--decision-log FILE` answers three calls, the operator lists its log (and policy folder) under
serve.console.servedLogs, and the console shows each rule's matches, the rule never matched,
the points newest first and a refusal; a log not listed, or a path, is never read.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from console_helpers import fetch, serving, sign_in
from runtime_helpers import LoopDir
from serving_helpers import Served

TOKEN = "alice-served-token-1414213562"
HOOK_TOKEN = "hook-served-token-1732050807"
RULES = """\
rules:
  - name: frozen
    on: session_spawn
    when: "contains(labels, 'frozen')"
    set: {proceed: false, reason: "the repository is frozen <b>now</b>"}
  - name: watch-drafts
    on: session_spawn
    mode: audit
    when: "contains(labels, 'draft')"
    set: {proceed: false}
  - name: strip-keys
    on: input_received
    when: "contains(text, 'sk-live-')"
    set: {text: "[a key was removed]"}
"""


def _spawn(labels: list[str], number: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": number, "method": "session_spawn", "params": {
        "labels": labels, "prompt": "p", "actor": "ann",
        "work_item": {"ref": f"github:acme/app#{number}", "number": number}}}


def _call(url: str, body: dict[str, Any]) -> None:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={
        "Authorization": f"Bearer {HOOK_TOKEN}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        resp.read()


def test_a_hook_servers_log_shows_its_rules_points_and_refusal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ALICE_TOKEN", TOKEN)
    ld = LoopDir(tmp_path)
    ld.write("service/rules/rules.yaml", RULES)
    served = Served(["hooks", "serve", "--policy", "rules", "--port", "0", "--token-env", "TOK",
                     "--decision-log", "log.db"], tmp_path / "service", env={"TOK": HOOK_TOKEN})
    try:
        for n, labels in enumerate((["frozen"], ["draft"], []), start=1):
            _call(served.url, _spawn(labels, n))
    finally:
        assert served.stop()[0] == 0
    ld.write_config("serve:\n  tokens: {alice: ALICE_TOKEN}\n  console:\n    servedLogs:\n"
                    "      - {name: policy-service, log: service/log.db, policy: service/rules}\n")
    with serving(ld.config) as url:
        cookie = sign_in(url, TOKEN)
        index = fetch(f"{url}/console/served", cookie=cookie).body
        page = fetch(f"{url}/console/served/0", cookie=cookie).body
        points = [fetch(f"{url}/console/served/0/points/{n}", cookie=cookie) for n in (1, 2)]
        refused = [fetch(f"{url}/console/served/{p}", cookie=cookie).status
                   for p in ("1", "-1", "..%2F..%2Flog.db", "0/points/99")]
        unsigned = fetch(f"{url}/console/served/0").status
    assert '<a href="/console/served/0">policy-service</a>' in index
    assert str(tmp_path) not in index + page

    def row(name: str) -> str:
        return page.split(f'data-rule="{name}"', 1)[1].split("</tr>", 1)[0]

    assert '<td class="num hits-enforce">1</td>' in row("frozen")
    assert '<a href="/console/served/0/points/1">' in row("frozen")
    assert '<td class="num hits-audit">1</td>' in row("watch-drafts")
    assert "Never matched in the period: strip-keys</p>" in page
    assert "Policy tests: " in page and "no test files" in page  # the folder has none
    assert page.count('<a href="/console/served/0/points/') == 3 + 2  # 3 points, 2 last matches
    assert page.index("#3 session_spawn") < page.index("#1 session_spawn")  # newest first
    first, second = points
    assert first.status == 200 and "REFUSED by policy: the repository is frozen &lt;b&gt;now" \
        in first.body
    assert '← policy-service&#39;s log' in first.body
    assert second.status == 200 and "watch-drafts" in second.body and "REFUSED" not in second.body
    assert refused == [404, 404, 404, 404] and unsigned == 303
