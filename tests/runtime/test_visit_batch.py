"""A visit's writes in one batch (issue 34.1), on SQLite and on PostgreSQL: the store's
transactions inside `Database.batched()` share one, which another process sees only once it
is settled; a block that raises rolls the batch back as a crash would, except the point
decisions it was told to keep; a stale owner's batch writes nothing.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from the_loop.runtime.db import Database, Fenced, open_database
from the_loop.runtime.stepactions import StepAction
from the_loop.runtime.store import Store

REF = "local:acme/app#1"


def elsewhere(target: str | Path, fn: Any) -> Any:
    """`fn(store)` on a connection of its own in another thread (another process's view)."""
    other = open_database(target)
    out: list[Any] = []
    try:
        t = threading.Thread(target=lambda: out.append(fn(Store(other, expiry=0.5))))
        t.start()
        t.join(30)
    finally:
        other.close()
    return out[0]


def state(target: str | Path) -> str:
    return str(elsewhere(target, lambda s: (s.work(REF) or {}).get("state")))


def test_a_visits_writes_land_together_when_settled(db: Database, target: str | Path) -> None:
    store = Store(db)
    store.arm(REF, actor="alice", source="command", cursors={})
    with db.batched():
        assert store.claim(REF)
        store.set_work(REF, state="running", node="write")
        store.queue(StepAction.ENTER.key(REF, 1, 1), REF, StepAction.ENTER,
                    {"node": "write", "actor": "alice", "note": "", "epoch": 1})
        assert db.pending()
        assert store.work(REF)["state"] == "running"  # type: ignore[index]  # its own view
        assert state(target) == "armed"  # nothing is seen elsewhere before it is settled
        db.settle()
        assert not db.pending()
        assert state(target) == "running"
        assert elsewhere(target, lambda s: s.has_pending(REF))
        store.set_work(REF, node="check")
        store.release(REF)  # the batch's last statement, committed with it
    w = elsewhere(target, lambda s: s.work(REF))
    assert (w["node"], w["claim"]) == ("check", "")


def test_a_block_that_raises_rolls_the_batch_back_but_keeps_a_decision(
        db: Database, target: str | Path) -> None:
    store = Store(db)
    store.arm(REF, actor="alice", source="command", cursors={})
    step = store.next_step(REF)
    assert step is not None
    with db.batched():
        assert store.claim(REF)
        store.record(step, "work_item_start", {"decisions": {"proceed": True}})
        store.set_work(REF, state="running")
        with pytest.raises(ValueError), db.transaction():
            raise ValueError("a step failed half-way")
        assert not db.pending()
        assert store.work(REF)["state"] == "armed"  # type: ignore[index]  # read again
        store.release(REF)
    assert state(target) == "armed"
    kept = elsewhere(target, lambda s: s.step(step.key))
    assert kept.decisions == {"work_item_start": {"decisions": {"proceed": True}}}
    assert kept.state == "pending"


def test_a_stale_owners_batch_writes_nothing(db: Database, target: str | Path) -> None:
    """A visit paused past its lease while another process took its item over: what it
    writes after that (its item's state, a step it queues) lands nowhere. The statement
    that commits its batch is the fence check (db._seal), so it is refused there, as one
    transaction, and the new owner's claim and queue are what the database holds."""
    store = Store(db, expiry=0.5)
    store.arm(REF, actor="alice", source="command", cursors={})
    with pytest.raises(Fenced, match="writes nothing more"), db.batched():
        assert store.claim(REF)
        time.sleep(0.6)  # paused past its lease: another process takes the item over
        assert elsewhere(target, lambda s: s.claim(REF)) is True
        store.set_work(REF, state="stopped")
        store.queue(StepAction.ENTER.key(REF, 1, 1), REF, StepAction.ENTER,
                    {"node": "write", "actor": "alice", "note": "", "epoch": 1})
        store.release(REF)
    assert not db.pending()
    w = elsewhere(target, lambda s: s.work(REF))
    assert w["state"] == "armed" and w["claim"] != "" and w["fence"] == 2
    assert [s.action for s in [elsewhere(target, lambda s: s.next_step(REF))]] == [
        StepAction.START]


def test_on_postgresql_a_stale_owners_first_read_of_its_next_step_is_fenced(
        pg_dsn: str) -> None:
    """On PostgreSQL the read that opens a visit's transaction (its next step with the item's
    work row) is the transaction's fence check too (issue 34: one statement, not two): a
    stale owner is stopped there, before it runs the step, and its batch is rolled back."""
    db = open_database(pg_dsn)
    try:
        store = Store(db, expiry=0.5)
        store.arm(REF, actor="alice", source="command", cursors={})
        with db.batched():
            assert store.claim(REF)
            assert store.next_step(REF) is not None  # its own: read, and the row held
            db.settle()
            time.sleep(0.6)  # paused past its lease: another process takes the item over
            assert elsewhere(pg_dsn, lambda s: s.claim(REF)) is True
            with pytest.raises(Fenced, match="writes nothing more"):
                store.next_step(REF)
            assert not db.pending()
            store.release(REF)
    finally:
        db.close()
    assert elsewhere(pg_dsn, lambda s: s.work(REF))["fence"] == 2


def test_on_postgresql_the_read_that_opens_a_visit_holds_its_item_until_it_commits(
        pg_dsn: str) -> None:
    """The fence check holds the claimed item's work row until the visit's transaction
    commits, so no other owner can take the item over between the check and the writes it
    guards; when that check is the visit's first read, the read takes the lock."""
    import psycopg

    db = open_database(pg_dsn)
    try:
        store = Store(db)
        store.arm(REF, actor="alice", source="command", cursors={})
        with db.batched():
            assert store.claim(REF)
            assert store.next_step(REF) is not None
            with psycopg.connect(pg_dsn, autocommit=True) as other:
                other.execute("SET lock_timeout = '300ms'")
                with pytest.raises(psycopg.errors.LockNotAvailable):
                    other.execute("UPDATE work SET claim = 'another' WHERE ref = %s", (REF,))
                db.settle()
                other.execute("UPDATE work SET claim = 'another' WHERE ref = %s", (REF,))
    finally:
        db.close()
