"""Round 4, ninth stop: an attack on commit 4f488bb (a visit's point decisions held until
its batch commits or folded into its step's finish, its pending steps read once per
transaction, the tracker's visit copy kept in place, `comment_once`), on SQLite and on
PostgreSQL, with real databases and real `the-loop poll` processes.

- A step's finish that the database refuses (a trigger here; a full disk, a statement the
  server cancels) rolls the visit back: the decisions the finish was to carry are kept, as
  every other rolled-back write of a point's decisions is, and the redo asks no hook again.
"""

from __future__ import annotations

from contextlib import closing
from pathlib import Path

import pytest

from runtime_helpers import LoopDir
from the_loop.runtime.db import Database, open_database
from the_loop.runtime.store import Store

REF = "local:acme/app#1"


def _sql(target: str | Path, *statements: str) -> None:
    """Statements run on a connection of their own, committed."""
    if isinstance(target, str) and target.startswith("postgresql"):
        import psycopg

        with psycopg.connect(target, autocommit=True) as conn:
            for statement in statements:
                conn.execute(statement)  # type: ignore[arg-type]
        return
    import sqlite3

    with closing(sqlite3.connect(str(target), timeout=30)) as conn:
        for statement in statements:
            conn.execute(statement)
        conn.commit()


def _refuse_finishes(target: str | Path, kind: str) -> None:
    """The database refuses to mark a step of `kind` done while table `refuse` has a row."""
    if isinstance(target, str) and target.startswith("postgresql"):
        _sql(target, "CREATE TABLE refuse(x INTEGER)", "INSERT INTO refuse VALUES (1)",
             "CREATE FUNCTION refuse_done() RETURNS trigger AS $$ BEGIN IF NEW.state='done' "
             f"AND NEW.kind='{kind}' AND EXISTS (SELECT 1 FROM refuse) THEN RAISE EXCEPTION "
             "'could not extend file: No space left on device'; END IF; RETURN NEW; END $$ "
             "LANGUAGE plpgsql",
             "CREATE TRIGGER refuse_done BEFORE UPDATE ON steps FOR EACH ROW "
             "EXECUTE FUNCTION refuse_done()")
        return
    _sql(target, "CREATE TABLE refuse(x INTEGER)", "INSERT INTO refuse VALUES (1)",
         "CREATE TRIGGER refuse_done BEFORE UPDATE OF state ON steps WHEN NEW.state='done' "
         f"AND NEW.kind='{kind}' AND EXISTS (SELECT 1 FROM refuse) BEGIN "
         "SELECT RAISE(ABORT, 'database or disk is full'); END")


def _other(target: str | Path) -> Store:
    return Store(open_database(target))


# ---------------------------------------------------------------------------- 1: finish refused
def test_a_refused_finish_keeps_the_decisions_it_carried(db: Database,
                                                         target: str | Path) -> None:
    """Store level: decisions held for a step (record in a batch) and folded into its
    finish outlive that finish's refusal."""
    store = Store(db)
    store.arm(REF, actor="alice", source="command", cursors={})
    _refuse_finishes(target, "start")
    with db.batched():
        assert store.claim(REF)
        step = store.next_step(REF)
        assert step is not None
        store.record(step, "work_item_start", {"decisions": {"proceed": True}})
        with pytest.raises(Exception, match=r"full|No space"):
            store.finish(step, "started")
        store.release(REF)
    other = _other(target)
    try:
        kept = other.step(step.key)
    finally:
        other.db.close()
    assert kept is not None and kept.state == "pending"
    assert kept.decisions == {"work_item_start": {"decisions": {"proceed": True}}}


def test_a_hook_is_not_asked_again_after_its_steps_finish_was_refused(
        tmp_path: Path, database: str) -> None:
    """End to end: the start step's finish is refused once (the poll counts the step's
    failure); the next poll redoes the start from its recorded decision."""
    with LoopDir(tmp_path, database=database) as ld:
        ld.write_config("hooks:\n" + ld.add_recorder())
        ref = ld.add("Add a login page")
        ld.start(ref)
        target = database or ld.state / "loop.db"
        _refuse_finishes(target, "start")
        ld.poll()
        [start] = ld.query("SELECT * FROM steps WHERE kind='start'")
        assert start["state"] == "pending" and start["detail"] == "1"  # failed once
        _sql(target, "DELETE FROM refuse")
        ld.poll()
        [start] = ld.query("SELECT * FROM steps WHERE kind='start'")
        assert start["state"] == "done" and start["outcome"] == "started"
        assert len(ld.seen("work_item_start")) == 1
