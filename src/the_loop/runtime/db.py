"""The loop's database: tracker tables and loop state, on SQLite (one file under stateDir, the
default) or PostgreSQL (`database: postgresql://…`, shared by every host), one schema for both.

`open_database(target)` opens either; the schema is created and migrated here, recorded in
`schema_version`, and a database whose schema is newer than this version knows is refused.
`transaction()` is one writer's transaction (SQLite: BEGIN IMMEDIATE; PostgreSQL: BEGIN), so
a crash leaves a step either done or not done. While this thread holds a claim (`hold`),
every transaction first checks, under a row lock, that the claim is still its own with the
same fencing number, and raises `Fenced` when a newer owner took it over — so a process that
was paused past its lease writes nothing.

Inside `batched()` (one visit to a work item, issue 34) the `transaction()` blocks of this
thread share one transaction, opened (with its one fence check) by the first of them and
committed by `settle()`: the caller settles before anything outside the database depends
on what it wrote (a session process started, a hook asked, a channel called) and at the
visit's end. A block that raises rolls the whole batch back — what a crash at that moment
would have left — and the next block opens a new one; what the batch was told to `keep`
(a point's decisions on its step) is then written again at once, in a transaction of its
own, so a hook is not asked twice because a later write of the visit failed. A write the
batch is asked to `defer` (a point's decisions) is held until the batch commits, or goes
in with the next write of its row (the step's finish: one statement where there were two),
and is kept as `keep` keeps. A block that raises for an expected reason must not: its
rollback takes the visit's earlier writes with it (steps.py `_resume` catches a full launch
inside its block). `memo()` is the batch's cache of what the visit read (its work row, its
item, its pending steps), kept true by the writes that go through the store and the
tracker, emptied by a rollback and at the end.

On PostgreSQL a read (`SELECT`) the visit runs on `conn` while its batch has no
transaction open opens the batch's transaction, so the visit's reads share the transaction
its writes commit in instead of each being one of its own, and a read that fails rolls the
batch back as a failed block does. The fence of a batch's transaction is checked by the
statement that commits it (`_seal`: it also writes the claimed item's work row), or by a
locked read of that row that opened it. The claim (an UPDATE on `conn`) still commits
alone, so a rolled-back batch keeps it. SQLite keeps its reads outside (a read that began a
transaction could not become a writer once another process had written).

The SQLite file (and its -wal/-shm companions) is readable by its owner only.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from the_loop.errors import ConfigError, LoopError
from the_loop.runtime.trackerschema import FILL_V3, ITEM_COLUMNS_V3
from the_loop.sqldb import (
    POSTGRESQL,
    SQLITE,
    Conn,
    Dialect,
    PgConnection,
    check_dsn,
    connect_sqlite,
    is_postgresql,
    shown_dsn,
)

SCHEMA = """
CREATE TABLE IF NOT EXISTS items(
    id INTEGER PRIMARY KEY, repository TEXT NOT NULL, number INTEGER NOT NULL,
    kind TEXT NOT NULL, title TEXT NOT NULL, body TEXT NOT NULL DEFAULT '',
    state TEXT NOT NULL DEFAULT 'open', parent TEXT NOT NULL DEFAULT '',
    author TEXT NOT NULL DEFAULT '', created REAL NOT NULL,
    closed_by TEXT NOT NULL DEFAULT '', closed_at REAL,
    UNIQUE(repository, number));
CREATE TABLE IF NOT EXISTS labels(
    item INTEGER NOT NULL, label TEXT NOT NULL, PRIMARY KEY(item, label));
CREATE TABLE IF NOT EXISTS comments(
    id INTEGER PRIMARY KEY AUTOINCREMENT, item INTEGER NOT NULL, author TEXT NOT NULL,
    body TEXT NOT NULL, created REAL NOT NULL, source TEXT NOT NULL DEFAULT 'comment');
CREATE TABLE IF NOT EXISTS work(
    ref TEXT PRIMARY KEY, state TEXT NOT NULL, arm_seq INTEGER NOT NULL DEFAULT 0,
    node TEXT NOT NULL DEFAULT '', session_id TEXT NOT NULL DEFAULT '',
    actor TEXT NOT NULL DEFAULT '', source TEXT NOT NULL DEFAULT '',
    respawns INTEGER NOT NULL DEFAULT 0,
    updated REAL NOT NULL DEFAULT 0,
    epoch INTEGER NOT NULL DEFAULT 0, claim TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS sessions(
    id TEXT PRIMARY KEY, ref TEXT NOT NULL, endpoint TEXT NOT NULL, harness TEXT NOT NULL,
    pid INTEGER NOT NULL, node TEXT NOT NULL, started REAL NOT NULL,
    exited INTEGER NOT NULL DEFAULT 0, code INTEGER, log TEXT NOT NULL,
    step TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS steps(
    seq INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL UNIQUE, ref TEXT NOT NULL,
    kind TEXT NOT NULL, payload TEXT NOT NULL DEFAULT '{}', decisions TEXT NOT NULL DEFAULT '{}',
    state TEXT NOT NULL DEFAULT 'pending', outcome TEXT NOT NULL DEFAULT '',
    detail TEXT NOT NULL DEFAULT '', created REAL NOT NULL, updated REAL NOT NULL);
CREATE INDEX IF NOT EXISTS steps_pending ON steps(state, ref, seq);
CREATE TABLE IF NOT EXISTS settled(
    key TEXT PRIMARY KEY, outcome TEXT NOT NULL, detail TEXT NOT NULL DEFAULT '',
    done INTEGER NOT NULL DEFAULT 0, at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS cursors(ref TEXT PRIMARY KEY, last INTEGER NOT NULL)
"""

#: Version 2: leases (expiry, fencing number, the host of an item's session) and hosts.
LEASES = """
CREATE TABLE IF NOT EXISTS hosts(
    id TEXT PRIMARY KEY, seen REAL NOT NULL, owner TEXT NOT NULL DEFAULT '')
"""

#: Columns added after a table was first released: version → (table, column, definition).
ADDED: dict[int, tuple[tuple[str, str, str], ...]] = {
    1: (("work", "epoch", "INTEGER NOT NULL DEFAULT 0"),
        ("work", "claim", "TEXT NOT NULL DEFAULT ''"),
        ("sessions", "step", "TEXT NOT NULL DEFAULT ''"),
        ("comments", "source", "TEXT NOT NULL DEFAULT 'comment'")),
    2: (("work", "claim_until", "REAL NOT NULL DEFAULT 0"),
        ("work", "fence", "INTEGER NOT NULL DEFAULT 0"),
        ("work", "host", "TEXT NOT NULL DEFAULT ''"),
        ("sessions", "host", "TEXT NOT NULL DEFAULT ''"),
        ("sessions", "lost", "INTEGER NOT NULL DEFAULT 0")),
    3: ITEM_COLUMNS_V3,  # the tracker's (runtime/trackerschema.py)
    # Version 4: the sha256 of the token handed to the item's current session (identity.py).
    4: (("work", "session_key", "TEXT NOT NULL DEFAULT ''"),),
    # Version 5: the lock file (device:inode) the launch of the item's current session made,
    # recorded before its harness exists (harness.make_lock, identity._own_lock).
    # And when the session's harness started (clock ticks since boot), recorded with its
    # pid: a pid used again is told apart whatever the clock did (harness.recorded_process).
    5: (("work", "session_lock", "TEXT NOT NULL DEFAULT ''"),
        ("sessions", "pid_start", "TEXT NOT NULL DEFAULT ''")),
}
#: version → its tables (made before that version's added columns), and its indexes (after).
TABLES = {1: SCHEMA, 2: LEASES, 3: "", 4: "", 5: ""}
INDEXES = {1: "", 2: "CREATE INDEX IF NOT EXISTS sessions_live ON sessions(host, exited)",
           3: "", 4: "", 5: ""}
#: version → a statement run after its columns exist (what older rows' new columns hold).
FILLS = {3: FILL_V3}
#: The schema this version of the-loop reads and writes.
SCHEMA_VERSION = 5


#: The database whose batch this thread has open (db.batched), for `settle_batch`.
_BATCHING = threading.local()


def settle_batch() -> None:
    """Commit what this thread's open batch holds, whichever database it is on (a no-op
    without one): where a step reaches a point its redo after a crash starts from."""
    db = getattr(_BATCHING, "db", None)
    if db is not None:
        db.settle()


class Fenced(LoopError):
    """A newer owner holds the claim this thread worked under: it must write nothing more."""


def private_dir(path: Path) -> None:
    """Create a folder (and its parents) readable by its owner only."""
    if path.is_dir():
        return
    if path.exists():
        raise ConfigError(f"{path} is a file, not a folder; point stateDir at a folder (or "
                          "remove the file)")
    path.mkdir(parents=True, mode=0o700, exist_ok=True)
    os.chmod(path, 0o700)


class Database:
    """One connection to the loop's database for this process (or this request)."""

    dialect: Dialect = SQLITE
    conn: Conn
    where: str

    def __init__(self, path: Path, *, migrate: bool = True) -> None:
        self.path = path
        self.where = str(path)
        self._local = threading.local()
        if str(path) != ":memory:":
            private_dir(path.parent)
            if not path.exists():
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
        try:
            self.conn = self._sqlite = connect_sqlite(path)
            if migrate:
                self.migrate()
        except sqlite3.DatabaseError as exc:
            raise ConfigError(f"{path} is not a usable loop database ({exc}); move it aside "
                              "and the loop starts a new one") from None

    # ------------------------------------------------------------------ transactions
    @contextmanager
    def _begin(self) -> Iterator[Any]:
        self._sqlite.execute("BEGIN IMMEDIATE")
        try:
            yield self._sqlite
        except BaseException:
            self._sqlite.execute("ROLLBACK")
            raise
        self._sqlite.execute("COMMIT")

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        batch = getattr(self._local, "batch", None)
        if batch is not None:
            conn = self._joined(batch)
            try:
                yield conn
            except BaseException:
                self._abort(batch)
                raise
            return
        with self._begin() as conn:
            self._check_fence(conn)
            yield conn

    # ------------------------------------------------------------------ a visit's batch
    @contextmanager
    def batched(self) -> Iterator[None]:
        """This thread's transactions share one until `settle()` (see the module doc);
        what is still open at the end is committed, or rolled back when the block raises."""
        if getattr(self._local, "batch", None) is not None:
            yield
            return
        batch = self._local.batch = ExitStack()
        self._local.memo = {}
        _BATCHING.db = self
        try:
            yield
            self.settle()
        except BaseException:
            self._abort(batch)
            raise
        finally:
            self._local.batch = self._local.open = self._local.memo = None
            self._local.kept = self._local.deferred = _BATCHING.db = None
            self._local.work = None

    def _joined(self, batch: ExitStack) -> Any:
        """The batch's open transaction, opened when none is (its fence is checked when it
        commits: `_seal`)."""
        conn = getattr(self._local, "open", None)
        return conn if conn is not None else self._opened(batch)

    def _opened(self, batch: ExitStack) -> Any:
        """Open the batch's transaction (its fence not checked yet)."""
        conn = self._local.open = batch.enter_context(self._begin())
        self._local.fenced = False
        self._local.work = None
        return conn

    def defer_work(self, ref: str, fields: dict[str, Any]) -> bool:
        """In a batch, for the item this thread holds: keep `fields` of its work row to be
        written by the statement that commits the batch's transaction and checks its fence
        (`_seal`: one statement where a visit wrote the row two or three times and read
        its fence once). False (not held) elsewhere: the caller writes them itself."""
        batch = self._holding(ref)
        if batch is None:
            return False
        self._joined(batch)
        work = getattr(self._local, "work", None)
        if work is None:
            work = self._local.work = {}
        work.update(fields)
        return True

    def deferred_work(self, ref: str) -> dict[str, Any]:
        """The fields of `ref`'s work row this thread's batch holds, not written yet (a
        read of the row applies them)."""
        work = getattr(self._local, "work", None)
        return dict(work) if work and self._holding(ref) is not None else {}

    def claim_of(self, ref: str) -> tuple[str, int] | None:
        """(owner, fencing number) of `ref`'s claim when this thread holds it (`hold`)."""
        held = getattr(self._local, "fence", None)
        return (held[1], held[2]) if held is not None and held[0] == ref else None

    def _holding(self, ref: str) -> ExitStack | None:
        """This thread's open batch when it holds `ref`'s claim in it (None otherwise)."""
        held = getattr(self._local, "fence", None)
        batch = getattr(self._local, "batch", None)
        return batch if held is not None and held[0] == ref else None

    def _seal(self, conn: Conn, *, release: bool = False) -> None:
        """The open transaction's last statement before COMMIT: the claimed item's work
        row gets the fields the batch holds for it (`defer_work`) and, with `release`, its
        claim is given up -- only while the claim and its fencing number are still this
        thread's, so the same statement is the transaction's fence check (`Fenced`
        otherwise: the caller rolls the transaction back). Nothing is run when the claim
        was checked already in this transaction (a locked read, or the claim itself) and
        nothing is held. SQLite's write lock, or PostgreSQL's row lock this statement takes,
        keeps another owner out from here to COMMIT; a newer owner that took the claim
        earlier in the transaction is seen here, before any of it is committed."""
        held = getattr(self._local, "fence", None)
        work = getattr(self._local, "work", None) or {}
        if held is None or (not work and not release and self._local.fenced):
            return
        ref, owner, fence = held
        sets = [f"{k}=?" for k in work] + (["claim=''", "claim_until=0"] if release else [])
        cur = conn.execute(f"UPDATE work SET {', '.join(sets or ['fence=fence'])} "
                           "WHERE ref=? AND claim=? AND fence=?",
                           (*work.values(), ref, owner, fence))
        if cur.rowcount != 1:
            self._judge(held, None)
        self._local.work = None
        self._local.fenced = True

    def memo(self) -> dict[Any, Any] | None:
        """This thread's visit cache (None outside `batched()`; see the module doc)."""
        return getattr(self._local, "memo", None)

    def keep(self, sql: str, parameters: tuple[Any, ...]) -> None:
        """In a batch: a statement just run in it that outlives a rollback of the batch
        (see the module doc)."""
        if self.pending():
            kept = getattr(self._local, "kept", None) or []
            self._local.kept = [*kept, (sql, parameters)]

    def pending(self) -> bool:
        """Whether this thread's batch has an open transaction (writes not yet committed)."""
        return getattr(self._local, "open", None) is not None

    def defer(self, key: str, sql: str, parameters: tuple[Any, ...]) -> bool:
        """In a batch: hold a write (a point's decisions on its step, `key`) until the batch
        commits, unless a later write of the same row takes it in first (`take_deferred`);
        kept like `keep` if the batch is rolled back. False outside a batch (not held)."""
        if getattr(self._local, "batch", None) is None:
            return False
        deferred = getattr(self._local, "deferred", None)
        if deferred is None:
            deferred = self._local.deferred = {}
        deferred[key] = (sql, parameters)
        return True

    def take_deferred(self, key: str) -> tuple[str, tuple[Any, ...]] | None:
        """The write held for `key`, no longer held: the caller writes it with its own
        statement in the batch, and `keep`s it."""
        deferred = getattr(self._local, "deferred", None)
        return deferred.pop(key, None) if deferred else None

    def flush_deferred(self) -> None:
        """Run the writes the batch holds now (before a read that must see them)."""
        deferred = getattr(self._local, "deferred", None)
        if deferred:
            self._local.deferred = None
            with self.transaction() as conn:
                for sql, parameters in deferred.values():
                    self.keep(sql, parameters)  # a failure below rewrites them all
                for sql, parameters in deferred.values():
                    conn.execute(sql, parameters)

    def settle(self) -> None:
        """Commit this thread's batch so far (a no-op outside `batched()` or with nothing
        written): before anything outside the database may depend on it."""
        batch = getattr(self._local, "batch", None)
        if batch is None:
            return
        self.flush_deferred()
        if self.pending():
            self._commit(batch)

    def settle_released(self, ref: str) -> bool:
        """Commit this thread's open batch transaction with `ref`'s claim given up by its
        sealing statement (`_seal`); False when no transaction is open (the caller gives
        the claim up with a statement of its own)."""
        batch = self._holding(ref)
        if batch is None:
            return False
        self.flush_deferred()
        if not self.pending():
            return False
        self._commit(batch, release=True)
        return True

    def _commit(self, batch: ExitStack, *, release: bool = False) -> None:
        try:
            self._seal(self._local.open, release=release)
        except BaseException:
            self._abort(batch)  # a stale owner: what the transaction wrote is rolled back
            raise
        self._local.open = self._local.kept = None
        batch.close()

    def _abort(self, batch: ExitStack) -> None:
        memo = self.memo()
        if memo is not None:
            memo.clear()  # what was read may have been written by what is rolled back
        held = list((getattr(self._local, "deferred", None) or {}).values())
        self._local.deferred = self._local.work = None
        if self.pending():
            self._local.open = None
            kept, self._local.kept = getattr(self._local, "kept", None) or [], None
            kept += held
            exc = sys.exc_info()
            batch.__exit__(*exc)  # the transaction sees the error: ROLLBACK
            if kept:
                self._rewrite(kept)
        elif held:
            self._rewrite(held)

    def _rewrite(self, kept: list[tuple[str, tuple[Any, ...]]]) -> None:
        """What a rolled-back batch was told to keep, in a transaction of its own. When it
        cannot be written (another owner took the claim, the database is away), it is lost
        as a crash would lose it: the error being handled is the one that counts."""
        try:
            with self._begin() as conn:
                self._check_fence(conn)
                for sql, parameters in kept:
                    conn.execute(sql, parameters)
        except Exception:  # not named: the caller is already handling the batch's own error
            pass

    def _check_fence(self, conn: Conn) -> None:
        """Inside a transaction: raise `Fenced` unless this thread still holds the claim it
        works under (`hold`); nothing to check when it holds none."""
        held = getattr(self._local, "fence", None)
        if held is None:
            return
        row = conn.execute(f"SELECT claim, fence FROM work WHERE ref=?{self.dialect.for_update}",
                           (held[0],)).fetchone()
        self._judge(held, row)

    @staticmethod
    def _judge(held: tuple[str, str, int], row: Any) -> None:
        """`Fenced` unless `row` (the claimed item's work row, read under lock) still names
        this thread's claim and fencing number."""
        ref, owner, fence = held
        if row is None or row["claim"] != owner or int(row["fence"]) != fence:
            raise Fenced(f"{ref}: another loop process took this work item over (fencing "
                         f"number {fence} is stale); this one writes nothing more for it")

    def fence_due(self, ref: str) -> bool:
        """Whether a read of `ref`'s work row run now, under lock, would open this thread's
        batch transaction and can be that transaction's fence check (PostgreSQL, where a
        visit's read opens it: `_InBatch`; the reader then passes the row to `fenced_by`)."""
        held = getattr(self._local, "fence", None)
        return (self.dialect is POSTGRESQL and held is not None and held[0] == ref
                and getattr(self._local, "batch", None) is not None and not self.pending())

    def fenced_by(self, row: Any) -> None:
        """The fence check of the transaction just opened by a read of the claimed item's
        work row under lock (`fence_due`): `Fenced`, the batch rolled back, unless it is
        still this thread's."""
        batch = self._local.batch
        try:
            self._judge(self._local.fence, row)
        except Fenced:
            self._abort(batch)
            raise
        self._local.fenced = True

    def hold(self, ref: str, owner: str, fence: int, *, locked: bool = False) -> None:
        """From now on this thread writes only while it holds `ref`'s claim at `fence`.
        `locked`: the claim was taken in the batch's open transaction, which holds the row
        from then on, so that transaction needs no fence check of its own."""
        self._local.fence = (ref, owner, fence)
        if locked:  # (the next transaction opened checks its own: _opened)
            self._local.fenced = True

    def drop(self, ref: str) -> None:
        held = getattr(self._local, "fence", None)
        if held is not None and held[0] == ref:
            self._local.fence = None

    def lock(self, conn: Conn, key: str) -> None:
        """Inside a transaction: wait for the lock on `key` (a no-op where writers are
        already one at a time)."""
        sql = self.dialect.xact_lock(key)
        if sql is not None:
            conn.execute(sql)

    # ------------------------------------------------------------------ schema
    def version(self) -> int:
        """The schema version the database holds (0: none yet)."""
        if self.dialect is SQLITE:
            found = self.conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND "
                                      "name='schema_version'").fetchone()
        else:
            found = self.conn.execute("SELECT to_regclass('schema_version') AS t").fetchone()
            found = found if found and found["t"] else None
        if found is None:
            return 0
        row = self.conn.execute("SELECT MAX(version) AS v FROM schema_version").fetchone()
        return int(row["v"] or 0)

    def migrate(self) -> int:
        """Bring the schema to SCHEMA_VERSION; refuse a newer one. Returns the version
        found before (several processes migrating at once take turns)."""
        before = self.version()
        if before == SCHEMA_VERSION:
            return before
        self._refuse_newer(before)
        with self._begin() as conn:
            self.lock(conn, "the-loop schema")
            conn.execute("CREATE TABLE IF NOT EXISTS schema_version(version INTEGER NOT NULL)")
            row = conn.execute("SELECT MAX(version) AS v FROM schema_version").fetchone()
            found = int(row["v"] or 0)
            self._refuse_newer(found)
            for version in range(found + 1, SCHEMA_VERSION + 1):
                for statement in self.dialect.ddl(TABLES[version]).split(";"):
                    if statement.strip():
                        conn.execute(statement)
                for table, column, definition in ADDED[version]:
                    self._add_column(conn, table, column, self.dialect.ddl(definition))
                if INDEXES[version]:
                    conn.execute(INDEXES[version])
                if version in FILLS:
                    conn.execute(FILLS[version])
            conn.execute("DELETE FROM schema_version")
            conn.execute("INSERT INTO schema_version(version) VALUES (?)", (SCHEMA_VERSION,))
        return before

    def _refuse_newer(self, found: int) -> None:
        if found > SCHEMA_VERSION:
            raise ConfigError(f"the loop database at {self.where} has schema version {found}, "
                              f"newer than this the-loop knows ({SCHEMA_VERSION}); upgrade "
                              "the-loop on this host (every host sharing a database runs the "
                              "same version or a newer one)")

    def _add_column(self, conn: Conn, table: str, column: str, definition: str) -> None:
        if self.dialect is SQLITE:
            cols = {r["name"] for r in conn.execute(f"PRAGMA table_info({table})")}
            if column not in cols:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {definition}")
        else:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column} {definition}")

    def close(self) -> None:
        self._sqlite.close()


class _InBatch:
    """PostgreSQL's `Database.conn`: a statement run in this thread's batch while it has no
    transaction open opens the batch's (see the module doc)."""

    def __init__(self, db: PgDatabase) -> None:
        self.db = db
        self.pg = db._pg

    def execute(self, sql: str, parameters: Any = (), /) -> Any:
        db = self.db
        batch = getattr(db._local, "batch", None)
        if batch is None or not (db.pending() or sql.startswith("SELECT")):
            return self.pg.execute(sql, parameters)
        if not db.pending():
            db._opened(batch)
        try:
            return self.pg.execute(sql, parameters)
        except BaseException:
            db._abort(batch)  # the transaction is spoilt: rolled back, as a failed block's
            raise

    def executescript(self, script: str) -> None:
        self.pg.executescript(script)


class PgDatabase(Database):
    """The loop's database on PostgreSQL: a connection from this process's pool."""

    dialect = POSTGRESQL

    def __init__(self, dsn: str, *, migrate: bool = True, idle: float = 0) -> None:
        self.path = Path(":postgresql:")
        self.where = shown_dsn(dsn)
        self._local = threading.local()
        self._pg = PgConnection(check_dsn(dsn), idle=idle)
        self.conn = _InBatch(self)
        if migrate:
            try:
                self.migrate()
            except BaseException:  # the connection goes back: a start retried while the
                self.close()       # server ends it would hold one of the pool's 8 per try
                raise

    @contextmanager
    def _begin(self) -> Iterator[Any]:
        with self._pg.transaction() as conn:
            yield conn

    def close(self) -> None:
        self._pg.close()


def open_database(target: Path | str, *, migrate: bool = True, idle: float = 0) -> Database:
    """The database a `database:` value (a postgresql:// URL) or a SQLite path names, its
    schema brought up to date unless `migrate` is false (`idle`: PostgreSQL ends a
    transaction left idle that many seconds, sqldb.pool_for)."""
    if isinstance(target, str) and is_postgresql(target):
        return PgDatabase(target, migrate=migrate, idle=idle)
    return Database(Path(target), migrate=migrate)
