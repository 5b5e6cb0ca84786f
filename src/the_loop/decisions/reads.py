"""Every read of a decision log, read-only and bounded: replay's, the console's, `state check`'s.

`target` is the store the config names — `<stateDir>/loop.db`, or the shared PostgreSQL
database (`database:`) where every host's points are — or a hook server's log (a SQLite file
or a postgresql:// URL). One SQL text serves both backends (`?` placeholders; PostgreSQL
through `sqldb.PgConnection`). A table an earlier version made, without the `host`, `rules`
and `refused` columns, is still read: those values then come from each record. No function
here writes.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from the_loop.decisions.layout import Recorded, item_key, recorded, records, rules_of, rules_text
from the_loop.decisions.stores import is_url, read_pg, shown
from the_loop.errors import LoopError
from the_loop.sqldb import PgConnection, check_dsn, converted, read_only_sqlite

__all__ = ["ItemStats", "count_points", "count_since", "inputs_of", "item_stats", "point",
           "points_of", "read_points", "recent", "rule_hits"]

_BAD = (ValueError, KeyError, AttributeError, TypeError, RecursionError)


@dataclass(frozen=True)
class ItemStats:
    """What the decision log says about one work item."""

    points: int
    refusals: int
    last_point: str
    last_at: float
    last_id: int
    hosts: tuple[str, ...] = ()  # the hosts that fired its points


class _Reading:
    """One read-only connection, its rows as tuples, and which columns its table has."""

    def __init__(self, conn: Any, pg: bool) -> None:
        self.conn = conn
        self.pg = pg
        if pg:
            names = {str(r["column_name"]) for r in conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = "
                "'decision_log' AND table_schema = current_schema()")}
        else:
            names = {str(r[1]) for r in conn.execute("PRAGMA table_info(decision_log)")}
        self.current = {"host", "rules", "refused"} <= names

    def rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        if self.pg:
            return [tuple(r.values()) for r in self.conn.execute(sql, params)]
        return [tuple(r) for r in self.conn.execute(sql, params)]

    @property
    def columns(self) -> str:
        """id, at, point, work_item, record[, host] as this table has them."""
        return "id, at, point, work_item, record" + (", host" if self.current else "")


@contextmanager
def _reading(target: Path | str) -> Iterator[_Reading | None]:
    """A read-only connection to the log, or None when there is no log there yet."""
    if isinstance(target, str) and is_url(target):
        conn = PgConnection(check_dsn(target, "decision log"))
        try:
            with converted(f"decision log {shown(target)}: cannot read it"):
                found = conn.execute("SELECT to_regclass('decision_log') AS t").fetchone()
                yield _Reading(conn, True) if found and found["t"] is not None else None
        finally:
            conn.close()
        return
    path = Path(target)
    if not path.is_file():
        yield None
        return
    raw = read_only_sqlite(path)
    try:
        with converted(f"decision log {path}: cannot read it"):
            found = raw.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND "
                                "name='decision_log'").fetchone()
            yield _Reading(raw, False) if found else None
    finally:
        raw.close()


def _point(row: tuple[Any, ...]) -> Recorded | None:
    try:
        return recorded(row)
    except _BAD:
        return None


def _refused(rec: Recorded | None) -> bool:
    return rec is not None and (bool(rec.refused_by) or rec.decisions.get("proceed") is False)


def _where(since: float | None, point: str, work_item: str) -> tuple[str, tuple[Any, ...]]:
    """The filters replay, what-if and the rules page share: one count for one period."""
    clauses: list[str] = []
    params: list[Any] = []
    if since is not None:
        clauses.append("at >= ?")
        params.append(since)
    if point:
        clauses.append("point = ?")
        params.append(point)
    if work_item:
        if ":" in work_item:
            clauses.append("work_item = ?")
            params.append(item_key(work_item))
        else:  # acme/app#3, #3 or 3: the ref's tail
            tail = work_item if "#" in work_item else f"#{work_item}"
            escaped = tail.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            clauses.append("(work_item = ? OR work_item LIKE ? ESCAPE '\\')")
            params += [work_item, f"%{escaped}"]
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", tuple(params)


def _no_log(target: Path | str) -> LoopError:
    if isinstance(target, str) and is_url(target):
        return LoopError(f"{shown(target)} has no decision log yet: a hook server started "
                         "with --decision-log on it, or a loop whose database it is, writes "
                         "one as points fire")
    path = Path(target)
    if not path.is_file():
        return LoopError(f"no state database at {path}: the decision log is written there "
                         "as the loop fires points; run some work first (or check --config)")
    return LoopError(f"{path} has no decision log yet: points are recorded as the loop "
                     "fires them; run some work first")


def count_points(target: Path | str, *, since: float | None = None, point: str = "",
                 work_item: str = "") -> int:
    """How many recorded points match the filters (`LoopError` when there is no log)."""
    with _reading(target) as r:
        if r is None:
            raise _no_log(target)
        where, params = _where(since, point, work_item)
        return int(r.rows(f"SELECT count(*) FROM decision_log{where}", params)[0][0])


def count_since(target: Path | str, since: float | None) -> int:
    """How many points were recorded since `since` (0 when there is no log yet)."""
    try:
        return count_points(target, since=since)
    except LoopError:
        return 0


def read_points(target: Path | str, *, since: float | None = None, point: str = "",
                work_item: str = "", problems: list[str] | None = None) -> Iterator[Recorded]:
    """The recorded points matching the filters, oldest first (streamed, not all in memory).

    Raises `LoopError` when there is no log. A row this version cannot read raises
    `LoopError` too — or, with `problems`, is named there and skipped.
    """
    if isinstance(target, str) and is_url(target):
        where, params = _where(since, point, work_item)
        yield from records(read_pg(target, where, params), shown(target), problems)
        return
    path = Path(target)
    with _reading(path) as r:
        if r is None:
            raise _no_log(path)
        where, params = _where(since, point, work_item)
        cur = r.conn.execute(f"SELECT {r.columns} FROM decision_log{where} ORDER BY id",
                             params)
        yield from records(cur, str(path), problems)


def item_stats(target: Path | str) -> dict[str, ItemStats]:
    """Per work item: points recorded, refusals, the last point fired, the hosts that fired."""
    with _reading(target) as r:
        if r is None:
            return {}
        if not r.current:
            return _item_stats_of_records(r)
        rows = r.rows("SELECT work_item, count(*), sum(refused), max(id) FROM decision_log "
                      "GROUP BY work_item")
        last = {int(x[0]): (str(x[1]), float(x[2])) for x in r.rows(
            "SELECT id, point, at FROM decision_log WHERE id IN "
            "(SELECT max(id) FROM decision_log GROUP BY work_item)")}
        hosts: dict[str, list[str]] = {}
        for ref, host in r.rows("SELECT DISTINCT work_item, host FROM decision_log "
                                "WHERE host <> '' ORDER BY 1, 2"):
            hosts.setdefault(str(ref), []).append(str(host))
    return {str(ref): ItemStats(int(n), int(refused or 0), *last.get(int(top), ("", 0.0)),
                                int(top), tuple(hosts.get(str(ref), ())))
            for ref, n, refused, top in rows}


def _item_stats_of_records(r: _Reading) -> dict[str, ItemStats]:
    out: dict[str, ItemStats] = {}
    for row in r.rows(f"SELECT {r.columns} FROM decision_log ORDER BY id"):
        rec = _point(row)
        ref = str(row[3])
        was = out.get(ref) or ItemStats(0, 0, "", 0.0, 0)
        out[ref] = ItemStats(was.points + 1, was.refusals + _refused(rec), str(row[2]),
                             float(row[1]), int(row[0]))
    return out


def points_of(target: Path | str, ref: str, *, offset: int, limit: int
              ) -> tuple[int, list[Recorded]]:
    """(how many points `ref` has, one page of them in firing order)."""
    with _reading(target) as r:
        if r is None:
            return 0, []
        total = int(r.rows("SELECT count(*) FROM decision_log WHERE work_item=?",
                           (ref,))[0][0])
        rows = r.rows(f"SELECT {r.columns} FROM decision_log WHERE work_item=? ORDER BY id "
                      "LIMIT ? OFFSET ?", (ref, limit, offset))
    return total, [p for p in map(_point, rows) if p is not None]


def point(target: Path | str, point_id: int) -> Recorded | None:
    with _reading(target) as r:
        if r is None:
            return None
        rows = r.rows(f"SELECT {r.columns} FROM decision_log WHERE id=?", (point_id,))
    return _point(rows[0]) if rows else None


def inputs_of(target: Path | str, ref: str) -> list[Recorded]:
    """The input_received points of `ref` (at most the last 2,000), in firing order."""
    with _reading(target) as r:
        if r is None:
            return []
        rows = r.rows(f"SELECT * FROM (SELECT {r.columns} FROM decision_log WHERE "
                      "work_item=? AND point='input_received' ORDER BY id DESC LIMIT 2000) "
                      "AS last ORDER BY id", (ref,))
    return [p for p in map(_point, rows) if p is not None]


def rule_hits(target: Path | str, since: float, until: float, buckets: int,
              ) -> dict[tuple[str, str], dict[str, Any]]:
    """(hook, rule) → {"enforce": n, "audit": n, "buckets": [n…], "last_id", "last_at"} for
    every rule that matched between `since` and `until` (the `rules` column, read through
    its index; from each record for a table without one)."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    width = max((until - since) / buckets, 1e-9)
    with _reading(target) as r:
        if r is None:
            return out
        if r.current and r.pg:  # summed by the database: 100,000 points in a fraction of 1 s
            return _pg_rule_hits(r, since, until, buckets, width)
        if r.current:  # points with the same rules matched, summed by bucket in SQLite
            return _sum_hits(r.rows(
                "SELECT rules, min(CAST((at - ?) / ? AS INTEGER), ?), count(*), max(id), "
                "max(at) FROM decision_log WHERE at >= ? AND at <= ? AND rules <> '' "
                "GROUP BY 1, 2", (since, width, buckets - 1, since, until)), buckets)
        else:
            found = []
            for row in r.rows(f"SELECT {r.columns} FROM decision_log WHERE at >= ? AND "
                              "at <= ?", (since, until)):
                rec = _point(row)
                if rec is not None:
                    found.append((rec.id, rec.at, rules_text(rec.steps)))
    for row_id, at, text in found:
        bucket = min(int((float(at) - since) / width), buckets - 1)
        for hook, rule, mode in rules_of(str(text)):
            entry = out.get((hook, rule))
            if entry is None:
                entry = out[(hook, rule)] = {"enforce": 0, "audit": 0, "buckets": [0] * buckets,
                                             "last_id": 0, "last_at": 0.0}
            entry[mode] += 1
            entry["buckets"][bucket] += 1
            if float(at) >= entry["last_at"]:
                entry["last_id"], entry["last_at"] = int(row_id), float(at)
    return out


def _pg_rule_hits(r: _Reading, since: float, until: float, buckets: int, width: float
                  ) -> dict[tuple[str, str], dict[str, Any]]:
    """`rule_hits` on PostgreSQL: each line of the `rules` column counted by the server."""
    rows = r.rows(
        "SELECT line, LEAST(CAST(floor((at - ?) / ?) AS INTEGER), ?) AS bucket, count(*) AS n, "
        "max(id) AS last_id, max(at) AS last_at FROM decision_log, "
        "unnest(string_to_array(rules, E'\\n')) AS line "
        "WHERE at >= ? AND at <= ? AND rules <> '' GROUP BY 1, 2",
        (since, width, buckets - 1, since, until))
    return _sum_hits(rows, buckets)


def _sum_hits(rows: list[tuple[Any, ...]], buckets: int) -> dict[tuple[str, str], dict[str, Any]]:
    """(rules text, bucket, points, last id, last time) rows summed by (hook, rule)."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for text, bucket, n, last_id, last_at in rows:
        for hook, rule, mode in rules_of(str(text)):
            entry = out.get((hook, rule))
            if entry is None:
                entry = out[(hook, rule)] = {"enforce": 0, "audit": 0, "buckets": [0] * buckets,
                                             "last_id": 0, "last_at": 0.0}
            entry[mode] += int(n)
            entry["buckets"][int(bucket)] += int(n)
            if float(last_at) >= entry["last_at"]:
                entry["last_id"], entry["last_at"] = int(last_id), float(last_at)
    return out


def recent(target: Path | str, *, offset: int, limit: int) -> tuple[int, list[Recorded]]:
    """(how many points the log holds, one page of them, newest first)."""
    with _reading(target) as r:
        if r is None:
            return 0, []
        total = int(r.rows("SELECT count(*) FROM decision_log")[0][0])
        rows = r.rows(f"SELECT {r.columns} FROM decision_log ORDER BY id DESC LIMIT ? "
                      "OFFSET ?", (limit, offset))
    return total, [p for p in map(_point, rows) if p is not None]


def keys_between(target: Path | str, low: float, high: float) -> set[tuple[float, str, str]]:
    """(at, point, work_item) of every row recorded from `low` to `high`."""
    with _reading(target) as r:
        if r is None:
            return set()
        return {(float(a), str(p), str(w)) for a, p, w in r.rows(
            "SELECT at, point, work_item FROM decision_log WHERE at >= ? AND at <= ?",
            (low, high))}
