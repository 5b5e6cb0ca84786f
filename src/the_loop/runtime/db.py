"""The loop's SQLite database under stateDir: tracker tables and loop state, one file.

WAL mode and a busy timeout let the poller, the control plane and a session's one-shot
commands write at once; `transaction()` is BEGIN IMMEDIATE … COMMIT, so a crash leaves a
step either done or not done.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

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
    body TEXT NOT NULL, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS work(
    ref TEXT PRIMARY KEY, state TEXT NOT NULL, arm_seq INTEGER NOT NULL DEFAULT 0,
    node TEXT NOT NULL DEFAULT '', session_id TEXT NOT NULL DEFAULT '',
    actor TEXT NOT NULL DEFAULT '', source TEXT NOT NULL DEFAULT '',
    respawns INTEGER NOT NULL DEFAULT 0,
    updated REAL NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS sessions(
    id TEXT PRIMARY KEY, ref TEXT NOT NULL, endpoint TEXT NOT NULL, harness TEXT NOT NULL,
    pid INTEGER NOT NULL, node TEXT NOT NULL, started REAL NOT NULL,
    exited INTEGER NOT NULL DEFAULT 0, code INTEGER, log TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS settled(
    key TEXT PRIMARY KEY, outcome TEXT NOT NULL, detail TEXT NOT NULL DEFAULT '',
    done INTEGER NOT NULL DEFAULT 0, at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS cursors(ref TEXT PRIMARY KEY, last INTEGER NOT NULL);
"""


class Database:
    """One connection to `<stateDir>/loop.db` for this process."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.conn = sqlite3.connect(str(path), timeout=30.0, isolation_level=None,
                                    check_same_thread=False)
        self.conn.row_factory = sqlite3.Row
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA busy_timeout=30000")
        self.conn.executescript(SCHEMA)

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
