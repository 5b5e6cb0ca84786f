"""The console's guards over plain HTTP (no browser needed): text from people, agents and hooks
is shown as text, nothing answers without a session, a session belongs to one server, a
cross-site request changes nothing, no secret reaches a page, and a long timeline is paged.
"""

from __future__ import annotations

import json
import sqlite3
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest

from console_helpers import fetch, serving, sign_in
from runtime_helpers import LoopDir
from the_loop.config import read_config
from the_loop.hooks.engine.points import WorkItemStart
from the_loop.runtime.service import Loop

TOKEN = "alice-console-token-0123456789"
OPERATOR = "operator-console-token-9876543210"
MARKUP = '<script>alert(1)</script> "><img onerror=alert(2) src=x>'
FAILING_HOOK = f"""\
from the_loop.sdk.hooks import LifecycleHooks


class Loud(LifecycleHooks):
    def work_item_start(self, ctx):
        raise RuntimeError({MARKUP!r})
"""
PAGES = ("/console", "/console/items", "/console/rules", "/console/whatif?target=0",
         "/console/points/1", "/console/items/1", "/console/nothing-here")


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[LoopDir, str, str]]:
    """A loop whose item has a comment and a hook error holding markup, served with alice's
    token; yields (the loop folder, the item's ref, the server's URL)."""
    monkeypatch.setenv("ALICE_TOKEN", TOKEN)
    monkeypatch.setenv("OPERATOR_TOKEN", OPERATOR)
    ld = LoopDir(tmp_path)
    ld.write("hooks/loud.py", FAILING_HOOK)
    ld.write_config("serve: {tokens: {alice: ALICE_TOKEN}, "
                    "tokenEnv: OPERATOR_TOKEN}\n"
                    "hooks:\n  - {name: loud, path: hooks/loud.py}\n")
    ref = ld.add(f"Title {MARKUP}")
    ld.ok("items", "comment", ref, f"look: {MARKUP}", "--author", "bob")
    loop = Loop(read_config(ld.config), strict_hooks=True, source="test")
    try:
        loop.fire(WorkItemStart(**loop.base(ref), actor="alice", source="command"))
    finally:
        loop.close()
    with serving(ld.config, "OPERATOR_TOKEN") as url:
        yield ld, ref, url


def _item_page(url: str, ref: str) -> str:
    return f"{url}/console/items/{urllib.parse.quote(ref, safe='')}"


def test_a_comment_and_a_hook_error_holding_markup_are_shown_as_text(
        served: tuple[LoopDir, str, str]) -> None:
    _, ref, url = served
    cookie = sign_in(url, TOKEN)
    for page in (_item_page(url, ref), f"{url}/console/items", f"{url}/console/points/1"):
        got = fetch(page, cookie=cookie)
        assert got.status == 200, got.body
        assert "<script>alert" not in got.body and "<img onerror" not in got.body
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in got.body
    timeline = fetch(_item_page(url, ref), cookie=cookie).body
    assert "&#34;&gt;&lt;img onerror=alert(2) src=x&gt;" in timeline  # the comment, as text
    assert "RuntimeError" in timeline and "failed" in timeline  # the hook's error, as text


def test_no_console_page_answers_without_a_session(served: tuple[LoopDir, str, str]) -> None:
    _, _, url = served
    cookie = sign_in(url, TOKEN)
    login, _, rest = cookie.partition("=")[2].partition(".")
    expiry, _, sig = rest.partition(".")
    forged = (
        "",  # none
        "the_loop_console=alice.9999999999.00",  # made up
        f"the_loop_console=operator.{expiry}.{sig}",  # alice's signature, another login
        f"the_loop_console={login}.{int(expiry) + 1}.{sig}",  # a longer life, same signature
        f"the_loop_console={login}.100.{sig}",  # long expired
    )
    for page in PAGES:
        for bad in forged:
            got = fetch(f"{url}{page}", cookie=bad)
            assert got.status == 303 and got.headers["Location"] == "/console/signin", (page, bad)
            assert got.body == ""
        assert fetch(f"{url}{page}", cookie=cookie).status in (200, 404)
    # The API is untouched: a console cookie is no bearer token.
    assert fetch(f"{url}/items", cookie=cookie).status == 401


def test_sign_in_sets_a_strict_httponly_expiring_cookie_and_a_wrong_token_gets_none(
        served: tuple[LoopDir, str, str]) -> None:
    """A session's token (an agent's) is refused too."""
    _, _, url = served
    wrong = fetch(f"{url}/console/signin", data=b"token=not-a-token")
    assert wrong.status == 401 and "Set-Cookie" not in wrong.headers
    assert "not one this server knows" in wrong.body
    ld, ref, url = served
    ld.start(ref)
    ld.poll()  # a session, and the token the loop handed it
    [launched] = ld.launches()
    agent = fetch(f"{url}/console/signin", data=urllib.parse.urlencode(
        {"token": launched["env"]["THE_LOOP_SESSION_TOKEN"]}).encode())
    assert agent.status == 403 and "Set-Cookie" not in agent.headers
    assert "an agent&#39;s token does not open the console" in agent.body
    got = fetch(f"{url}/console/signin", data=urllib.parse.urlencode({"token": OPERATOR}).encode())
    flags = got.headers["Set-Cookie"]
    assert got.status == 303 and flags.startswith("the_loop_console=operator.")
    assert "HttpOnly" in flags and "SameSite=Strict" in flags and "Max-Age=28800" in flags
    assert "Secure" not in flags  # plain http here; behind TLS the cookie is Secure:
    behind_tls = fetch(f"{url}/console/signin", data=f"token={TOKEN}".encode(),
                       headers={"X-Forwarded-Proto": "https"})
    assert "; Secure" in behind_tls.headers["Set-Cookie"]
    assert TOKEN not in flags and OPERATOR not in flags
    page = fetch(f"{url}/console/items", cookie=flags.split(";", 1)[0])
    assert page.status == 200 and "signed in as operator" in page.body
    csp = page.headers["Content-Security-Policy"]
    assert "default-src 'none'" in csp and "unsafe-inline" not in csp and "script-src" not in csp


def test_a_session_cookie_from_one_server_is_refused_by_another(
        served: tuple[LoopDir, str, str]) -> None:
    ld, _, url = served
    cookie = sign_in(url, TOKEN)
    with serving(ld.config, "OPERATOR_TOKEN") as other:
        assert fetch(f"{other}/console/items", cookie=cookie).status == 303
        assert fetch(f"{other}/console/items", cookie=sign_in(other, TOKEN)).status == 200
    assert fetch(f"{url}/console/items", cookie=cookie).status == 200


def test_a_cross_site_request_changes_nothing(served: tuple[LoopDir, str, str]) -> None:
    ld, ref, url = served
    cookie = sign_in(url, TOKEN)
    before = (ld.item(ref), ld.work(ref), ld.query("SELECT count(*) AS n FROM steps"))
    evil = {"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site",
            "Content-Type": "application/x-www-form-urlencoded"}
    quoted = urllib.parse.quote(ref, safe="")
    # The API takes bearer tokens only: a browser's cookie acts on nothing.
    api = fetch(f"{url}/items/{quoted}/input", cookie=cookie, headers=evil,
                data=json.dumps({"text": "/approve"}).encode())
    assert api.status == 401
    for path in ("/console/signin", "/console/signout", f"/console/items/{quoted}",
                 "/console/whatif"):
        got = fetch(f"{url}{path}", cookie=cookie, headers=evil, data=f"token={TOKEN}".encode())
        assert got.status == 403 and "Set-Cookie" not in got.headers, path
    # Same-site, a console POST other than sign-in and sign-out still changes nothing.
    same = fetch(f"{url}/console/items/{quoted}", cookie=cookie, data=b"text=/approve")
    assert same.status == 404
    assert (ld.item(ref), ld.work(ref), ld.query("SELECT count(*) AS n FROM steps")) == before
    assert fetch(f"{url}/console/items", cookie=cookie).status == 200  # still signed in


def test_no_token_reaches_a_page(served: tuple[LoopDir, str, str]) -> None:
    ld, ref, url = served
    ld.ok("items", "comment", ref, f"my token is {OPERATOR}", "--author", "bob")
    cookie = sign_in(url, TOKEN)
    for page in (_item_page(url, ref), f"{url}/console/items", f"{url}/console/rules",
                 f"{url}/console/points/1", f"{url}/console/signin"):
        body = fetch(page, cookie=cookie).body
        assert TOKEN not in body and OPERATOR not in body
    assert "my token is [redacted]" in fetch(_item_page(url, ref), cookie=cookie).body


def test_a_work_item_with_ten_thousand_points_pages_its_timeline(
        served: tuple[LoopDir, str, str]) -> None:
    ld, ref, url = served
    with sqlite3.connect(ld.state / "loop.db") as conn:
        at, record = conn.execute("SELECT at, record FROM decision_log").fetchone()
        conn.executemany(
            "INSERT INTO decision_log(at, point, work_item, record) VALUES (?, ?, ?, ?)",
            [(at + i, "work_item_start", ref, record) for i in range(1, 10_000)])
    cookie = sign_in(url, TOKEN)
    first = fetch(_item_page(url, ref), cookie=cookie).body
    assert "10000 points recorded" in first and "page 1 of 100" in first
    assert first.count('<section id="p') == 100 and 'id="p1"' in first
    last = fetch(_item_page(url, ref) + "?page=100", cookie=cookie).body
    assert last.count('<section id="p') == 100 and 'id="p10000"' in last
    assert 'id="p1"' not in last


def test_odd_console_requests_get_a_sentence_not_a_traceback(
        served: tuple[LoopDir, str, str]) -> None:
    _, _, url = served
    cookie = sign_in(url, TOKEN)
    for path in ("/console/items/%00", "/console/items/..%2F..%2Fetc%2Fpasswd",
                 "/console/items/" + "9" * 500, "/console/items/%ED%A0%80",
                 "/console/points/99999999999", "/console/points/-1",
                 "/console/items?page=99999999999999&state=%ED%A0%80",
                 "/console/items/1?page=%D9%A1&ipage=-3", "/console/rules?since=forever",
                 "/console/whatif?target=%ED%A0%80&period=1y"):
        got = fetch(f"{url}{path}", cookie=cookie)
        assert got.status in (200, 404), (path, got.status)
        assert "Traceback" not in got.body and "<html" in got.body, path
    bad_form = fetch(f"{url}/console/signin", data=b"token=\xff\xfe")
    assert bad_form.status == 401 and "Set-Cookie" not in bad_form.headers
