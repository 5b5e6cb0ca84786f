"""The console reads the loop's state through its store, on SQLite and on PostgreSQL alike:
an item's title, comments and sessions from the database the config names, its points from
the decision log in this host's stateDir.
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

TOKEN = "alice-backend-token-1123581321"


def test_the_timeline_reads_items_comments_and_sessions_from_the_configured_database(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, database: str) -> None:
    monkeypatch.setenv("ALICE_TOKEN", TOKEN)
    ld = LoopDir(tmp_path, database=database)
    ld.write_config("serve: {tokens: {alice: ALICE_TOKEN}}\n")
    ref = ld.add("Stored where the config says")
    ld.ok("items", "comment", ref, "a comment in the shared database", "--author", "bob")
    loop = Loop(read_config(ld.config), strict_hooks=True, source="test")
    try:
        loop.fire(WorkItemStart(**loop.base(ref), actor="alice", source="command"))
        loop.store.register_session("s-console-1", "launch:test", ref=ref, endpoint=ref,
                                    harness="record", pid=1, node="draft", log="s.log")
        loop.store.sessions_ended({"s-console-1": 0})
    finally:
        loop.close()
    with serving(ld.config) as url:
        cookie = sign_in(url, TOKEN)
        listed = fetch(f"{url}/console/items", cookie=cookie).body
        page = fetch(f"{url}/console/items/{urllib.parse.quote(ref, safe='')}",
                     cookie=cookie).body
    assert "Stored where the config says" in listed
    assert "a comment in the shared database" in page and "bob" in page
    assert '<section id="p1" class="point "' in page
    assert "<td>s-console-1</td><td>draft</td><td>record</td>" in page
    assert "ended (exit 0)" in page
