"""Fewer statements per visit (issue 34.1), on SQLite and on PostgreSQL, without losing what
the crash-safety promise needs: a point's decisions, held by the visit's batch, reach the
step with its finish, or at the batch's commit, or after its rollback; the pending steps a
visit reads once include what it queues itself, and are read again after each commit.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from test_visit_batch import REF, elsewhere

from the_loop.runtime.db import Database, Fenced, open_database
from the_loop.runtime.stepactions import StepAction
from the_loop.runtime.store import Step, Store
from the_loop.sqldb import SQLITE

DECIDED = {"decisions": {"proceed": True, "reason": ""}, "refused": False}


def stored(target: str | Path, key: str) -> dict[str, Any]:
    """The step `key` as another process reads it."""
    step = elsewhere(target, lambda s: s.step(key))
    assert step is not None
    return {"state": step.state, "outcome": step.outcome, "decisions": step.decisions}


@contextmanager
def visiting(db: Database) -> Iterator[tuple[Store, Step]]:
    """A visit (db.batched) to a just-armed item, claimed, at its first step (the start);
    released at its end."""
    store = Store(db)
    store.arm(REF, actor="alice", source="command", cursors={})
    with db.batched():
        assert store.claim(REF)
        step = store.next_step(REF)
        assert step is not None and step.action is StepAction.START
        yield store, step
        store.release(REF)


def test_a_decided_step_is_finished_with_its_decisions(db: Database,
                                                      target: str | Path) -> None:
    with visiting(db) as (store, step):
        store.record(step, "work_item_start", DECIDED)
        store.finish(step, "started")
    assert stored(target, step.key) == {"state": "done", "outcome": "started",
                                        "decisions": {"work_item_start": DECIDED}}


def test_decisions_of_a_step_left_pending_are_written_when_the_visit_commits(
        db: Database, target: str | Path) -> None:
    with visiting(db) as (store, step):
        store.record(step, "work_item_start", DECIDED)
        db.settle()  # before a session starts, a hook is asked, a channel is called
        assert stored(target, step.key)["decisions"] == {"work_item_start": DECIDED}


def test_decisions_outlive_a_rollback_of_the_visit(db: Database, target: str | Path) -> None:
    """A later write of the visit fails: its writes are rolled back as a crash would leave
    them, but the point's decisions are written, so the redo asks no hook again."""
    with visiting(db) as (store, step):
        store.set_work(REF, state="running")
        store.record(step, "work_item_start", DECIDED)
        with pytest.raises(RuntimeError), db.transaction():
            raise RuntimeError("a write of the visit failed")
    assert stored(target, step.key) == {"state": "pending", "outcome": "",
                                        "decisions": {"work_item_start": DECIDED}}
    assert elsewhere(target, lambda s: s.work(REF))["state"] == "armed"  # rolled back


def test_a_step_the_visit_queues_is_run_in_the_same_visit(db: Database,
                                                         target: str | Path) -> None:
    with visiting(db) as (store, start):
        enter = StepAction.ENTER.key(REF, 1, 1)
        with db.transaction() as conn:
            store.add_step(conn, enter, REF, StepAction.ENTER,
                           {"node": "write", "actor": "alice", "note": "", "epoch": 1})
            store.finish(start, "started", conn=conn)
        got = store.next_step(REF)
        assert got is not None and got.key == enter and got.payload["node"] == "write"
        store.finish(got, "agent")
        assert store.next_step(REF) is None and not store.has_pending(REF)
    assert stored(target, enter)["state"] == "done"


def test_a_step_queued_elsewhere_during_a_visit_is_run_by_the_next_visit_at_the_latest(
        db: Database, target: str | Path) -> None:
    """A step queued elsewhere while the visit runs (the control plane's closure of an item
    queues without a claim) is not lost: on PostgreSQL the visit's read after a commit
    (its next transaction's fence check) finds it; on SQLite the visit keeps the queue it
    read across its commits (issue 34: no read per commit) and the next visit runs it."""
    complete = StepAction.COMPLETE.key(REF, 1)
    with visiting(db) as (store, start):
        elsewhere(target, lambda s: s.queue(complete, REF, StepAction.COMPLETE,
                                            {"source": "tracker", "actor": "bob"}))
        store.finish(start, "started")
        db.settle()
        got = store.next_step(REF)
        if db.dialect is SQLITE:
            assert got is None  # what this visit read, all of it run
        else:
            assert got is not None and got.key == complete
    with db.batched():
        assert store.claim(REF)
        got = store.next_step(REF)
        assert got is not None and got.key == complete
        store.release(REF)


def test_the_loops_sqlite_file_commits_without_waiting_for_the_disk(tmp_path: Path) -> None:
    """WAL with synchronous=NORMAL (docs/runtime.md): a commit does not hold the write lock
    through an fsync; a killed process still loses nothing committed."""
    db = open_database(tmp_path / "loop.db")
    try:
        assert db.dialect is SQLITE
        assert db.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db.conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    finally:
        db.close()
    Store(open_database(tmp_path / "loop.db")).arm(REF, actor="a", source="command",
                                                    cursors={})
    with sqlite3.connect(tmp_path / "loop.db") as other:  # committed: another reader sees it
        assert other.execute("SELECT state FROM work").fetchone() == ("armed",)


@contextmanager
def counting(db: Database) -> Iterator[list[str]]:
    """The statements `db`'s connection runs meanwhile (SQLite's trace callback; on
    PostgreSQL its pool's `execute`)."""
    ran: list[str] = []
    if db.dialect is SQLITE:
        db._sqlite.set_trace_callback(ran.append)
        try:
            yield ran
        finally:
            db._sqlite.set_trace_callback(None)
        return
    pg: Any = db._pg  # type: ignore[attr-defined]
    execute = pg.execute

    def counted(sql: str, *args: Any) -> Any:
        ran.append(sql)
        return execute(sql, *args)
    pg.execute = counted
    try:
        yield ran
    finally:
        del pg.execute


def test_a_visit_starts_from_the_steps_its_claim_returned_and_reads_none_of_its_own(
        db: Database, target: str | Path) -> None:
    """On SQLite the claim's statement returns the item's pending steps (issue 34: one
    statement less a visit); on PostgreSQL the visit reads them after its claim, with the
    read that locks the row (what the claim's statement returned could miss a step an
    agent committed meanwhile: test_issue34_attack). A step queued elsewhere after a visit
    is the next visit's."""
    store = Store(db)
    store.arm(REF, actor="alice", source="command", cursors={})
    with db.batched():
        with counting(db) as ran:
            assert store.claim(REF)
            step = store.next_step(REF)
        assert step is not None and step.action is StepAction.START
        assert ran[0].lstrip().startswith("UPDATE work SET claim")
        assert len(ran) == (1 if db.dialect is SQLITE else 2)
        store.finish(step, "started")
        assert store.next_step(REF) is None
        store.release(REF)
    elsewhere(target, lambda s: s.queue("enter:x", REF, StepAction.ENTER,
                                        {"node": "write", "actor": "a", "note": "",
                                         "epoch": 1}))
    with db.batched():
        assert store.claim(REF)
        got = store.next_step(REF)
        assert got is not None and got.key == "enter:x"
        store.release(REF)


def test_a_launchs_registration_is_one_statement_and_a_stale_owner_registers_nothing(
        db: Database, target: str | Path) -> None:
    """A fresh launch's registration is one statement outside any transaction (issue 34),
    which writes the session only while the claim is still the visit's: a visit paused
    past its lease while its harness started records nothing (`Fenced`)."""
    store = Store(db, expiry=0.5)
    store.arm(REF, actor="alice", source="command", cursors={})

    def register(sid: str) -> None:
        store.register_session(sid, f"launch:{sid}", ref=REF, endpoint=REF, harness="h",
                               pid=42, node="write", log=f"{sid}.log")
        db.settle()

    with db.batched():
        assert store.claim(REF)
        store.set_work(REF, state="running", node="write", session_id="s-1", host=store.host)
        db.settle()  # before the harness exists (launching._start)
        with counting(db) as ran:
            register("s-1")
        assert len(ran) == 1 and ran[0].lstrip().startswith("INSERT INTO sessions")
        store.release(REF)
    assert elsewhere(target, lambda s: s.session("s-1"))["pid"] == 42
    with db.batched():
        assert store.claim(REF)
        store.set_work(REF, session_id="s-2")
        db.settle()
        time.sleep(0.6)  # paused past its lease: another process takes the item over
        assert elsewhere(target, lambda s: s.claim(REF)) is True
        with pytest.raises(Fenced, match="writes nothing more"):
            register("s-2")
        store.release(REF)
    assert elsewhere(target, lambda s: s.session("s-2")) is None


def test_input_taken_from_a_cursor_the_visit_read_is_queued_once_without_reading_it_again(
        db: Database, target: str | Path) -> None:
    """A visit that holds the item's claim takes comments in from the cursor it read (issue
    34: not read again in the transaction); a comment taken already, by whoever took it,
    is still one input step, and the cursor never moves back."""
    from the_loop.runtime.tracker.base import Comment

    store = Store(db)
    store.arm(REF, actor="alice", source="command", cursors={REF: 3})
    comments = [Comment(i, "bob", f"c{i}", 0.0) for i in (4, 5)]
    assert elsewhere(target, lambda s: s.take_input(REF, REF, comments[:1], "the-loop")) == 1
    with db.batched():
        assert store.claim(REF)
        with counting(db) as ran:
            assert store.take_input(REF, REF, comments, "the-loop", after=3) == 1  # 5 only
        assert not any("FROM cursors" in sql for sql in ran)
        store.release(REF)
    assert store.cursor(REF) == 5
    keys = [r["key"] for r in db.conn.execute("SELECT key FROM steps WHERE kind='input'")]
    assert sorted(keys) == [StepAction.INPUT.key(REF, 4), StepAction.INPUT.key(REF, 5)]


def test_a_launchs_room_count_reads_the_session_it_replaces_in_the_same_statement(
        db: Database) -> None:
    """Under the host's launch lock a launch counts the host's sessions besides its item's
    current one, which it ends next: that session's row comes with the count (issue 34)."""
    store = Store(db)
    store.arm(REF, actor="alice", source="command", cursors={})
    for sid in ("s-1", "s-2"):
        store.register_session(sid, f"launch:{sid}", ref=REF, endpoint=REF, harness="h",
                               pid=42, node="write", log=f"{sid}.log")
    with db.batched():
        with counting(db) as ran:
            assert store.running_here(besides="s-1") == 1
            row = store.session("s-1")
            assert store.running_here(besides="s-9") == 2 and store.session("s-9") is None
        assert row is not None and row["pid"] == 42 and len(ran) == 2
    assert store.running_here(besides="s-1") == 1  # outside a visit: the count alone
