"""Where decision records are stored: one `decision_log` table in SQLite or PostgreSQL.

The layout is the loop's own decision log's (`runtime.decisionlog` reads and writes the
same table in loop.db): `id, at, point, work_item, record`, the record a JSON object. So one
reader serves the loop's log and a hook server's. `open_store(target)` takes a file path
(SQLite, created 0600) or a `postgresql://` URL (psycopg 3, imported only then); a store
writes a batch of rows in one transaction and reads rows back for `policy replay`.
"""

from __future__ import annotations

import functools
import hashlib
import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from the_loop.errors import LoopError

#: `id` is the rowid (no AUTOINCREMENT: its bookkeeping cost a served record a sixth of its
#: insert); ids grow with each row, as replay's order needs, since pruning removes the
#: oldest rows, never the newest.
TABLE = """
CREATE TABLE IF NOT EXISTS decision_log(
    id INTEGER PRIMARY KEY, at REAL NOT NULL, point TEXT NOT NULL,
    work_item TEXT NOT NULL, record TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS decision_log_at ON decision_log(at);
CREATE INDEX IF NOT EXISTS decision_log_item ON decision_log(work_item, at);
"""
PG_TABLE = (
    "CREATE TABLE IF NOT EXISTS decision_log(id BIGSERIAL PRIMARY KEY, "
    "at DOUBLE PRECISION NOT NULL, point TEXT NOT NULL, work_item TEXT NOT NULL, "
    "record TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS decision_log_at ON decision_log(at)",
    "CREATE INDEX IF NOT EXISTS decision_log_item ON decision_log(work_item, at)",
)
_INSERT = "INSERT INTO decision_log(at, point, work_item, record) VALUES ({0}, {0}, {0}, {0})"
#: A served log's SQLite page: a record of a few KB is a row too big for two to share a
#: 4 KB page, so at SQLite's default each took a page of its own, half empty, and every
#: byte was written twice (WAL, then checkpoint). At 32 KB a 2 KB record takes 2.2 KB of
#: file and half the CPU to insert (kernel time most of it); records of 9 KB cost as at 4 KB.
PAGE_SIZE = 32768
#: Rows per SQLite INSERT: 4 values a row, under the 999 bound of SQLite before 3.32.
_ROWS_PER_INSERT = 200
_COPY_SLICE = 50  # rows a PostgreSQL writer formats between two yields of the lock
_COPY = "COPY decision_log(at, point, work_item, record) FROM STDIN"
#: One row: (at, point, work_item, record as JSON text).
Row = tuple[float, str, str, str]
#: One row read back: (id, at, point, work_item, record text).
ReadRow = tuple[int, float, str, str, str]
#: Seconds a PostgreSQL connection attempt may take before the batch counts as failed.
CONNECT_TIMEOUT = 5


@functools.lru_cache(maxsize=16)
def _insert(rows: int) -> str:
    """An INSERT of `rows` rows into the SQLite log (the few sizes a writer uses, cached)."""
    return _INSERT.format("?") + ", (?, ?, ?, ?)" * (rows - 1)


#: Characters of an item ref the item column keeps as they are. PostgreSQL's index on the
#: column takes at most 2,704 bytes a row: one call with a longer ref (a body may hold 1 MiB)
#: cost its whole batch, every other caller's records with it.
ITEM_KEY_MAX = 512


def item_key(ref: str) -> str:
    """The item column's value for `ref` (a key to filter by; the record keeps the ref as
    received): the ref itself, a NUL shown as U+FFFD (PostgreSQL's text cannot hold one);
    past `ITEM_KEY_MAX` characters, its first 400 and the SHA-256 of all of it, under
    2 KB whatever the characters. A filter by a ref goes through this too."""
    key = ref.replace("\0", "\ufffd")
    if len(key) <= ITEM_KEY_MAX:
        return key
    digest = hashlib.sha256(ref.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{key[:400]}\u2026sha256:{digest}"


def is_url(target: str) -> bool:
    """Whether `target` names a PostgreSQL database rather than a file."""
    return target.startswith(("postgresql://", "postgres://"))


def shown(target: str) -> str:
    """`target` as a log line may show it: a URL without its password."""
    if not is_url(target):
        return target
    scheme, _, rest = target.partition("://")
    creds, at, host = rest.rpartition("@")
    if not at:
        return target
    user = creds.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}" if ":" in creds else f"{scheme}://{user}@{host}"


#: Days a served record is kept by default: the loop's own decisionLog.keepDays default.
KEEP_DAYS = 30.0
#: Rows one prune deletes at most: a log pruned for the first time after weeks is cut in
#: slices between two batches, so the writer never stops writing for long.
PRUNE_SLICE = 5000
#: Oldest first by `at`, so the `at` index finds them: ordered by id, SQLite walked the
#: table in id order to find rows past the cutoff, and the hourly prune of a log with none
#: (or fewer than a slice) read every row of it on the writer's thread. Served records
#: only (`SERVED`): a loop's shared database keeps its own in the same table until the
#: operator deletes them (docs/runtime.md), and one reader serving both invites pointing
#: a hook server there.
_PRUNE = ("DELETE FROM decision_log WHERE id IN (SELECT id FROM decision_log WHERE at < {0} "
          "AND record LIKE {0} ORDER BY at LIMIT {0})")
#: What only a served record's text holds (`"served":true` as its encoders write it; a
#: string quoting it is written `\"served\":true`, which this does not match).
SERVED = '%"served":true%'


#: Connections a forked process got from its parent (gunicorn --preload): kept, never used
#: or closed there (closing a PostgreSQL one would end the parent's session too).
_INHERITED: list[Any] = []


class Store:
    """A decision-log store: one connection (`_conn`), opened on first use and kept."""

    _conn: Any = None

    def prepare(self) -> None:
        raise NotImplementedError

    def write(self, rows: Sequence[Row]) -> None:
        raise NotImplementedError

    def prune(self, before: float) -> int:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def forget(self) -> None:
        """In a forked child: leave the parent's connection alone; the next write opens one."""
        if self._conn is not None:
            _INHERITED.append(self._conn)
            self._conn = None


class SQLiteStore(Store):
    """A SQLite file (WAL, synchronous=NORMAL, as the loop's log): created 0600 if missing."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None

    def prepare(self) -> None:
        """Create the file (0600) and the table now, so a server that cannot write its log
        says so at start; raises OSError or sqlite3.Error."""
        fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o600)
        os.close(fd)
        self._connect()

    def _connect(self) -> sqlite3.Connection:
        if self._conn is None:
            conn = sqlite3.connect(str(self.path), timeout=30.0, isolation_level=None,
                                   check_same_thread=False)
            conn.execute(f"PRAGMA page_size={PAGE_SIZE}")  # a new file only; before WAL
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA wal_autocheckpoint={4 * 1024 * 1024 // PAGE_SIZE}")  # 4 MiB
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.executescript(TABLE)
            self._conn = conn
        return self._conn

    def write(self, rows: Sequence[Row]) -> None:
        """One INSERT per `_ROWS_PER_INSERT` rows: the lock every Python thread shares is
        released while SQLite runs a statement and taken back after it, so an INSERT per
        row (executemany) took it from the server's event loop once per row (a quarter of
        the log's cost, measured); this takes it once per slice."""
        conn = self._connect()
        conn.execute("BEGIN")
        try:
            for at in range(0, len(rows), _ROWS_PER_INSERT):
                part = rows[at:at + _ROWS_PER_INSERT]
                conn.execute(_insert(len(part)), [value for row in part for value in row])
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def prune(self, before: float) -> int:
        """Delete up to `PRUNE_SLICE` of the oldest rows recorded before `before`; returns
        how many went."""
        conn = self._connect()
        return int(conn.execute(_PRUNE.format("?"), (before, SERVED, PRUNE_SLICE)).rowcount)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class PostgresStore(Store):
    """A PostgreSQL database (psycopg 3): one connection, reopened after a failure."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._conn: Any = None

    def prepare(self) -> None:
        self._connect()

    def _connect(self) -> Any:
        if self._conn is None:
            psycopg = _psycopg()
            conn = psycopg.connect(self.url, connect_timeout=CONNECT_TIMEOUT)
            try:
                _require_utf8(conn, self.url)
                with conn.transaction():
                    conn.execute("SELECT pg_advisory_xact_lock(7411)")  # one creator at a time
                    for statement in PG_TABLE:
                        conn.execute(statement)
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    def write(self, rows: Sequence[Row]) -> None:
        """One COPY per batch: half the client CPU of an INSERT per row (measured). Its
        rows go in slices, the interpreter's lock let go between them, so the server's event
        loop waits at most a slice's formatting (a fraction of a millisecond) for it."""
        try:
            conn = self._connect()
            with conn.transaction(), conn.cursor() as cur, cur.copy(_COPY) as copy:
                for at, row in enumerate(rows, 1):
                    copy.write_row(row)
                    if at % _COPY_SLICE == 0:
                        time.sleep(0)
        except BaseException:
            self.close()  # the next batch reconnects
            raise

    def prune(self, before: float) -> int:
        """As `SQLiteStore.prune` (servers sharing the database each prune; it is idempotent)."""
        try:
            conn = self._connect()
            with conn.transaction():
                return int(conn.execute(_PRUNE.format("%s"), (before, SERVED, PRUNE_SLICE)
                                        ).rowcount)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None


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


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise LoopError("a postgresql:// decision log needs psycopg 3: pip install "
                        "'the-loop[postgresql]'") from None
    return psycopg


def open_store(target: str) -> Store:
    """The store `target` names (not yet connected; call `prepare`)."""
    if is_url(target):
        return PostgresStore(target)
    return SQLiteStore(Path(target).expanduser())


def where_clause(since: float | None, point: str, mark: str,
                 work_item: str = "") -> tuple[str, list[Any]]:
    """A WHERE clause (with `mark` as the placeholder) for replay's filters."""
    clauses: list[str] = []
    params: list[Any] = []
    if work_item:
        clauses.append(f"work_item = {mark}")
        params.append(item_key(work_item))
    if since is not None:
        clauses.append(f"at >= {mark}")
        params.append(since)
    if point:
        clauses.append(f"point = {mark}")
        params.append(point)
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", params


def read_pg(url: str, *, since: float | None = None, point: str = "",
            work_item: str = "") -> Iterator[ReadRow]:
    """The rows of a PostgreSQL decision log matching the filters, oldest first (streamed);
    `LoopError` when the database cannot be reached or holds no log."""
    psycopg = _psycopg()
    try:
        conn = psycopg.connect(url, connect_timeout=CONNECT_TIMEOUT)
    except psycopg.Error as exc:
        raise LoopError(f"{shown(url)}: cannot connect to the decision log "
                        f"({str(exc).strip().splitlines()[0] if str(exc).strip() else exc})"
                        ) from None
    try:
        found = conn.execute("SELECT to_regclass('decision_log')").fetchone()
        if found is None or found[0] is None:
            raise LoopError(f"{shown(url)} has no decision log yet: a hook server started "
                            "with --decision-log on it, or a loop whose database it is, "
                            "writes one as points fire")
        where, params = where_clause(since, point, "%s", work_item)
        with conn.cursor(name="replay") as cur:
            cur.execute(f"SELECT id, at, point, work_item, record FROM decision_log{where} "
                        "ORDER BY id", params)
            yield from cur
    finally:
        conn.close()
