"""Two hosts on one PostgreSQL database show one truth (issue 32): an item walked on host b
(a refused input, an ordinary comment, an approval at a gate) is shown by the console that
host a serves, in Chromium — its refusal, its inputs with what became of each and the host
that handled it, the rule's match count equal to the shared table's, and a what-if count
equal to `policy replay`'s on either host and with `--log URL`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from browser_helpers import CHROMIUM_ARGS
from console_helpers import serving
from runtime_helpers import LoopDir, pg_query

TOKEN = "alice-two-hosts-token-27182818"
HOOKS = """\
hooks:
  - name: house-rules
    policy: policies
serve:
  tokens: {alice: CONSOLE_ALICE_TOKEN}
  console:
    compare:
      - {name: quieter, policy: policies-next}
"""
RULES = """\
rules:
  - name: no-shouting
    on: input_received
    when: "contains(text, 'SHOUT')"
    set: {proceed: false, reason: "no shouting here"}
  - name: house-preamble
    on: session_spawn
    set: {prompt_prefix: "House rules.\\n\\n"}
"""
B = {"THE_LOOP_HOST_ID": "host-b"}


def _host(root: Path, dsn: str) -> LoopDir:
    ld = LoopDir(root, HOOKS, database=dsn)
    ld.write("policies/rules.yaml", RULES)
    ld.write("policies-next/rules.yaml", RULES.split("  - name: house-preamble")[0])
    return ld


def _on_b(b: LoopDir, *args: str) -> None:
    b.cli(*args, env=B)
    b.cli("poll", "--once", env=B)
    b.wait_sessions()


@pytest.fixture(scope="module")
def walked(tmp_path_factory: pytest.TempPathFactory, _pg_admin_dsn: str
           ) -> Iterator[dict[str, Any]]:
    """The item walked on host b; the console served by host a (yields its URL)."""
    import uuid

    import psycopg
    from psycopg import sql

    from conftest import _with_dbname

    name = f"the_loop_t_two_hosts_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(_pg_admin_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
    dsn = _with_dbname(_pg_admin_dsn, name)
    root = tmp_path_factory.mktemp("two-hosts")
    try:
        a, b = _host(root / "a", dsn), _host(root / "b", dsn)
        ref = a.add("Shared work")
        a.start(ref)
        b.cli("poll", "--once", env=B)  # started and launched on host b
        b.wait_sessions()
        _on_b(b, "graph", "complete", "--work-item", ref)  # the agent's node done: a gate
        for text in ("looks fine so far", "SHOUT at it", "/approve"):
            _on_b(b, "reply", ref, text, "--actor", "alice")
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("CONSOLE_ALICE_TOKEN", TOKEN)
            with serving(a.config) as url:
                yield {"a": a, "b": b, "dsn": dsn, "ref": ref, "url": url}
    finally:
        with psycopg.connect(_pg_admin_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("drop database if exists {} with (force)")
                          .format(sql.Identifier(name)))


@pytest.fixture(scope="module")
def page(chromium_path: str, walked: dict[str, Any]) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path, args=list(CHROMIUM_ARGS))
        context = browser.new_context(base_url=walked["url"])
        tab = context.new_page()
        tab.goto("/console/signin")
        tab.fill("#token", TOKEN)
        tab.click("button[type=submit]")
        tab.wait_for_url(re.compile(r"/console/items$"))
        yield tab
        browser.close()


def test_the_console_on_host_a_shows_the_refusal_and_inputs_handled_on_host_b(
        page: Any, walked: dict[str, Any]) -> None:
    ref = walked["ref"]
    row = page.locator("table.items tbody tr", has_text=ref)
    cells = [c.strip() for c in row.locator("td").all_inner_texts()]
    assert cells[6] == "1" and cells[7] == "host-b", cells  # refusals, hosts
    assert cells[5].startswith("work_item_complete"), cells  # its last point, on host b
    page.click(f"table.items a:text('{ref}')")
    page.wait_for_url(re.compile(r"/console/items/"))
    refused = page.locator("section.point.refused")
    assert refused.count() == 1
    assert refused.locator(".refusal").inner_text().strip() == (
        "REFUSED by house-rules: no shouting here")
    assert "host host-b" in refused.locator("h3").inner_text()
    rows = page.locator("table.inputs tbody tr")
    fates = [[c.strip() for c in r.locator("td").all_inner_texts()] for r in rows.all()]
    assert [(f[3], f[4], f[5]) for f in fates] == [
        ("looks fine so far", "delivered as written", "host-b"),
        ("SHOUT at it", "refused by house-rules: no shouting here", "host-b"),
        ("/approve", "delivered as written", "host-b")]
    own = page.locator("table.loop-comments tbody").inner_text()
    assert "GRAPH-REQUEST" in own and "<!--" not in own  # the loop's own, no raw markers


def test_the_rules_page_counts_what_the_shared_table_holds(
        page: Any, walked: dict[str, Any]) -> None:
    shared = pg_query(walked["dsn"], "SELECT record FROM decision_log")
    expected = {name: sum(1 for r in shared for s in json.loads(r["record"])["steps"]
                          if name in s.get("rules", []))
                for name in ("no-shouting", "house-preamble")}
    assert expected["no-shouting"] == 1 and expected["house-preamble"] >= 1
    page.goto("/console/rules")
    for name, n in expected.items():
        cell = page.locator(f"tr[data-rule={name}] td.hits-enforce")
        assert int(cell.inner_text()) == n, name


def test_what_if_replays_as_many_points_as_policy_replay_on_either_host(
        page: Any, walked: dict[str, Any]) -> None:
    counts = []
    for ld in (walked["a"], walked["b"]):
        counts.append(json.loads(ld.cli("policy", "replay", "--json").stdout)["replayed"])
        counts.append(json.loads(ld.cli("policy", "replay", "--json", "--log", walked["dsn"],
                                        "--policy", str(ld.root / "policies")).stdout
                                 )["replayed"])
    total = pg_query(walked["dsn"], "SELECT count(*) AS n FROM decision_log")[0]["n"]
    assert counts == [total] * 4
    checked = json.loads(walked["a"].cli("state", "check", "--json", ok=False).stdout)
    [decisions] = [f for f in checked if f["check"] == "decisions"]
    assert decisions["detail"] == f"{total} recorded point(s) from host(s) host-b"
    page.goto("/console/whatif?target=1&period=all")
    summary = page.locator("p.summary").inner_text()
    assert summary.startswith(f"Replayed {total} recorded points"), summary
