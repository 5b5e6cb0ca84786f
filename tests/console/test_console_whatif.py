"""The console's rules and "what a change would do" pages over plain HTTP: it replays only what the
operator listed (never a path from the page), says plainly why a listed entry cannot be
replayed, and shows a changed rule from another config with a link to the changed point.
"""

from __future__ import annotations

import urllib.parse
from pathlib import Path

import pytest

from console_helpers import fetch, serving, sign_in
from runtime_helpers import LoopDir
from the_loop.config import read_config
from the_loop.hooks.engine.points import WorkItemStart
from the_loop.runtime.service import Loop

TOKEN = "alice-whatif-token-2718281828"
FREEZE = """\
rules:
  - name: freeze-all
    on: work_item_start
    set: {proceed: false, reason: "frozen for the release"}
"""
QUIET = """\
rules:
  - name: on-trial
    on: work_item_start
    mode: audit
    set: {proceed: false, reason: "trial"}
  - name: never-matches
    on: work_item_start
    when: "actor == 'nobody'"
    set: {reason: "x"}
"""


def _loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LoopDir:
    monkeypatch.setenv("ALICE_TOKEN", TOKEN)
    ld = LoopDir(tmp_path)
    ld.write("policies/quiet.yaml", QUIET)
    ld.write("frozen/policies/freeze.yaml", FREEZE)
    ld.write("frozen/cli-config.yaml", "hooks:\n  - {name: gate, policy: policies}\n")
    ld.write_config("serve:\n  tokens: {alice: ALICE_TOKEN}\n  console:\n    compare:\n"
                    "      - {name: gone, policy: no-such-folder}\n"
                    "      - {name: frozen, config: frozen/cli-config.yaml}\n"
                    "hooks:\n  - {name: house, policy: policies}\n")
    ref = ld.add("Ship it")
    loop = Loop(read_config(ld.config), strict_hooks=True, source="test")
    try:
        loop.fire(WorkItemStart(**loop.base(ref), actor="alice", source="command"))
    finally:
        loop.close()
    return ld


def test_whatif_replays_only_listed_declarations_and_shows_the_changed_rule(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ld = _loop(tmp_path, monkeypatch)
    with serving(ld.config) as url:
        cookie = sign_in(url, TOKEN)

        def whatif(**query: str) -> str:
            got = fetch(f"{url}/console/whatif?{urllib.parse.urlencode(query)}", cookie=cookie)
            assert got.status == 200
            return got.body

        listed = whatif()
        assert "in effect" in listed and "gone" in listed and "frozen" in listed
        assert str(tmp_path) not in listed  # the server's paths are not shown
        for bad in ("9", "-1", "../frozen/cli-config.yaml", str(tmp_path / "frozen")):
            assert "pick one of the listed declarations" in whatif(target=bad, period="all")
        gone = whatif(target="1", period="all")
        assert "gone: its policy folder is not there" in gone
        assert 'id="changed-count"' not in gone
        same = whatif(target="0", period="all")
        assert '<strong id="changed-count">0</strong>' in same
        frozen = whatif(target="2", period="all")
        assert '<strong id="changed-count">1</strong>' in frozen
        assert 'data-rule="freeze-all"' in frozen
        assert "freeze-all (gate) would have refused 1 start on 1 item" in frozen
        assert '<a href="/console/points/1">#1 work_item_start</a>' in frozen


def test_rules_page_counts_enforce_and_audit_matches_and_names_rules_never_matched(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ld = _loop(tmp_path, monkeypatch)
    with serving(ld.config) as url:
        page = fetch(f"{url}/console/rules?since=1d", cookie=sign_in(url, TOKEN)).body
    trial = page.split('data-rule="on-trial"', 1)[1].split("</tr>", 1)[0]
    assert '<td class="num hits-enforce">0</td>' in trial
    assert '<td class="num hits-audit">1</td>' in trial
    assert '<a href="/console/points/1">' in trial
    quiet = page.split('data-rule="never-matches"', 1)[1].split("</tr>", 1)[0]
    assert '<td class="num hits-audit">0</td>' in quiet and "never" in quiet
    assert "Never matched in the period: never-matches</p>" in page
