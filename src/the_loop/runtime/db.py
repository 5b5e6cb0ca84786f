"""The loop's SQLite database under stateDir: tracker tables and loop state, one file.

WAL mode and a busy timeout let the pollers, the control plane and a session's one-shot
commands write at once; `transaction()` is BEGIN IMMEDIATE … COMMIT, so a crash leaves a
step either done or not done. The file (and its -wal/-shm companions, which SQLite creates
with the same mode) is readable by its owner only.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from the_loop.errors import ConfigError

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
CREATE TABLE IF NOT EXISTS cursors(ref TEXT PRIMARY KEY, last INTEGER NOT NULL);
"""

#: Columns added after the first release: (table, column, definition), added when missing.
_ADDED = (
    ("work", "epoch", "INTEGER NOT NULL DEFAULT 0"),
    ("work", "claim", "TEXT NOT NULL DEFAULT ''"),
    ("sessions", "step", "TEXT NOT NULL DEFAULT ''"),
    ("comments", "source", "TEXT NOT NULL DEFAULT 'comment'"),
)


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
    """One connection to `<stateDir>/loop.db` for this process."""

    def __init__(self, path: Path) -> None:
        self.path = path
        if str(path) != ":memory:":
            private_dir(path.parent)
            if not path.exists():
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
        try:
            self.conn = sqlite3.connect(str(path), timeout=30.0, isolation_level=None,
                                        check_same_thread=False)
            self.conn.row_factory = sqlite3.Row
            self.conn.execute("PRAGMA journal_mode=WAL")
            self.conn.execute("PRAGMA busy_timeout=30000")
            self.conn.executescript(SCHEMA)
            self._migrate()
        except sqlite3.DatabaseError as exc:
            raise ConfigError(f"{path} is not a usable loop database ({exc}); move it aside "
                              "and the loop starts a new one") from None

    def _migrate(self) -> None:
        for table, column, definition in _ADDED:
            cols = {r["name"] for r in self.conn.execute(f"PRAGMA table_info({table})")}
            if column not in cols:
                self.conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {definition}")

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def close(self) -> None:
        self.conn.close()
