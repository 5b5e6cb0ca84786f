"""Every read the console makes of the decision log, read-only and bounded.

The console reads the tracker, the work rows and the sessions through the loop (`Loop.tracker`,
`Loop.work`, `Store.sessions_of`: SQLite or PostgreSQL alike); the decision log, which stays
in each host's `<stateDir>/loop.db`, is read here by work item and by page, and a rule's
matches over time, on a read-only connection of its own. No function here writes.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from the_loop.decisions.looplog import READS, Recorded, expand


@dataclass(frozen=True)
class ItemStats:
    """What the decision log says about one work item."""

    points: int
    refusals: int
    last_point: str
    last_at: float
    last_id: int


@contextmanager
def _reading(path: Path, table: str = "decision_log") -> Iterator[sqlite3.Connection | None]:
    """A read-only connection to loop.db, or None when the file or `table` is not there."""
    if not path.is_file():
        yield None
        return
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30.0)
    try:
        found = conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?",
                             (table,)).fetchone()
        yield conn if found else None
    finally:
        conn.close()


def _recorded(row: tuple[Any, ...]) -> Recorded | None:
    row_id, at, point, ref, text = row
    try:
        rec = json.loads(text)
        if rec.get("v") not in READS:
            return None
        steps, decisions = expand(point, rec)
        return Recorded(row_id, at, point, ref, rec["context"], steps, decisions,
                        rec.get("refused_by", ""))
    except (ValueError, KeyError, AttributeError, TypeError):
        return None


_COLUMNS = "SELECT id, at, point, work_item, record FROM decision_log"


def item_stats(path: Path) -> dict[str, ItemStats]:
    """Per work item: points recorded, refusals, and the last point fired."""
    with _reading(path) as conn:
        if conn is None:
            return {}
        rows = conn.execute(
            "SELECT work_item, count(*), sum(json_extract(record, '$.refused_by') != ''), "
            "max(id) FROM decision_log GROUP BY work_item").fetchall()
        last = {int(r[0]): (str(r[1]), float(r[2])) for r in conn.execute(
            "SELECT id, point, at FROM decision_log WHERE id IN "
            "(SELECT max(id) FROM decision_log GROUP BY work_item)")}
    return {str(ref): ItemStats(int(n), int(refused or 0), *last.get(int(top), ("", 0.0)),
                                int(top))
            for ref, n, refused, top in rows}


def points_of(path: Path, ref: str, *, offset: int, limit: int) -> tuple[int, list[Recorded]]:
    """(how many points `ref` has, one page of them in firing order)."""
    with _reading(path) as conn:
        if conn is None:
            return 0, []
        total = int(conn.execute("SELECT count(*) FROM decision_log WHERE work_item=?",
                                 (ref,)).fetchone()[0])
        rows = conn.execute(f"{_COLUMNS} WHERE work_item=? ORDER BY id LIMIT ? OFFSET ?",
                            (ref, limit, offset)).fetchall()
    return total, [r for r in map(_recorded, rows) if r is not None]


def point(path: Path, point_id: int) -> Recorded | None:
    with _reading(path) as conn:
        if conn is None:
            return None
        row = conn.execute(f"{_COLUMNS} WHERE id=?", (point_id,)).fetchone()
    return _recorded(row) if row is not None else None


def inputs_of(path: Path, ref: str) -> list[Recorded]:
    """The input_received points of `ref` (at most the last 2,000), in firing order."""
    with _reading(path) as conn:
        if conn is None:
            return []
        rows = conn.execute(
            f"SELECT * FROM ({_COLUMNS} WHERE work_item=? AND point='input_received' "
            "ORDER BY id DESC LIMIT 2000) ORDER BY id", (ref,)).fetchall()
    return [r for r in map(_recorded, rows) if r is not None]


def rule_hits(path: Path, since: float, until: float, buckets: int,
              ) -> dict[tuple[str, str], dict[str, Any]]:
    """(hook, rule) → {"enforce": n, "audit": n, "buckets": [n…], "last_id", "last_at"} for
    every rule that matched between `since` and `until`."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    width = max((until - since) / buckets, 1e-9)
    with _reading(path) as conn:
        if conn is None:
            return out
        for mode in ("rules", "audit"):
            rows = conn.execute(
                "SELECT json_extract(s.value, '$.hook'), r.value, "
                "min(CAST((d.at - ?) / ? AS INTEGER), ?), count(*), max(d.id), max(d.at) "
                "FROM decision_log d, json_each(d.record, '$.steps') s, "
                f"json_each(s.value, '$.{mode}') r WHERE d.at >= ? AND d.at <= ? "
                "GROUP BY 1, 2, 3", (since, width, buckets - 1, since, until))
            for hook, rule, bucket, n, last_id, last_at in rows:
                entry = out.setdefault((str(hook), str(rule)), {
                    "enforce": 0, "audit": 0, "buckets": [0] * buckets, "last_id": 0,
                    "last_at": 0.0})
                entry["enforce" if mode == "rules" else "audit"] += int(n)
                entry["buckets"][int(bucket)] += int(n)
                if float(last_at) >= entry["last_at"]:
                    entry["last_id"], entry["last_at"] = int(last_id), float(last_at)
    return out


def count_since(path: Path, since: float | None) -> int:
    with _reading(path) as conn:
        if conn is None:
            return 0
        if since is None:
            return int(conn.execute("SELECT count(*) FROM decision_log").fetchone()[0])
        return int(conn.execute("SELECT count(*) FROM decision_log WHERE at >= ?",
                                (since,)).fetchone()[0])


def recent(path: Path, *, offset: int, limit: int) -> tuple[int, list[Recorded]]:
    """(how many points the log holds, one page of them, newest first)."""
    with _reading(path) as conn:
        if conn is None:
            return 0, []
        total = int(conn.execute("SELECT count(*) FROM decision_log").fetchone()[0])
        rows = conn.execute(f"{_COLUMNS} ORDER BY id DESC LIMIT ? OFFSET ?",
                            (limit, offset)).fetchall()
    return total, [r for r in map(_recorded, rows) if r is not None]
