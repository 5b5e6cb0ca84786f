"""Connections to the loop's SQL database (a SQLite file or a PostgreSQL DSN) and their dialects.

What other modules rely on (the loop's state, and a served decision log):

- `is_postgresql(target)`: whether a `database:` value names PostgreSQL.
- `check_dsn(dsn, where)`: the DSN, refused with one sentence when it carries a password (libpq
  supplies it from `PGPASSWORD` or `~/.pgpass`, never the file).
- `connect_sqlite(path)`: a connection in autocommit mode (`isolation_level=None`), WAL, a 30 s
  busy timeout, rows addressable by column name (`page_size` set first, for a new file).
- `connect_pg(dsn)`: one psycopg connection of the caller's own (not pooled: a decision-log
  writer keeps one across a fork, COPYs on it, and closes it after a failure).
- `StoreError` and `converted(what)`: the one boundary where sqlite3's and psycopg's errors
  become ours (a `StoreError` naming `what` and the database's own first line), so no
  caller tells a driver's errors apart by their module's name.
- `PgConnection(dsn)`: one connection borrowed from the process's pool for that DSN (psycopg 3
  and psycopg_pool, imported only here and only when used), rows as dicts, autocommit; it
  takes a fresh connection when the server dropped the old one (a restart), so a caller
  that retries its statement reconnects. `.execute(sql, params)` takes `?` placeholders like
  sqlite3; `.transaction()` is BEGIN … COMMIT.
- `transient(exc)`: whether an error is the database being away for a moment (a restart, a
  dropped connection, a server starting up), not a mistake; `retrying(run, what)` runs `run`
  again with backoff (0.25 s doubling to 4 s) while it fails so, within a bound (30 s, or
  `$THE_LOOP_DB_RETRY_SECONDS`), said once on stderr, and then raises a `LoopError` naming it.
- `SQLITE` / `POSTGRESQL` (`Dialect`): `now` (the database clock in epoch seconds),
  `for_update` / `skip_locked` (row locks; empty on SQLite, whose writers are serialised
  anyway), `ddl(text)` (SQLite DDL → this dialect), `xact_lock(key)` (a transaction-scoped
  lock on a name; None on SQLite). Upserts are written once, in the form both accept:
  `INSERT … ON CONFLICT (…) DO NOTHING` / `DO UPDATE SET … = excluded.…`.
"""

from __future__ import annotations

import atexit
import os
import re
import sqlite3
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any, Final, Protocol, TypeVar
from urllib.parse import parse_qs, urlsplit

from the_loop.errors import ConfigError, LoopError

__all__ = ["POSTGRESQL", "SQLITE", "Conn", "Dialect", "PgConnection", "StoreError",
           "Unreachable", "WritesLost", "check_dsn", "connect_pg", "connect_sqlite",
           "converted", "is_postgresql", "read_only_sqlite", "retrying", "shown_dsn",
           "transient"]

T = TypeVar("T")
RETRY_ENV = "THE_LOOP_DB_RETRY_SECONDS"
DEFAULT_RETRY = 30.0
#: PostgreSQL's own codes for "not now": admin_shutdown, crash_shutdown, cannot_connect_now
#: (a server starting or stopping), idle_session_timeout, and
#: idle_in_transaction_session_timeout (the server ended a connection this process left
#: idle, as a process paused past its lease does: nothing of that transaction landed, and a
#: new connection goes on); class 08 is every connection exception.
_AWAY = ("57P01", "57P02", "57P03", "57P05", "25P03")
#: A connection refused for a mistake, not for the moment: libpq gives a failed connection
#: no SQLSTATE, only its words (a wrong password or role, a missing database, a bad option),
#: which waiting does not mend: also TLS, channel binding or an authentication method the
#: URL requires and the server does not give, a pg_hba.conf `reject`, a certificate that
#: fails, an unknown setting in `options`, a port where something other than PostgreSQL
#: answers. (In English: a server whose lc_messages is another language has these waited
#: for, to the bound, and then refused.) Only the words outside "quotes" are read: a socket
#: folder, database or role the message names is the operator's, not the reason.
_MISTAKE = re.compile(r"authentication failed|no password supplied|does not exist|no pg_hba\.conf "
                      r"entry|not permitted to log in|permission denied|"
                      r"\binvalid [\w ]*(value|number|option|parameter|token)\b|"
                      r"does not support SSL|channel binding required|encryption required|"
                      r"authentication method requirement|pg_hba\.conf rejects|"
                      r"certificate verify failed|does not match host name|client certificate|"
                      r"unrecognized configuration parameter|invalid response to SSL|"
                      r"expected authentication request", re.IGNORECASE)


class Unreachable(ConfigError):
    """The database server could not be reached just now (it may be restarting); `why` is
    the driver's own first line."""

    def __init__(self, message: str, why: str = "") -> None:
        super().__init__(message)
        self.why = why or message


def transient(exc: BaseException) -> bool:
    """Whether `exc` is the database being away for a moment rather than a mistake (a wrong
    password, a missing database, bad SQL): worth trying again."""
    if isinstance(exc, Unreachable):
        return True
    psycopg = sys.modules.get("psycopg")
    if psycopg is not None and isinstance(exc, psycopg.Error):
        state = getattr(exc, "sqlstate", None)
        if not isinstance(exc, psycopg.OperationalError):
            return state in _AWAY  # 25P03 is an InternalError
        if state is None:
            return not _MISTAKE.search(re.sub(r'"[^"\n]*"', '""', str(exc)))
        return state.startswith("08") or state in _AWAY
    return False


def retry_bound() -> float:
    """How long a one-shot command keeps retrying the database (seconds; 0: not at all)."""
    raw = os.environ.get(RETRY_ENV, "").strip()
    if not raw:
        return DEFAULT_RETRY
    try:
        bound = float(raw)
    except ValueError:
        bound = -1.0
    if not 0 <= bound < float("inf"):  # NaN too
        raise ConfigError(f"${RETRY_ENV}: expected the seconds to wait for the database "
                          f"(0 for not at all), got {raw[:40]!r}; unset it for "
                          f"{DEFAULT_RETRY:g} s")
    return bound


def retrying(run: Callable[[], T], what: str, *, bound: float | None = None) -> T:
    """`run()`, run again with backoff while the database is away (`transient`), for at
    most `bound` seconds (default `retry_bound()`); the wait is said once on stderr. When
    the bound is spent, a LoopError says so (the last error's first line)."""
    limit = retry_bound() if bound is None else bound
    deadline = time.monotonic() + limit
    delay, tries = 0.25, 0
    while True:
        try:
            return run()
        except Exception as exc:
            if not transient(exc):
                raise
            tries += 1
            why = exc.why if isinstance(exc, Unreachable) else str(exc).strip()
            why = (why or type(exc).__name__).splitlines()[0][:200]
            if not limit:
                raise LoopError(f"{what}: the database is unreachable ({why}); run it again "
                                f"once the database is back (${RETRY_ENV} is 0: no "
                                "waiting)") from None
            if tries == 1:
                sys.stderr.write(f"the-loop: {what}: the database is unreachable ({why}); "
                                 f"retrying for up to {limit:g} s\n")
                sys.stderr.flush()
            left = deadline - time.monotonic()
            if tries > 1 and left <= 0:  # the last try was at the bound, not before it
                raise LoopError(f"{what}: the database is still unreachable after {limit:g} s "
                                f"({why}); run it again once the database is back") from None
        time.sleep(max(0.0, min(delay, left)))
        delay = min(delay * 2, 4.0)

PREFIXES = ("postgresql://", "postgres://")
EXTRA = "pip install 'the-loop[postgresql]'"


class Cursor(Protocol):
    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Conn(Protocol):
    """What the loop's SQL runs on: sqlite3.Connection, or `PgConnection`."""

    def execute(self, sql: str, parameters: Sequence[Any] = ..., /) -> Cursor: ...


class Dialect:
    """How SQL differs between the two backends (`SQLITE` and `POSTGRESQL`, the only two,
    told apart by identity). A plain class: a dataclass costs the agent's commands the
    `dataclasses` import and its generated methods at every start (issue 34)."""

    __slots__ = ("for_update", "name", "now", "skip_locked")

    def __init__(self, name: str, now: str, for_update: str, skip_locked: str) -> None:
        self.name: Final = name
        self.now: Final = now  # SQL: seconds since the epoch by the database's own clock
        self.for_update: Final = for_update
        self.skip_locked: Final = skip_locked

    def ddl(self, text: str) -> str:
        """SQLite DDL in this dialect (integers are 64-bit, reals double, ids identities)."""
        if self.name == "sqlite":
            return text
        text = re.sub(r"\bINTEGER PRIMARY KEY( AUTOINCREMENT)?\b",
                      "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY", text)
        text = re.sub(r"\bINTEGER\b", "BIGINT", text)
        return re.sub(r"\bREAL\b", "DOUBLE PRECISION", text)

    def contains(self, text: str, part: str) -> str:
        """SQL true when the text `text` holds `part` (two SQL expressions), by case."""
        return f"{'instr' if self.name == 'sqlite' else 'strpos'}({text}, {part}) > 0"

    def xact_lock(self, key: str) -> str | None:
        """SQL taking a lock on `key` until the transaction ends (None: not needed here,
        SQLite's BEGIN IMMEDIATE already admits one writer at a time)."""
        if self.name == "sqlite":
            return None
        return f"SELECT pg_advisory_xact_lock({zlib.crc32(key.encode()) - 2**31})"


SQLITE = Dialect("sqlite", "((julianday('now') - 2440587.5) * 86400.0)", "", "")
POSTGRESQL = Dialect("postgresql", "(EXTRACT(EPOCH FROM clock_timestamp())::float8)",
                     " FOR UPDATE", " FOR UPDATE SKIP LOCKED")


def is_postgresql(target: str) -> bool:
    return target.startswith(PREFIXES)


def check_dsn(dsn: str, where: str = "database") -> str:
    """The DSN when it can be used; a ConfigError (never echoing a secret) otherwise."""
    try:
        parts = urlsplit(dsn)
    except ValueError as exc:  # an unclosed [ of an IPv6 address, say
        raise ConfigError(f"{where}: not a URL ({exc}); expected "
                          "postgresql://user@host/dbname, an IPv6 host in [brackets]") from None
    if parts.password is not None or "password" in parse_qs(parts.query):
        raise ConfigError(f"{where}: the PostgreSQL URL carries a password; remove it and give "
                          "the password to libpq through PGPASSWORD or ~/.pgpass (a password "
                          "never sits in cli-config.yaml)")
    if not is_postgresql(dsn):
        raise ConfigError(f"{where}: expected postgresql://user@host/dbname (got a URL of "
                          f"another scheme, {parts.scheme!r})")
    return dsn


def shown_dsn(dsn: str) -> str:
    """host/dbname as messages show it (the user, the query and anything else left out)."""
    parts = urlsplit(dsn)
    return f"{parts.hostname or 'local socket'}{parts.path or '/'}"


def connect_sqlite(path: Path | str, *, timeout: float = 30.0,
                   page_size: int = 0) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), timeout=timeout, isolation_level=None,
                           check_same_thread=False)
    conn.row_factory = sqlite3.Row
    if page_size:  # a new file only; before WAL
        conn.execute(f"PRAGMA page_size={int(page_size)}")
    conn.execute("PRAGMA journal_mode=WAL")
    # A commit is written to the WAL without waiting for the disk (it is synced at each
    # checkpoint): a process that crashes loses nothing committed and the file is never
    # corrupted; a power cut may roll back the last commits (docs/runtime.md). A commit that
    # waited for its fsync held the write lock all that time: 7-15 ms under load, which
    # every other writer of the file waited out (issue 34).
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute(f"PRAGMA busy_timeout={int(timeout * 1000)}")
    return conn


def read_only_sqlite(path: Path | str, *, timeout: float = 30.0) -> sqlite3.Connection:
    """A read-only connection to the SQLite file at `path` (sqlite3.OperationalError when
    there is none). Its `file:` URI is percent-encoded: a `#`, `?` or `%` in a folder's name
    would otherwise end the path there, and open (or make) another file."""
    from urllib.parse import quote

    return sqlite3.connect(f"file:{quote(os.path.abspath(path))}?mode=ro", uri=True,
                           timeout=timeout)


class StoreError(LoopError):
    """A database refused or failed a statement (sqlite3's or psycopg's error, converted
    once by `converted`); the message names what was being done and the database's words."""


class WritesLost(StoreError):
    """A statement failed inside a transaction that held other writes not yet committed:
    they were rolled back with it. Whoever made them must not go on as if they landed;
    `error` is the statement's own error (a `Fenced`, a driver's error, ...)."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def driver_error(exc: BaseException) -> bool:
    """Whether `exc` is sqlite3's or psycopg's (psycopg only when it was imported)."""
    if isinstance(exc, sqlite3.Error):
        return True
    psycopg = sys.modules.get("psycopg")
    return psycopg is not None and isinstance(exc, psycopg.Error)


@contextmanager
def converted(what: str) -> Iterator[None]:
    """Run the block; a driver's error leaves it as a `StoreError` ("WHAT: the database's
    first line"), the driver's exception chained."""
    try:
        yield
    except Exception as exc:
        if not driver_error(exc):
            raise
        raise StoreError(f"{what}: {_first_line(exc)}") from exc


# ---------------------------------------------------------------------------- PostgreSQL

@lru_cache(maxsize=256)
def _pg_sql(sql: str) -> str:
    """sqlite3's `?` placeholders as psycopg's `%s` (a literal % doubled)."""
    return sql.replace("%", "%%").replace("?", "%s")


_POOLS: dict[str, Any] = {}
_POOLS_LOCK = threading.Lock()


def _modules() -> tuple[Any, Any]:
    try:
        import psycopg
        import psycopg_pool
    except ImportError as exc:  # name the one missing: psycopg alone is not enough
        raise ConfigError(f"database: a postgresql:// database needs psycopg and "
                          f"psycopg_pool ({exc.name} is not installed); {EXTRA}") from None
    return psycopg, psycopg_pool


def pool_for(dsn: str, *, max_size: int = 8, idle: float = 0) -> Any:
    """This process's pool for `dsn` (made on first use; closed at exit). Raises a
    ConfigError naming the server when it cannot be reached. `idle` (seconds, made by the
    first caller): the server ends a connection whose transaction sits idle that long, so a
    process stopped inside one does not keep its locks for ever."""
    with _POOLS_LOCK:
        pool = _POOLS.get(dsn)
        if pool is not None:
            return pool
        psycopg, psycopg_pool = _modules()
        from psycopg.rows import dict_row

        _quiet_pool()
        try:  # a first connection of our own: its error names the cause (the pool's does not)
            psycopg.connect(dsn, connect_timeout=10).close()
        except psycopg.Error as exc:
            why = (str(exc).strip() or type(exc).__name__).splitlines()[0]
            message = (f"database: cannot reach PostgreSQL at {shown_dsn(dsn)}: {why}; check "
                       "the URL, that the server runs, and PGPASSWORD or ~/.pgpass")
            if transient(exc):
                raise Unreachable(message, why) from None
            raise ConfigError(message) from None
        pool = psycopg_pool.ConnectionPool(
            dsn, min_size=1, max_size=max_size, open=True, timeout=max(1.0, retry_bound()),
            kwargs={"autocommit": True, "row_factory": dict_row},
            configure=_idle_ended(idle) if idle else None,
            check=psycopg_pool.ConnectionPool.check_connection, name="the-loop")
        _POOLS[dsn] = pool
        return pool


def _quiet_pool() -> None:
    """Keep the pool's own warnings off stderr where nothing was set up to log: a
    connection the server ended was "discarding closed connection: <psycopg.Connection
    [BAD] at 0x...>", a bare line from logging's last resort beside the loop's own sentence
    about the database. An application that configures logging still gets them."""
    import logging

    pool_log = logging.getLogger("psycopg.pool")
    if not pool_log.handlers:
        pool_log.addHandler(logging.NullHandler())


def _idle_ended(idle: float) -> Callable[[Any], None]:
    """A pool's `configure`: each new connection's server ends a transaction left idle
    `idle` seconds, unless the server, the role or the DSN's `options` already end one
    sooner (a session setting, not a startup option, which a pooler such as PgBouncer may
    refuse)."""
    ms = int(idle * 1000)

    def configure(conn: Any) -> None:
        conn.execute("SELECT set_config('idle_in_transaction_session_timeout', %s, false) "
                     "FROM pg_settings WHERE name = 'idle_in_transaction_session_timeout' "
                     "AND (setting::bigint = 0 OR setting::bigint > %s)", (str(ms), ms))
    return configure


def connect_pg(dsn: str, *, timeout: int = 5) -> Any:
    """A psycopg connection of the caller's own to `dsn` (a transaction per `with
    conn.transaction()`); a `StoreError` naming the server when it cannot be reached."""
    psycopg, _ = _modules()
    with converted(f"cannot connect to PostgreSQL at {shown_dsn(dsn)}"):
        return psycopg.connect(dsn, connect_timeout=timeout)


@atexit.register
def _close_pools() -> None:
    with _POOLS_LOCK:
        for pool in _POOLS.values():
            pool.close(timeout=1.0)
        _POOLS.clear()


class PgConnection:
    """One pooled connection, used like sqlite3's (see the module's docstring)."""

    def __init__(self, dsn: str, *, idle: float = 0) -> None:
        self.psycopg, _ = _modules()
        self.pool = pool_for(dsn, idle=idle)
        self._conn: Any = None

    @property
    def raw(self) -> Any:
        conn = self._conn
        if conn is not None and (conn.broken or conn.closed):
            self.pool.putconn(conn)  # the pool discards a broken connection
            conn = self._conn = None
        if conn is None:
            conn = self._conn = self.pool.getconn()
        return conn

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> Any:
        return self.raw.execute(_pg_sql(sql), tuple(parameters))

    def executescript(self, script: str) -> None:
        for statement in script.split(";"):
            if statement.strip():
                self.raw.execute(statement)

    @contextmanager
    def transaction(self) -> Iterator[PgConnection]:
        with self.raw.transaction():
            yield self

    def close(self) -> None:
        if self._conn is not None:
            self.pool.putconn(self._conn)
            self._conn = None
