"""The loop's decision log: every fired point's whole context, final decisions and who changed
what, written once, to the store the config names.

One row per fired point in the `decision_log` table (`layout`) of the loop's database:
`<stateDir>/loop.db`, or the shared PostgreSQL database (`database:`), where every host's
points meet and each row names the host that fired it. The record (`build.loop_record`)
holds the context as it entered the chain (every fact and every decision's incoming value,
nothing shortened), each hook's step, and the decisions applied. Secrets are replaced by the
event log's rules (`EventLog.secrets_in`) before the row is written. Rows older than
`decisionLog.keepDays` are deleted from that store, at most once an hour per process. A write
that fails is recorded as `decisions.failed` and the loop goes on (a visit whose own writes
failed with it ends, and is redone: `record`).

A host that ran an earlier version on PostgreSQL kept a copy of its points in its own
loop.db as well; `adopt` moves what that copy holds and the shared table lacks into the
shared table, once, and renames the old table (`decision_log_moved`).
"""

from __future__ import annotations

import sqlite3
import time
import weakref
from collections.abc import Callable
from pathlib import Path

from the_loop.decisions.build import loop_record
from the_loop.decisions.encoding import encode_record
from the_loop.decisions.layout import Row, item_key, recorded, rules_text
from the_loop.decisions.stores import INSERT_ROW, PRUNE_SLICE, SQLiteStore, Store, open_store
from the_loop.errors import LoopError
from the_loop.events import EventLog, redact
from the_loop.hooks.engine.chain import Chain, Outcome
from the_loop.hooks.engine.points import Context
from the_loop.hooks.executors.registry import logged_name
from the_loop.sqldb import StoreError, WritesLost, converted

__all__ = ["DecisionLog"]

PRUNE_EVERY = 3600.0  # seconds between two prunes in one process
MOVED = "decision_log_moved"  # what a host's old copy is renamed to once adopted


class DecisionLog:
    """Writes one row per fired point into the loop's store (the table is made on first use).

    `target` is loop.db (its own connection, `synchronous=NORMAL`: in WAL mode a commit is
    then not flushed on its own — an operating-system crash may lose the last rows, never
    corrupt the file —, so the log costs a point microseconds, not a disk flush), an open
    sqlite3 connection to one (its caller's transaction is kept), or a postgresql:// URL.

    `write(sql, row)`, when given, writes each row on its caller's connection instead (the
    loop: in the transaction of the visit that fired the point, issue 34). The store still
    makes the table, on its own connection (`prepare`, or before the first such row), and
    prunes, but only when `write` says the row is committed (it went in a transaction of its
    own) or its caller calls `prune_due`: a DELETE on the store's connection while the
    caller's transaction holds new rows could wait behind another host's upgrade of the
    table, which waits for those rows (on SQLite, for the write lock the caller holds). When
    `write` raises `WritesLost` (the row failed, and its caller's uncommitted writes were
    rolled back with it), `record` raises the row's own error, which ends the caller's
    visit as a crash would.
    """

    def __init__(self, target: Path | str | sqlite3.Connection, *, keep_days: float,
                 log: EventLog, host: Callable[[], str] = lambda: "",
                 on_failed: Callable[[], None] = lambda: None,
                 write: Callable[[str, Row], bool] | None = None) -> None:
        self.store: Store = (SQLiteStore.on(target) if isinstance(target, sqlite3.Connection)
                             else open_store(str(target)))
        weakref.finalize(self, self.store.close)  # its connection closes with this log
        self.keep_seconds = keep_days * 86_400.0
        self.log = log
        self.host = host
        self.on_failed = on_failed  # counts a lost record (the loop's metrics)
        self._pruned = 0.0
        self._chain: Chain | None = None
        self._kinds: dict[str, str] = {}
        self._write_row = write
        self._prepared = False

    def close(self) -> None:
        self.store.close()

    def prepare(self) -> None:
        """Make the table (or bring it up to date) now, on the store's own connection: while
        a `write` caller holds no transaction open."""
        self.store.prepare()
        self._prepared = True

    def record(self, ctx: Context, outcome: Outcome, chain: Chain, *, input_id: int = 0) -> None:
        """Store one fired point; a failure is recorded as `decisions.failed`, raised only as
        `WritesLost` says (the loop's own error as itself: a `Fenced`)."""
        try:
            self._write(ctx, outcome, chain, input_id)
        except WritesLost as lost:  # the caller's writes went with the row: it ends the
            raise (lost.error if isinstance(lost.error, LoopError) else lost) from None  # visit
        except (StoreError, OSError, ValueError, TypeError, LoopError) as exc:
            self._failed(exc, point=ctx.POINT, work_item=ctx.work_item.ref)

    def _failed(self, exc: BaseException, *, point: str = "", work_item: str = "") -> None:
        self.on_failed()
        self.log.emit("decisions.failed", point=point, work_item=work_item,
                      error=f"{type(exc).__name__}: {exc}")

    def row(self, ctx: Context, outcome: Outcome, chain: Chain, input_id: int = 0) -> Row:
        """The row one fired point is stored as."""
        if chain is not self._chain:
            self._chain = chain
            self._kinds = {link.name: logged_name(link.executor) for link in chain.links}
        rec = loop_record(ctx, outcome, self._kinds, input_id=input_id)
        line = encode_record(rec)
        found = self.log.secrets_in(line)
        if found:
            rec = redact(rec, found)
            line = encode_record(rec)
        refused = bool(outcome.refused_by) or outcome.refused
        # The item column is keyed as a served log keys it: what replay filters by.
        return (time.time(), ctx.POINT, item_key(ctx.work_item.ref), line, self.host(),
                rules_text(rec["steps"]), int(refused))

    def _write(self, ctx: Context, outcome: Outcome, chain: Chain, input_id: int) -> None:
        row = self.row(ctx, outcome, chain, input_id)
        committed = True
        if self._write_row is None:
            self.store.write([row])
        else:
            if not self._prepared:
                self.prepare()
            with converted("the database refused the record"):
                committed = self._write_row(INSERT_ROW, row)
        if committed and self._due(row[0]):
            self.prune(row[0])

    def _due(self, now: float) -> bool:
        return now - self._pruned >= PRUNE_EVERY

    def prune_due(self) -> None:
        """`prune`, when this process has not pruned within `PRUNE_EVERY`; a failure is
        recorded as `decisions.failed`, never raised."""
        now = time.time()
        if self._due(now):
            try:
                self.prune(now)
            except (StoreError, OSError) as exc:
                self._failed(exc)

    def prune(self, now: float | None = None) -> int:
        """Delete the loop's rows older than keepDays; returns how many went."""
        now = time.time() if now is None else now
        self._pruned = now
        gone = 0
        while True:
            n = self.store.prune(now - self.keep_seconds, served=False)
            gone += n
            if n < PRUNE_SLICE:
                return gone

    def adopt(self, local: Path) -> int:
        """Move the points a host's own loop.db holds that the shared store lacks into it
        (see the module doc); returns how many were moved. A no-op when loop.db has no
        such table."""
        if not local.is_file():
            return 0
        with converted(f"{local}: cannot read its decision log"):
            conn = sqlite3.connect(str(local), timeout=30.0, isolation_level=None)
            try:
                if conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND "
                                "name='decision_log'").fetchone() is None:
                    return 0
                conn.execute("BEGIN IMMEDIATE")
                rows = conn.execute("SELECT id, at, point, work_item, record FROM "
                                    "decision_log ORDER BY id").fetchall()
                moved = self._missing(rows)
                if moved:
                    self.store.write(moved)
                conn.execute(f"ALTER TABLE decision_log RENAME TO {MOVED}")
                conn.execute("COMMIT")
            finally:
                conn.close()
        return len(moved)

    def _missing(self, rows: list[tuple[int, float, str, str, str]]) -> list[Row]:
        """The rows of an old copy the shared store does not hold (matched by time, point and
        item: the two copies were written with the same values)."""
        if not rows:
            return []
        from the_loop.decisions.reads import keys_between

        have = keys_between(self.store.source, min(r[1] for r in rows),
                            max(r[1] for r in rows))
        out: list[Row] = []
        for row_id, at, point, ref, text in rows:
            if (float(at), str(point), str(ref)) in have:
                continue
            try:
                rec = recorded((row_id, at, point, ref, text))
            except (ValueError, KeyError, AttributeError, TypeError, RecursionError):
                rules, refused = "", 0  # kept as it was: replay names what it cannot read
            else:
                rules = rules_text(rec.steps)
                refused = int(bool(rec.refused_by) or rec.decisions.get("proceed") is False)
            out.append((float(at), str(point), str(ref), str(text), "", rules, refused))
        return out
