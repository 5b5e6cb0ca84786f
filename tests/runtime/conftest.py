"""Fixtures of the runtime's store tests: one loop database on either backend."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from the_loop.runtime.db import Database, open_database


@pytest.fixture
def target(database: str, tmp_path: Path) -> str | Path:
    """Where the test's loop database is: the `database` fixture's PostgreSQL DSN, else a
    SQLite file of its own."""
    return database or tmp_path / "state" / "loop.db"


@pytest.fixture
def db(target: str | Path) -> Iterator[Database]:
    opened = open_database(target)
    yield opened
    opened.close()
