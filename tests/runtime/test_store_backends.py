"""The loop's store on both backends (issue 24.1-24.2): every statement of the tracker and the
store runs on SQLite and on PostgreSQL with the same results; the schema is versioned and a
newer one refused; a claim is a lease whose fencing number refuses a stale owner's writes.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from the_loop.errors import ConfigError
from the_loop.runtime.db import SCHEMA_VERSION, Database, Fenced, open_database
from the_loop.runtime.stepactions import StepAction
from the_loop.runtime.store import Store
from the_loop.runtime.tracker import LocalTracker
from the_loop.runtime.tracker.base import Comment


def in_thread(fn: Any) -> Any:
    """Run `fn` in another thread (another claim owner) and return what it returned."""
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    t.join(30)
    return out[0]


def test_tracker_items_comments_labels_and_closing_behave_the_same(db: Database) -> None:
    tracker = LocalTracker(db, "acme/app")
    first = tracker.add("Login page", body="Email sign-in.", labels=["ui", "ui"], author="carol")
    pr = tracker.add("The fix", kind="pull-request", parent="#1")
    assert (first, pr) == ("local:acme/app#1", "local:acme/app#2")
    c1 = tracker.comment("#1", "First", author="bob")
    c2 = tracker.comment("1", "Second 100% sure", author="alice", source="reply")
    assert c2 > c1 > 0
    tracker.label(first, "loop")
    tracker.label(first, "ui", remove=True)
    item = tracker.get(first)
    assert (item.title, item.body, item.labels) == ("Login page", "Email sign-in.", ["loop"])
    assert [(c.author, c.body) for c in item.comments] == [("bob", "First"),
                                                          ("alice", "Second 100% sure")]
    assert tracker.comments_after(first, c1) == [
        Comment(c2, "alice", "Second 100% sure", item.comments[1].created, "reply")]
    assert tracker.comment_body(c1) == "First" and tracker.comment_body(999) == ""
    assert tracker.close(first, actor="dave") is True
    assert tracker.close(first, actor="dave") is False
    assert [i.ref for i in tracker.items(state="open")] == [pr]
    assert tracker.get(pr).parent == first
    assert tracker.work_item(pr).kind == "pull-request"
    other = tracker.add("Another ticket")
    tracker.add("Its fix", kind="pull-request", parent=other)
    assert [i.ref for i in tracker.items(state="open", parent=first)] == [pr]
    assert [i.ref for i in tracker.items(parent=other)] == ["local:acme/app#4"]


def test_a_visits_copy_of_an_item_follows_its_own_label_and_closure_writes(
        db: Database) -> None:
    """In a visit (db.batched) an item is read once; the tracker's own writes keep that copy
    true instead of reading it again (issue 34), and what it shows is what is stored."""
    tracker = LocalTracker(db, "acme/app")
    ref = tracker.add("Login page", labels=["b"])
    with db.batched():
        assert tracker.get(ref, comments=False).labels == ["b"]
        tracker.label(ref, "a")
        tracker.label(ref, "c")
        tracker.label(ref, "b", remove=True)
        assert tracker.get(ref, comments=False).labels == ["a", "c"]
        tracker.label(ref, "a", remove=True)
        tracker.label(ref, "c", remove=True)
        assert tracker.get(ref, comments=False).labels == []
        tracker.label(ref, "z")
        assert tracker.close(ref, actor="dave") is True
        seen = tracker.get(ref, comments=False)
        assert (seen.labels, seen.state, seen.closed_by) == (["z"], "closed", "dave")
    stored = tracker.get(ref, comments=False)
    assert (stored.labels, stored.state, stored.closed_by) == (["z"], "closed", "dave")


def test_a_marked_comment_is_posted_once_and_only_the_authors_own_marker_counts(
        db: Database) -> None:
    tracker = LocalTracker(db, "acme/app")
    ref = tracker.add("Login page")
    mark = "<!-- the-loop:enter:50%_Done -->"
    tracker.comment(ref, f"quoting {mark}", author="mallory")  # another author's copy
    assert tracker.comment_once(ref, f"Waiting.\n\n{mark}", mark, author="the-loop") is True
    assert tracker.comment_once(ref, f"Again.\n\n{mark}", mark, author="the-loop") is False
    similar = "<!-- the-loop:enter:50%_done -->"  # another key (case, % and _ are literal)
    assert tracker.comment_once(ref, f"Other.\n\n{similar}", similar, author="the-loop")
    assert [c.author for c in tracker.get(ref).comments] == ["mallory", "the-loop",
                                                            "the-loop"]


def test_a_relabel_moves_one_label_to_another_whatever_the_item_already_has(
        db: Database) -> None:
    """The phase change's `relabel` (issue 34: one statement when the item has the old label
    and not the new one): the old label goes and the new one is there, once, in every case."""
    tracker = LocalTracker(db, "acme/app")
    ref = tracker.add("Login page", labels=["ui", "loop:writing"])

    def labels() -> list[str]:
        return tracker.get(ref).labels

    tracker.relabel(ref, "loop:writing", "loop:checking")
    assert labels() == ["loop:checking", "ui"]
    tracker.label(ref, "loop:done")
    tracker.relabel(ref, "loop:checking", "loop:done")  # the new one is there already
    assert labels() == ["loop:done", "ui"]
    tracker.relabel(ref, "loop:review", "loop:writing")  # the old one is not
    assert labels() == ["loop:done", "loop:writing", "ui"]
    tracker.relabel(ref, "loop:writing", "loop:writing")
    assert labels() == ["loop:done", "loop:writing", "ui"]
    with db.batched():  # a visit's copy of the item follows its own writes
        assert tracker.get(ref, comments=False).labels == ["loop:done", "loop:writing", "ui"]
        tracker.relabel(ref, "loop:writing", "loop:review")
        assert tracker.get(ref, comments=False).labels == ["loop:done", "loop:review", "ui"]
    assert labels() == ["loop:done", "loop:review", "ui"]


def test_steps_cursors_and_sessions_behave_the_same(db: Database) -> None:
    store = Store(db)
    ref = "local:acme/app#1"
    assert store.arm(ref, actor="alice", source="command", cursors={ref: 3}) == 1
    assert store.arm(ref, actor="alice", source="command", cursors={ref: 3}) == 0
    assert store.refs("armed") == [ref] and store.cursor(ref) == 3
    step = store.next_step(ref)
    assert step is not None and step.action is StepAction.START and step.payload["arm_seq"] == 1
    store.record(step, "work_item_start", {"refused": False})
    assert store.step(step.key).decisions == {"work_item_start": {"refused": False}}  # type: ignore[union-attr]
    store.finish(step, "started")
    assert store.pending_refs() == [] and not store.has_pending(ref)

    comments = [Comment(i, "bob", f"c{i}", 0.0) for i in (2, 4, 5)]
    assert store.take_input(ref, ref, comments, skip="the-loop") == 2  # 2 is before the cursor
    assert store.take_input(ref, ref, comments[:1], skip="the-loop") == 0
    assert store.cursor(ref) == 5  # a late, shorter batch never moves it back
    store.queue("launch:x", ref, StepAction.LAUNCH, {"node": "write", "prompt": "P",
                                                  "respawn": False, "actor": "a", "endpoint": ""})
    with db.transaction() as conn:
        assert store.extend_queued_launch(conn, ref, "write", "", " + more", 1_000) == "launch:x"
    assert store.step("launch:x").payload["prompt"] == "P + more"  # type: ignore[union-attr]
    assert store.pending_refs() == [ref]

    store.register_session("s-1", "launch:x", ref=ref, endpoint=ref, harness="h", pid=42,
                           node="write", log="s-1.log")
    assert store.work(ref)["session_id"] == "s-1"  # type: ignore[index]
    assert [s["id"] for s in store.live_sessions()] == ["s-1"]
    assert store.running_here() == 1 and store.running_here(besides="s-1") == 0
    assert store.session_of_step("launch:x")["pid"] == 42  # type: ignore[index]
    for sid in ("s-2", "s-3"):
        store.register_session(sid, f"launch:{sid}", ref=ref, endpoint=ref, harness="h",
                               pid=43, node="write", log=f"{sid}.log")
    assert store.sessions_ended({"s-1": 0}) == ["s-1"]
    # One call, two exit codes, one session already recorded: only the others are returned.
    assert store.sessions_ended({"s-3": None, "s-1": 0, "s-2": 3}) == ["s-3", "s-2"]
    assert {s["id"]: s["code"] for s in db.conn.execute(
        "SELECT id, code FROM sessions ORDER BY id")} == {"s-1": 0, "s-2": 3, "s-3": None}
    assert store.sessions_ended({}) == []
    assert store.live_sessions() == []


def test_a_host_declared_lost_has_its_sessions_marked_lost(db: Database,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    ref = "local:acme/app#1"
    store = Store(db, expiry=0.2)
    store.arm(ref, actor="a", source="command", cursors={})
    monkeypatch.setenv("THE_LOOP_HOST_ID", "host-a")
    store.beat()
    store.register_session("s-a", "k", ref=ref, endpoint=ref, harness="h", pid=1, node="n",
                           log="l")
    monkeypatch.setenv("THE_LOOP_HOST_ID", "host-b")
    assert store.host_alive("host-a")
    time.sleep(0.3)
    assert not store.host_alive("host-a") and store.host_alive("host-b")
    assert store.take_over(ref, "host-a") == 1
    assert store.work(ref)["host"] == ""  # type: ignore[index]
    monkeypatch.setenv("THE_LOOP_HOST_ID", "host-a")
    assert [s["id"] for s in store.lost_here()] == ["s-a"] and store.live_sessions() == []


def test_a_claim_is_one_owners_until_its_lease_lapses(db: Database, target: str | Path) -> None:
    ref = "local:acme/app#1"
    store = Store(db, expiry=0.5)
    store.arm(ref, actor="a", source="command", cursors={})
    assert store.claim(ref)
    other = open_database(target)
    try:
        rival = Store(other, expiry=0.5)
        assert in_thread(lambda: rival.claim(ref)) is False  # the lease lives
        time.sleep(0.6)  # and lapses: no heartbeat renewed it
        assert in_thread(lambda: rival.claim(ref)) is True
    finally:
        other.close()
    # The first owner wakes up: its next write is refused, and nothing it tries lands.
    with pytest.raises(Fenced, match="writes nothing more"):
        store.set_work(ref, state="stopped")
    store.release(ref)
    w = store.work(ref)
    assert w is not None and w["state"] == "armed" and w["claim"] != "" and w["fence"] == 2


def test_an_agents_step_goes_in_without_a_claim_only_while_none_is_held_and_the_row_is_as_read(
        db: Database, target: str | Path) -> None:
    """`graph complete`'s one statement (issue 34): it queues the step only while nobody holds
    the item's claim and its work row is what the agent's check read; otherwise nothing is
    written and the command takes the claim as before."""
    ref = "local:acme/app#1"
    store = Store(db, expiry=30)
    store.arm(ref, actor="a", source="command", cursors={})
    payload = {"node": "write", "epoch": 0, "actor": "agent", "summary": ""}
    read = store.work(ref)
    assert read is not None

    def queued(key: str, w: dict[str, Any]) -> bool:
        return store.queue_unclaimed(key, ref, StepAction.DONE, payload, w)

    store.set_work(ref, state="running")  # moved on since `read`
    assert queued("done:a", read) is False and store.step("done:a") is None
    read = store.work(ref)
    assert read is not None
    other = open_database(target)
    try:  # another owner takes the claim in a transaction still open while the step tries
        taking, took = threading.Event(), threading.Event()

        def take() -> None:
            with other.transaction() as conn:
                conn.execute("UPDATE work SET claim='rival', claim_until=9e9, fence=fence + 1 "
                             "WHERE ref=?", (ref,))
                taking.set()
                time.sleep(1.0)
            took.set()
        rival = threading.Thread(target=take)
        rival.start()
        assert taking.wait(10)
        t = time.monotonic()
        refused = queued("done:b", read)  # waited for the rival, then saw its claim
        waited = time.monotonic() - t
        rival.join(10)
        assert took.is_set() and refused is False and waited > 0.3
    finally:
        other.close()
    assert store.step("done:b") is None
    db.conn.execute("UPDATE work SET claim='', claim_until=0 WHERE ref=?", (ref,))
    assert queued("done:c", read) is False  # the claim was taken and given up since: refused
    now = store.work(ref)
    assert now is not None and queued("done:c", now) is True
    after = store.work(ref)
    assert after is not None and (after["claim"], after["fence"]) == ("", now["fence"])
    step = store.step("done:c")
    assert step is not None and (step.state, step.payload) == ("pending", payload)
    assert queued("done:c", now) is False  # queued already: the long path decides


def test_the_heartbeat_keeps_a_claim_past_its_expiry(db: Database, target: str | Path) -> None:
    ref = "local:acme/app#1"
    store = Store(db, expiry=0.4)
    store.arm(ref, actor="a", source="command", cursors={})
    assert store.claim(ref)
    other = open_database(target)
    try:
        rival = Store(other, expiry=0.4)
        for _ in range(4):
            time.sleep(0.15)
            store.beat()
            assert in_thread(lambda: rival.claim(ref)) is False
    finally:
        other.close()
    store.set_work(ref, state="stopped")  # still the owner: the write lands
    store.release(ref)
    assert store.work(ref)["claim"] == ""  # type: ignore[index]


def test_a_database_with_a_newer_schema_is_refused(db: Database, target: str | Path) -> None:
    with db.transaction() as conn:
        conn.execute("UPDATE schema_version SET version=?", (SCHEMA_VERSION + 1,))
    with pytest.raises(ConfigError, match=f"schema version {SCHEMA_VERSION + 1}, newer than "
                                          f"this the-loop knows .{SCHEMA_VERSION}.; upgrade"):
        open_database(target)


def test_a_sqlite_file_from_before_schema_versions_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "loop.db"
    with closing(sqlite3.connect(path)) as conn:
        conn.executescript(
            "CREATE TABLE work(ref TEXT PRIMARY KEY, state TEXT NOT NULL, arm_seq INTEGER NOT "
            "NULL DEFAULT 0, node TEXT NOT NULL DEFAULT '', session_id TEXT NOT NULL DEFAULT "
            "'', actor TEXT NOT NULL DEFAULT '', source TEXT NOT NULL DEFAULT '', respawns "
            "INTEGER NOT NULL DEFAULT 0, updated REAL NOT NULL DEFAULT 0);"
            "INSERT INTO work(ref, state) VALUES ('local:acme/app#1', 'running');")
    db = open_database(path)
    try:
        assert db.version() == SCHEMA_VERSION
        w = Store(db).work("local:acme/app#1")
        assert w is not None and w["state"] == "running"
        assert (w["epoch"], w["claim"], w["fence"], w["host"]) == (0, "", 0, "")
    finally:
        db.close()
