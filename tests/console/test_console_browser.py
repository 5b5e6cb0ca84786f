"""The console in a real Chromium: after `the-loop demo`, `the-loop serve` with a token shows
the demo's work item as a timeline of its seven points with every hook's decision, the rules
page shows each rule's hits from the recorded log, and a replay of a changed policy folder
shows the changed rule. One browser for the module; assertions read the page, not pixels.
"""

from __future__ import annotations

import io
import os
import re
import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from browser_helpers import CHROMIUM_ARGS
from console_helpers import serving
from the_loop.decisions.reads import read_points
from the_loop.demo.scenario import TOKEN_ENV, run_demo
from the_loop.hooks.engine.points import POINTS
from the_loop.hooks.policy.testing import run_tests

TOKEN = "alice-browser-token-31415926535"
CHANGED = "approve-needs-maintainer"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """The demo run into a fresh folder, a copy of its policies in which mallory may approve
    listed for the console to replay, and `serve` on it; yields (folder, server URL)."""
    folder = tmp_path_factory.mktemp("console") / "demo"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(TOKEN_ENV, "demo-hook-token-for-the-browser-test")
        mp.setenv("CONSOLE_ALICE_TOKEN", TOKEN)
        assert run_demo(folder, io.StringIO()) == 0
        shutil.copytree(folder / "policies", folder / "policies-next")
        people = folder / "policies-next" / "data" / "people.yaml"
        text = people.read_text(encoding="utf-8")
        assert "maintainers: [alice, bob]" in text  # the demo's list, which mallory joins
        people.write_text(text.replace("maintainers: [alice, bob]",
                                       "maintainers: [alice, bob, mallory]"), encoding="utf-8")
        config = folder / "cli-config.yaml"
        with config.open("a", encoding="utf-8") as f:
            f.write("serve:\n  tokens: {alice: CONSOLE_ALICE_TOKEN}\n  console:\n"
                    "    compare:\n      - {name: mallory-may-approve, policy: policies-next}\n")
        with serving(config) as url:
            yield folder, url


@pytest.fixture(scope="module")
def browser(chromium_path: str) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium_path, args=list(CHROMIUM_ARGS))
        yield b
        b.close()


@pytest.fixture
def page(browser: Any, demo: tuple[Path, str]) -> Iterator[Any]:
    """A fresh browser context signed in as alice through the sign-in page; fails the test
    when the browser reports a Content-Security-Policy violation."""
    _, url = demo
    context = browser.new_context(base_url=url)
    tab = context.new_page()
    messages: list[str] = []
    tab.on("console", lambda m: messages.append(m.text))
    tab.goto("/console/items")
    assert tab.url.endswith("/console/signin")  # nothing shown without a session
    tab.fill("#token", TOKEN)
    tab.click("button[type=submit]")
    tab.wait_for_url(re.compile(r"/console/items$"))
    yield tab
    context.close()
    assert [m for m in messages if "Content Security Policy" in m] == []


def _open_item(page: Any) -> None:
    page.click("table.items a:text('local:acme/app#1')")
    page.wait_for_url(re.compile(r"/console/items/local%3Aacme%2Fapp%231$"))


def test_items_list_shows_the_demo_item_with_its_refusal(page: Any) -> None:
    row = page.locator("table.items tbody tr")
    assert row.count() == 1
    cells = [c.strip() for c in row.locator("td").all_inner_texts()]
    assert cells[0] == "local:acme/app#1" and cells[1] == "Add a login page"
    assert cells[2].startswith("done") and cells[6] == "1"
    assert cells[5].startswith("work_item_complete")
    page.select_option("select[name=state]", "done")
    page.check("input[name=refused]")
    page.click("form.filters button")
    page.wait_for_url(re.compile(r"refused=1"))
    assert page.locator("table.items tbody tr td:first-child a").all_inner_texts() == [
        "local:acme/app#1"]
    page.click("table.items a:text('work_item_complete')")  # the last point, opened
    page.wait_for_url(re.compile(r"/console/points/\d+$"))
    assert page.locator("section.point").get_attribute("data-point") == "work_item_complete"


def test_the_demo_timeline_shows_its_seven_points_with_hooks_and_rules(
        page: Any, demo: tuple[Path, str]) -> None:
    folder, _ = demo
    recorded = list(read_points(folder / ".the-loop" / "loop.db"))
    _open_item(page)
    assert page.inner_text("#fired").split(", ") == list(POINTS)
    assert page.locator("svg.axis circle.mark").count() == len(recorded)
    assert page.locator("svg.axis circle.mark.refused").count() == 1
    points = page.locator("section.point")
    assert points.count() == len(recorded)
    assert [p.get_attribute("data-point") for p in points.all()] == [r.point for r in recorded]
    for rec, section in zip(recorded, points.all(), strict=True):
        hooks = section.locator("tr[data-hook]")
        assert [h.get_attribute("data-hook") for h in hooks.all()] == \
            [s["hook"] for s in rec.steps]
        for step, row in zip(rec.steps, hooks.all(), strict=True):
            rules = row.locator("td.rules").inner_text().strip()
            assert rules == ", ".join(step.get("rules", []))
    # The first launch: the policy put its preamble on the prompt, the remote hook its note.
    launch = page.locator("section.point[data-point=session_spawn]").first
    preamble = launch.locator("tr[data-hook=house-rules]")
    assert preamble.locator("td.outcome").inner_text().strip() == "changed"
    assert "house-preamble" in preamble.locator("td.rules").inner_text()
    compliance = launch.locator("tr[data-hook=compliance] ins").inner_text()
    assert "compliance: keep customer data out of documents" in compliance
    # The question: the local hook stamped it; the diff shows only what it added.
    question = page.locator("section.point[data-point=waiting_for_input]").first
    assert question.locator("tr[data-hook=stamp] ins").inner_text() == "[acme] "
    # Inputs say who sent them and what became of them; sessions their launches and ends.
    fates = page.locator("table.inputs tbody tr").all_inner_texts()
    assert any("mallory" in f and "refused by house-rules" in f for f in fates)
    assert any("alice" in f and "delivered" in f for f in fates)
    sessions = page.locator("table.sessions tbody tr").all_inner_texts()
    assert len(sessions) == sum(1 for r in recorded if r.point == "session_spawned")
    assert all("ended (exit 0)" in s for s in sessions)


def test_a_refusal_opens_with_its_hook_rule_and_reason(page: Any) -> None:
    _open_item(page)
    refused = page.locator("section.point.refused")
    assert refused.count() == 1
    assert "REFUSED by house-rules" in refused.locator(".refusal").inner_text()
    page.click("svg.axis a:has(circle.refused)")  # the red mark scrolls to the point
    assert page.url.endswith(f"#{refused.get_attribute('id')}")
    refused.locator("h3 a").click()
    page.wait_for_url(re.compile(r"/console/points/\d+$"))
    alert = page.inner_text(".refusal")
    assert alert == ("REFUSED by house-rules: only maintainers (alice, bob) may approve; "
                     "mallory is not one")
    row = page.locator("tr[data-hook=house-rules]")
    assert row.locator("td.outcome").inner_text().strip() == "refused"
    assert row.locator("td.rules").inner_text().strip() == CHANGED


def test_rules_page_shows_each_rules_hits_from_the_log(page: Any, demo: tuple[Path, str]) -> None:
    folder, _ = demo
    hits: Counter[str] = Counter()
    for rec in read_points(folder / ".the-loop" / "loop.db"):
        for step in rec.steps:
            if step["hook"] == "house-rules":
                hits.update(step.get("rules", []))
    page.click("nav a:text('Rules')")
    page.wait_for_url(re.compile(r"/console/rules$"))
    rows = page.locator("section.folder[data-hook=house-rules] tr[data-rule]")
    shown = {r.get_attribute("data-rule"): int(r.locator("td.hits-enforce").inner_text())
             for r in rows.all()}
    assert shown == {name: hits.get(name, 0) for name in shown}
    assert hits and set(hits) <= set(shown)
    assert page.locator(f"tr[data-rule='{CHANGED}'] svg.bars rect.bar").count() == 1
    tested = run_tests(folder / "policies").coverage  # what `policy test` says, beside it
    assert {r.get_attribute("data-rule"): int(r.locator("td.tests").inner_text())
            for r in rows.all()} == {name: counts[0] for name, counts in tested.items()}
    never = page.inner_text("section.folder .never-list")
    assert all((name in never) == (hits[name] == 0) for name in shown)
    page.click(f"tr[data-rule='{CHANGED}'] td.last a")  # its last match
    page.wait_for_url(re.compile(r"/console/points/\d+$"))
    assert "REFUSED by house-rules" in page.inner_text(".refusal")


def test_replay_of_a_changed_policy_folder_shows_the_changed_rule(page: Any) -> None:
    page.click("nav a:text('What a change would do')")
    page.wait_for_url(re.compile(r"/console/whatif$"))
    options = page.locator("select[name=target] option").all_inner_texts()
    assert options[0].startswith("in effect") and options[1].startswith("mallory-may-approve")
    page.select_option("select[name=period]", "all")
    page.select_option("select[name=target]", "0")
    page.click("form.filters button")
    page.wait_for_url(re.compile(r"target=0"))
    assert page.inner_text("#changed-count") == "0"
    page.select_option("select[name=target]", "1")
    page.click("form.filters button")
    page.wait_for_url(re.compile(r"target=1"))
    assert page.inner_text("#changed-count") == "1"
    changed = page.locator("section.changed-rule")
    assert [c.get_attribute("data-rule") for c in changed.all()] == [CHANGED]
    assert changed.locator(".rule-summary").all_inner_texts() == [
        f"{CHANGED} (house-rules) would no longer refuse 1 input on 1 item"]
    changed.locator("td:nth-child(2) a").first.click()  # the changed point on its timeline
    page.wait_for_url(re.compile(r"/console/items/local%3Aacme%2Fapp%231#p\d+$"))
    assert os.path.basename(page.url).startswith("local%3Aacme%2Fapp%231")


def test_a_form_on_another_site_changes_nothing(page: Any, demo: tuple[Path, str],
                                                tmp_path: Path) -> None:
    """A page on another site (localhost, not 127.0.0.1) posts to the console's sign-out and
    to the API's input route from the signed-in browser: both are refused, the person stays
    signed in, and the item is as it was."""
    import functools
    import http.server
    import threading

    from the_loop.config import read_config
    from the_loop.runtime.service import Loop

    folder, url = demo
    target = url + "/items/local%3Aacme%2Fapp%231/input"
    (tmp_path / "evil.html").write_text(
        f'<form id="out" method="post" action="{url}/console/signout">'
        '<button id="signout">win a prize</button></form>'
        f'<form id="in" method="post" action="{target}" enctype="text/plain">'
        '<input type="hidden" name=\'{"text": "/approve", "x": "\' value=\'"}\'>'
        '<button id="approve">win another</button></form>', encoding="utf-8")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    evil = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=evil.serve_forever, daemon=True).start()
    loop = Loop(read_config(folder / "cli-config.yaml"), strict_hooks=False, source="test")
    try:
        before = (loop.tracker.get("1").to_json(), loop.work("local:acme/app#1"))
        for button, answer in (("#signout", "cross-site request refused"),
                               ("#approve", "missing or wrong bearer token")):
            page.goto(f"http://localhost:{evil.server_address[1]}/evil.html")
            with page.expect_navigation():
                page.click(button)
            assert page.url.startswith(url)
            assert answer in page.inner_text("body")
        after = (loop.tracker.get("1").to_json(), loop.work("local:acme/app#1"))
    finally:
        evil.shutdown()
        evil.server_close()
        loop.close()
    assert after == before
    page.goto("/console/items")
    assert page.url.endswith("/console/items")  # still signed in: the sign-out was refused
    assert "signed in as alice" in page.inner_text("header")
