"""The local tracker's work-item facts (issue 36.2): who filed an item, and a pull request's
branches, head repository, fork (derived) and draft state — from `items add`, the JSON API
and a webhook event — and a state folder written before them still opens."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runtime_helpers import LoopDir
from the_loop.runtime import db as db_mod
from the_loop.runtime.db import open_database
from the_loop.runtime.tracker import LocalTracker

TOKEN = "operator-secret-36"
ALICE = "alice-secret-36"


def _facts(ld: LoopDir, ref: str) -> dict[str, Any]:
    tracker = LocalTracker(open_database(ld.database or ld.state / "loop.db"), "acme/app")
    try:
        return tracker.work_item(ref).to_json()
    finally:
        tracker.db.close()


def test_items_add_records_the_author_and_a_pull_requests_branches_and_derives_fork(
        ld: LoopDir) -> None:
    fork = ld.ok("items", "add", "Fix login", "--kind", "pull-request", "--author", "mallory",
                 "--base", "main", "--head", "fix-login", "--head-repository", "mallory/app",
                 "--draft").strip()
    same = ld.ok("items", "add", "Tidy", "--kind", "pull-request", "--head", "tidy").strip()
    ticket = ld.ok("items", "add", "A ticket", "--author", "bob").strip()
    shown = json.loads(ld.ok("items", "show", fork, "--json"))
    assert {k: shown[k] for k in ("author", "base", "head", "head_repository", "fork",
                                  "draft")} == {
        "author": "mallory", "base": "main", "head": "fix-login",
        "head_repository": "mallory/app", "fork": True, "draft": True}
    facts = _facts(ld, fork)
    assert (facts["author"], facts["fork"], facts["draft"], facts["head"]) == (
        "mallory", True, True, "fix-login")
    same_facts = _facts(ld, same)
    assert (same_facts["head_repository"], same_facts["fork"], same_facts["base"]) == (
        "acme/app", False, "")
    ticket_facts = _facts(ld, ticket)
    assert (ticket_facts["author"], ticket_facts["fork"], ticket_facts["head_repository"]) == (
        "bob", False, "")
    assert "fork" not in json.loads(ld.ok("items", "show", ticket, "--json"))


@pytest.mark.parametrize(("args", "said"), [
    (("--base", "main"), "--base: only a pull request has them; add --kind pull-request"),
    (("--kind", "pull-request", "--head", "a b"), "--head 'a b' is not a branch name"),
    (("--kind", "pull-request", "--head-repository", "nope"),
     "--head-repository 'nope' is not owner/repo (e.g. acme/app, or a fork such as "
     "someone/app)"),
])
def test_items_add_refuses_pull_request_flags_it_cannot_record(
        ld: LoopDir, args: tuple[str, ...], said: str) -> None:
    code, _, err = ld.run("items", "add", "T", *args)
    assert code in (1, 2) and said in err and "Traceback" not in err, err
    assert ld.run("items", "add", "T", "--kind", "pull-request", "--fork")[0] == 2  # derived


def test_a_state_folder_from_before_the_pull_request_facts_still_opens(
        tmp_path: Path, database: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A version-2 database (today's main) migrates: its pull request's head repository is
    the tracker's own (the only one it could have), its branches are empty, nothing is lost."""
    ld = LoopDir(tmp_path, database=database)
    target = database or ld.state / "loop.db"
    with monkeypatch.context() as m:  # the schema as main wrote it
        m.setattr(db_mod, "SCHEMA_VERSION", 2)
        old = open_database(target)
        with old.transaction() as conn:
            conn.execute("INSERT INTO items(repository, number, kind, title, parent, author, "
                         "created) VALUES ('acme/app', 1, 'pull-request', 'Old PR', '', "
                         "'carol', 1.0)")
        cols = {r["name"] for r in old.conn.execute("PRAGMA table_info(items)")} if (
            not database) else set()
        old.close()
    assert "head" not in cols
    facts = _facts(ld, "#1")
    assert {k: facts[k] for k in ("author", "base", "head", "head_repository", "fork",
                                  "draft")} == {
        "author": "carol", "base": "", "head": "", "head_repository": "acme/app",
        "fork": False, "draft": False}
    assert json.loads(ld.ok("items", "show", "1", "--json"))["title"] == "Old PR"
    ld.close()


@pytest.fixture
def control(ld: LoopDir, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    from runtime.test_runtime_daemons import Client
    from the_loop.config import read_config
    from the_loop.runtime.control import ControlServer
    from the_loop.runtime.service import Loop

    ld.write_config("serve: {tokens: {alice: ALICE_TOKEN}}\n")
    monkeypatch.setenv("LOOP_TOKEN", TOKEN)
    monkeypatch.setenv("ALICE_TOKEN", ALICE)
    loop = Loop(read_config(ld.config), strict_hooks=True, source="serve")
    server = ControlServer(loop, "127.0.0.1", 0, "LOOP_TOKEN")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    try:
        yield Client(f"http://{host}:{port}")
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
        loop.close()


def test_the_json_api_and_the_webhook_file_items_with_their_facts(
        ld: LoopDir, control: Any) -> None:
    pr = {"title": "Fix", "kind": "pull-request", "base": "main", "head": "fix",
          "head_repository": "mallory/app"}
    status, answer = control.call("POST", "/items", pr, token=ALICE)
    assert (status, answer["author"]) == (200, "alice")  # the login comes from the token
    assert _facts(ld, answer["ref"])["fork"] is True
    status, answer = control.call("POST", "/items", {**pr, "author": "bob"}, token=ALICE)
    assert status == 403 and "leave author out" in answer["error"]
    status, answer = control.call("POST", "/items", {**pr, "fork": False}, token=TOKEN)
    assert status == 400 and answer["error"].startswith("fork is derived")
    status, answer = control.call("POST", "/items", {"title": "T", "draft": True}, token=TOKEN)
    assert status == 400 and "only a pull request has them" in answer["error"]
    status, answer = control.call("POST", "/webhook", {
        "event": "opened", "title": "From a fork", "kind": "pull-request", "author": "eve",
        "head": "x", "head_repository": "eve/app", "draft": True, "labels": ["loop"]},
        token=TOKEN)
    assert status == 200 and answer["done"] == "opened"
    facts = _facts(ld, answer["ref"])
    assert (facts["author"], facts["fork"], facts["draft"]) == ("eve", True, True)
