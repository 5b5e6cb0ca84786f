"""Where decision records are stored: the `decision_log` table in SQLite or PostgreSQL.

The layout is `layout.TABLE`, one for the loop's records and a hook server's. `open_store(
target)` takes a file path (SQLite, created 0600) or a `postgresql://` URL (refused when it
carries a password: libpq's `PGPASSWORD` or `~/.pgpass` supply it); `prepare` creates the
table, or brings one an earlier version made up to this layout. A store writes a batch of
rows in one transaction and prunes old ones. Connections and errors come from `sqldb`: a
driver's error leaves a store as a `StoreError`.
"""

from __future__ import annotations

import functools
import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from the_loop.decisions.layout import COLUMNS, FIELDS, INDEXES, TABLE, Row, recorded, rules_text
from the_loop.errors import LoopError
from the_loop.sqldb import (
    POSTGRESQL,
    StoreError,
    check_dsn,
    connect_pg,
    connect_sqlite,
    converted,
    is_postgresql,
    shown_dsn,
    transient,
)

_INSERT = (f"INSERT{{1}} INTO decision_log({', '.join(FIELDS)}) VALUES "
           "({0}, {0}, {0}, {0}, {0}, {0}, {0})")
#: A served log's SQLite page: a record of a few KB is a row too big for two to share a
#: 4 KB page, so at SQLite's default each took a page of its own, half empty, and every
#: byte was written twice (WAL, then checkpoint). At 32 KB a 2 KB record takes 2.2 KB of
#: file and half the CPU to insert (kernel time most of it); records of 9 KB cost as at 4 KB.
PAGE_SIZE = 32768
#: Rows per SQLite INSERT: 7 values a row, under the 999 bound of SQLite before 3.32.
_ROWS_PER_INSERT = 140
_COPY_SLICE = 50  # rows a PostgreSQL writer formats between two yields of the lock
_COPY = f"COPY decision_log({', '.join(FIELDS)}) FROM STDIN"
#: A batch as binary COPY, when every column has a type it can be sent as: no escaping scan
#: of every record's text and no float written in decimals (the client's CPU a row 5.2-7.0
#: µs as text, 2.2-3.5 binary, measured); a column of another type in a table an earlier
#: version made, and the batch goes as text, which PostgreSQL parses into any type.
_COPY_BINARY = _COPY + " (FORMAT BINARY)"
_BINARY_TYPES = {"at": ("double precision", "real"), "refused": ("bigint", "integer", "smallint")}
_TEXT_TYPES = ("text", "character varying")
_PG_TYPES = ("SELECT attname, atttypid::regtype::text FROM pg_attribute WHERE attrelid = "
             "to_regclass('decision_log') AND attnum > 0 AND NOT attisdropped")
#: The lock a COPY takes, taken first so that the types read next are the ones it writes to
#: (an ALTER of the table waits for it, or commits before it is granted).
_PG_LOCK = "LOCK TABLE decision_log IN ROW EXCLUSIVE MODE"
#: Whether the table has this version's columns and indexes already: its last index is
#: made once the columns exist (`Store._upgrade`), as SQLite's `_current` reads it.
_PG_CURRENT = "SELECT to_regclass('decision_log_rules') IS NOT NULL"
#: Seconds a PostgreSQL connection attempt may take before the batch counts as failed.
CONNECT_TIMEOUT = 5


#: One row, `?` marked: what a writer on its caller's connection runs (looplog `write`).
INSERT_ROW = _INSERT.format("?", "")


@functools.lru_cache(maxsize=16)
def _insert(rows: int, own: bool = False) -> str:
    """An INSERT of `rows` rows into the SQLite log (the few sizes a writer uses, cached).

    `own`: in a transaction of the store's own, which a failure loses whole: `OR ROLLBACK`,
    so that a row refused ends it at once. Under the default (ABORT), SQLite undoes only the
    failing statement, and to be able to, a statement of many rows inside a transaction
    first copies each page it changes to a statement journal, a temporary file: every
    batch written twice more than the rows, a third of the writer's CPU (measured: 2.6 KB
    of temporary file a 2 KB row, 8.9 µs a row instead of 6.9)."""
    return _INSERT.format("?", " OR ROLLBACK" if own else "") + (
        ", (?, ?, ?, ?, ?, ?, ?)" * (rows - 1))


def is_url(target: str) -> bool:
    """Whether `target` names a PostgreSQL database rather than a file."""
    return is_postgresql(target)


def shown(target: str) -> str:
    """`target` as a message may show it: a file as given, a URL as host/dbname only (no
    user, password or parameters)."""
    return f"postgresql://{shown_dsn(target)}" if is_url(target) else target


#: Days a served record is kept by default: the loop's own decisionLog.keepDays default.
KEEP_DAYS = 30.0
#: Rows one prune deletes at most: a log pruned for the first time after weeks is cut in
#: slices between two batches, so the writer never stops writing for long.
PRUNE_SLICE = 5000
#: Oldest first by `at`, so the `at` index finds them: ordered by id, SQLite walked the
#: table in id order to find rows past the cutoff. A served log prunes served records
#: only, a loop its own (`SERVED` tells them apart): a loop's database may hold a hook
#: server's records too, each pruned by its own keep time.
_PRUNE = ("DELETE FROM decision_log WHERE id IN (SELECT id FROM decision_log WHERE at < {0} "
          "AND record {1} {0} ORDER BY at LIMIT {0})")
#: What only a served record's text holds (`"served":true` as its encoders write it; a
#: string quoting it is written `\"served\":true`, which this does not match).
SERVED = '%"served":true%'


def _prune_sql(mark: str, served: bool) -> str:
    return _PRUNE.format(mark, "LIKE" if served else "NOT LIKE")


#: Connections a forked process got from its parent (gunicorn --preload): kept, never used
#: or closed there (closing a PostgreSQL one would end the parent's session too).
_INHERITED: list[Any] = []


def _summary(row_id: int, point: str, text: str) -> tuple[str, int] | None:
    """(rules, refused) for a row an earlier version wrote, None when it cannot be read."""
    try:
        rec = recorded((row_id, 0.0, point, "", text))
    except (ValueError, KeyError, AttributeError, TypeError, RecursionError):
        return None
    refused = bool(rec.refused_by) or rec.decisions.get("proceed") is False
    return rules_text(rec.steps), int(refused)


class Store:
    """A decision-log store: one connection (`_conn`), opened on first use and kept."""

    _conn: Any = None
    target = ""  # as messages show it
    source = ""  # the path or URL a reader opens

    def prepare(self) -> None:
        raise NotImplementedError

    def write(self, rows: Sequence[Row]) -> None:
        raise NotImplementedError

    def prune(self, before: float, *, served: bool = True) -> int:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def forget(self) -> None:
        """In a forked child: leave the parent's connection alone; the next write opens one."""
        if self._conn is not None:
            _INHERITED.append(self._conn)
            self._conn = None

    def _upgrade(self, conn: Any, have: set[str], mark: str) -> None:
        """Give a table an earlier version made the columns it lacks, filled in from each
        row's record (once: the columns exist afterwards)."""
        missing = [name for name in COLUMNS if name not in have]
        for name in missing:
            conn.execute(f"ALTER TABLE decision_log ADD COLUMN {name} {COLUMNS[name]}")
        if missing:
            rows = conn.execute("SELECT id, point, record FROM decision_log").fetchall()
            for row in rows:
                got = _summary(int(row[0]), str(row[1]), str(row[2]))
                if got is not None and (got[0] or got[1]):
                    conn.execute(f"UPDATE decision_log SET rules = {mark}, refused = {mark} "
                                 f"WHERE id = {mark}", (got[0], got[1], row[0]))
        for statement in INDEXES.split(";"):
            if statement.strip():
                conn.execute(statement)


class SQLiteStore(Store):
    """A SQLite file (WAL, synchronous=NORMAL: an operating-system crash may lose the last
    rows, never corrupt the file): created 0600 if missing."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.target = self.source = str(path)
        self._conn: sqlite3.Connection | None = None
        self._given = False  # a connection its caller made (and closes)

    @classmethod
    def on(cls, conn: sqlite3.Connection) -> SQLiteStore:
        """A store writing on `conn` (its path as the database names it), inside the
        caller's transaction when one is open."""
        row = conn.execute("PRAGMA database_list").fetchone()
        store = cls(Path(row[2] if row else ""))
        conn.executescript(TABLE)
        if not cls._current(conn):
            have = {str(r[1]) for r in conn.execute("PRAGMA table_info(decision_log)")}
            store._upgrade(conn, have, "?")
        store._conn, store._given = conn, True
        return store

    def prepare(self) -> None:
        """Create the file (0600) and the table now, so a server that cannot write its log
        says so at start; raises OSError or StoreError. A file that exists is not opened
        here: closing a descriptor of it would drop every POSIX lock this process holds on
        it, those of its other SQLite connections too (the loop's own, on loop.db), and a
        process that then finds itself the file's last user deletes its write-ahead log."""
        if not os.path.exists(self.path):
            fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o600)
            os.close(fd)
        self._connect()

    def _connect(self) -> sqlite3.Connection:
        if self._conn is None:
            with converted(f"decision log {self.path}: cannot open it"):
                conn = connect_sqlite(self.path, page_size=PAGE_SIZE)
                conn.row_factory = None
                conn.execute(f"PRAGMA wal_autocheckpoint={4 * 1024 * 1024 // PAGE_SIZE}")
                conn.execute("PRAGMA synchronous=NORMAL")
                conn.executescript(TABLE)
                if not self._current(conn):
                    conn.execute("BEGIN IMMEDIATE")  # one upgrader at a time; look again
                    try:
                        have = {str(r[1]) for r in
                                conn.execute("PRAGMA table_info(decision_log)")}
                        self._upgrade(conn, have, "?")
                    except BaseException:
                        conn.execute("ROLLBACK")
                        raise
                    conn.execute("COMMIT")
            self._conn = conn
        return self._conn

    @staticmethod
    def _current(conn: sqlite3.Connection) -> bool:
        """Whether the table has this version's columns and indexes already."""
        return conn.execute("SELECT 1 FROM sqlite_master WHERE type='index' AND "
                            "name='decision_log_rules'").fetchone() is not None

    def write(self, rows: Sequence[Row]) -> None:
        """One INSERT per `_ROWS_PER_INSERT` rows: the lock every Python thread shares is
        released while SQLite runs a statement and taken back after it, so an INSERT per
        row (executemany) took it from the server's event loop once per row (a quarter of
        the log's cost, measured); this takes it once per slice. When SQLite has already
        ended the transaction itself (a full disk does), its own error is the one raised."""
        conn = self._connect()
        with converted("the database refused the batch"):
            if conn.in_transaction:  # the caller's (`on`): its commit is the caller's
                for at in range(0, len(rows), _ROWS_PER_INSERT):
                    part = rows[at:at + _ROWS_PER_INSERT]
                    conn.execute(_insert(len(part)), [value for row in part for value in row])
                return
            conn.execute("BEGIN")
            try:
                for at in range(0, len(rows), _ROWS_PER_INSERT):
                    part = rows[at:at + _ROWS_PER_INSERT]
                    conn.execute(_insert(len(part), own=True),
                                 [value for row in part for value in row])
            except BaseException:
                if _in_transaction(conn):  # a full disk ends it first: its error stands
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def prune(self, before: float, *, served: bool = True) -> int:
        """Delete up to `PRUNE_SLICE` of the oldest rows recorded before `before` (served
        records, or with `served=False` the loop's own); returns how many went."""
        conn = self._connect()
        with converted(f"decision log {self.path}: cannot delete old records"):
            return int(conn.execute(_prune_sql("?", served), (before, SERVED, PRUNE_SLICE)
                                    ).rowcount)

    def close(self) -> None:
        if self._conn is not None and not self._given:
            self._conn.close()
        self._conn = None


def _in_transaction(conn: sqlite3.Connection) -> bool:
    return conn.in_transaction


class PostgresStore(Store):
    """A PostgreSQL database (psycopg 3 through `sqldb`): one connection, reopened after a
    failure."""

    def __init__(self, url: str) -> None:
        self.url = self.source = check_dsn(url, "--decision-log")
        self.target = shown(url)
        self._conn: Any = None

    def prepare(self) -> None:
        self._connect()

    def _connect(self) -> Any:
        if self._conn is None:
            conn = connect_pg(self.url, timeout=CONNECT_TIMEOUT)
            try:
                _require_utf8(conn, self.url)
                with converted(f"decision log {self.target}: cannot create its table"):
                    with conn.transaction():
                        current = conn.execute(_PG_CURRENT).fetchone()[0]
                    if not current:
                        self._create(conn)
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    def _create(self, conn: Any) -> None:
        """Make the table, or give an earlier version's what it lacks: one creator at a
        time, under a lock that waits for every open write to the table. (A store whose
        table is current skips this: a host starting beside others' open writes never waits
        on them, and runs one query instead of six.)"""
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(7411)")
            for statement in POSTGRESQL.ddl(TABLE).split(";"):
                if statement.strip():
                    conn.execute(statement)
            have = {str(r[0]) for r in conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE "
                "table_name = 'decision_log' AND table_schema = current_schema()")}
            self._upgrade(conn, have, "%s")

    def write(self, rows: Sequence[Row]) -> None:
        """One COPY per batch (binary where the table's types allow, `_COPY_BINARY`): half
        the client CPU of an INSERT per row as text (measured), a third of it binary. Its
        rows go in slices, the interpreter's lock let go between them, so the server's event
        loop waits at most a slice's formatting (a fraction of a millisecond) for it.

        The types are read for each batch, under the COPY's own lock: binary COPY sends each
        value as the type it is told, and the server takes those bytes as its column's type
        unchecked, so a batch sent by types read before an operator's migration stored
        doubles read as bigints or times of the year 152373, counted as written (two
        statements more a batch: +0.4 µs of client CPU a row at 400 rows a batch, measured,
        +11%; +1% of the batch's time)."""
        try:
            try:
                self._copy(rows, kept=self._conn is not None)
            except _Ended:
                # The server ended the connection kept since the last batch (a restart, an
                # operator's pg_terminate_backend): nothing of this one had gone. Once more,
                # on a new connection, instead of losing it.
                self.close()
                self._copy(rows, kept=False)
        except BaseException:
            self.close()  # the next batch reconnects
            raise

    def _copy(self, rows: Sequence[Row], *, kept: bool) -> None:
        """`write`'s COPY on the store's connection; `_Ended` when it is one `kept` from an
        earlier batch that the server has ended since (found before a row went)."""
        conn = self._connect()
        copying = False
        with converted("the database refused the batch"):
            try:
                with conn.transaction(), conn.cursor() as cur:
                    cur.execute(_PG_LOCK)
                    types = _binary_types(cur.execute(_PG_TYPES).fetchall())
                    copying = True
                    with cur.copy(_COPY if types is None else _COPY_BINARY) as copy:
                        if types is not None:
                            copy.set_types(types)
                        for at, row in enumerate(rows, 1):
                            copy.write_row(row)
                            if at % _COPY_SLICE == 0:
                                time.sleep(0)
            except Exception as exc:
                if kept and not copying and transient(exc):
                    raise _Ended from exc
                raise

    def prune(self, before: float, *, served: bool = True) -> int:
        """As `SQLiteStore.prune` (servers sharing the database each prune; it is idempotent)."""
        try:
            conn = self._connect()
            with converted(f"decision log {self.target}: cannot delete old records"), \
                    conn.transaction():
                return int(conn.execute(_prune_sql("%s", served),
                                        (before, SERVED, PRUNE_SLICE)).rowcount)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None


class _Ended(Exception):
    """A store's kept connection was found ended before a row of its batch went."""


def _binary_types(columns: Sequence[tuple[str, str]]) -> list[str] | None:
    """The type of each of `FIELDS` for binary COPY, from the table's (name, type) columns;
    None when one has a type binary COPY would not take our values as."""
    have = dict(columns)
    types = [have.get(name, "") for name in FIELDS]
    fits = all(given in _BINARY_TYPES.get(name, _TEXT_TYPES)
               for name, given in zip(FIELDS, types, strict=True))
    return types if fits else None


def _require_utf8(conn: Any, url: str) -> None:
    """`LoopError` for a database whose text is not UTF-8: a record holds any text a caller
    sent, and one character the encoding has not (an emoji in a LATIN1 database) would
    cost the whole batch it is written with."""
    encoding = conn.info.parameter_status("server_encoding") or ""
    if encoding.upper() not in ("UTF8", "UTF-8"):
        raise LoopError(f"decision log {shown(url)}: the database's encoding is {encoding}, "
                        "which cannot hold every text a call carries (a record with a "
                        "character it has not would be lost with its whole batch); use a "
                        "database created with ENCODING 'UTF8'")


def open_store(target: str) -> Store:
    """The store `target` names (not yet connected; call `prepare`); a `ConfigError` for a
    URL carrying a password."""
    if is_url(target):
        return PostgresStore(target)
    return SQLiteStore(Path(target).expanduser())


def read_pg(url: str, where: str = "", params: Sequence[Any] = ()
            ) -> Iterator[tuple[Any, ...]]:
    """The rows of a PostgreSQL decision log matching `where` (`?` placeholders), oldest
    first (streamed), with the host column when the table has it; `LoopError` when the
    database cannot be reached or holds no log."""
    conn = connect_pg(check_dsn(url, "--log"), timeout=CONNECT_TIMEOUT)
    try:
        with converted(f"decision log {shown(url)}: cannot read it"):
            found = conn.execute("SELECT to_regclass('decision_log')").fetchone()
            if found is None or found[0] is None:
                raise LoopError(f"{shown(url)} has no decision log yet: a hook server "
                                "started with --decision-log on it, or a loop whose database "
                                "it is, writes one as points fire")
            host = conn.execute(
                "SELECT 1 FROM information_schema.columns WHERE table_name = 'decision_log' "
                "AND column_name = 'host' AND table_schema = current_schema()").fetchone()
            with conn.cursor(name="replay") as cur:
                cur.execute(f"SELECT id, at, point, work_item, record{', host' if host else ''}"
                            f" FROM decision_log{where.replace('?', '%s')} ORDER BY id",
                            tuple(params))
                yield from cur
    finally:
        conn.close()


__all__ = ["INSERT_ROW", "KEEP_DAYS", "PRUNE_SLICE", "PostgresStore", "SQLiteStore", "Store",
           "StoreError", "is_url", "open_store", "read_pg", "shown"]
