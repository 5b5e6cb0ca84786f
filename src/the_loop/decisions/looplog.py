"""The decision log: every fired point's whole context, final decisions and who changed what.

One row per fired point in the `decision_log` table of `<stateDir>/loop.db` (created here, not
in db.py's schema): the context as it entered the chain (every fact and every decision's
incoming value, nothing shortened), each hook's step (its kind as the executor registry
names it — local, remote or policy, `unknown` for an executor of no registered kind —,
status, the decisions it changed (`replaced` names a text it replaced whole rather than
edited around: what a redaction does, so `--write-cases` never copies the original), the
policy rules that applied and the audit rules that matched, its error), and the final
decisions. Secrets are replaced by the event log's rules (`EventLog.secrets_in`) before the
row is written. Rows older than `decisionLog.keepDays` are
deleted by one indexed DELETE, at most once an hour per process. A write that fails is
recorded as `decisions.failed` and the loop goes on. `read_points` reads the rows back for
`the-loop policy replay`.
"""

from __future__ import annotations

import json
import sqlite3
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from the_loop.decisions.encoding import context_json as context_json
from the_loop.decisions.encoding import encode_record
from the_loop.decisions.stores import TABLE as TABLE
from the_loop.decisions.stores import PostgresStore, item_key, read_pg
from the_loop.errors import LoopError
from the_loop.events import EventLog, redact
from the_loop.hooks.engine.chain import Chain, Outcome
from the_loop.hooks.engine.points import SPECS, Context
from the_loop.hooks.executors import registry
from the_loop.runtime.pointmetrics import kept

__all__ = ["TABLE", "DecisionLog", "Recorded", "count_points", "read_points"]


#: The layout of `record` (a JSON object); a reader refuses a version it does not know.
#: Version 1 kept every changed text and every final decision in full; `expand` reads both.
VERSION = 2
READS = (1, 2)
PRUNE_EVERY = 3600.0  # seconds between two prunes in one process
#: What json.loads runs, without its layers of Python (set in JSONDecoder.__init__; typeshed
#: does not list it).
_SCAN: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
_DECISIONS: dict[str, tuple[str, ...]] = {
    point: tuple(d.name for d in spec.decisions) for point, spec in SPECS.items()
}


def entry_of(ctx: Context, outcome: Outcome, kinds: dict[str, str]) -> dict[str, Any]:
    """The `record` of one fired point (before redaction).

    Stored compactly (`expand` undoes it): a text a hook edited around its incoming value is
    kept as that edit (`edits`: [before, after]), not as a second copy; `decisions` holds only
    the final values that the walk from the context through each step's changes does not
    already give (a required hook's failure-refusal, say).
    """
    names = _DECISIONS[ctx.POINT]
    current = {name: ctx.__dict__[name] for name in names}
    steps: list[dict[str, Any]] = []
    for s in outcome.steps:
        step: dict[str, Any] = {"hook": s.hook, "kind": kinds.get(s.hook, registry.UNKNOWN),
                                "status": s.status}
        if s.changed:
            changed: dict[str, Any] = {}
            edits: dict[str, list[str]] = {}
            replaced: list[str] = []
            for key, value in s.changed.items():
                was = current.get(key)
                if isinstance(value, str) and isinstance(was, str) and was and (
                        at := value.find(was)) >= 0:
                    edits[key] = [value[:at], value[at + len(was):]]
                else:
                    changed[key] = value
                    if isinstance(value, str) and isinstance(was, str) and was:
                        replaced.append(key)  # the text it held is gone: maybe a redaction
                current[key] = value
            if changed:
                step["changed"] = changed
            if replaced:
                step["replaced"] = replaced
            if edits:
                step["edits"] = edits
        if s.error:
            step["error"] = s.error
        if s.dropped:
            step["dropped"] = s.dropped
        for key in ("rules", "audit"):
            if s.detail.get(key):
                step[key] = list(s.detail[key])
        steps.append(step)
    final = outcome.context.__dict__
    return {
        "v": VERSION, "context": context_json(ctx), "steps": steps,
        "decisions": {name: final[name] for name in names if final[name] != current[name]},
        "refused_by": outcome.refused_by,
    }


def expand(point: str, rec: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A stored record's steps with every change in full, and its final decisions."""
    context = rec["context"]
    current: dict[str, Any] = {}
    for name in _DECISIONS[point]:  # a loop, not a comprehension: one frame less per record
        current[name] = context[name]
    steps: list[dict[str, Any]] = rec["steps"]
    for step in steps:
        edits = step.pop("edits", None)
        if edits:
            changed = step.setdefault("changed", {})
            for key, (before, after) in edits.items():
                changed[key] = before + current[key] + after
        if "changed" in step:
            current.update(step["changed"])
    current.update(rec["decisions"])
    return steps, current


class DecisionLog:
    """Writes one row per fired point into loop.db (the table is made on first use).

    It has its own connection to the file (opened on the first write), with
    `synchronous=NORMAL`: in WAL mode a commit is then not flushed to disk on its own — an
    operating-system crash may lose the last rows, never corrupt the file — so the log costs a
    point microseconds, not a disk flush. The loop's own state keeps its connection.
    """

    def __init__(self, path: Path | sqlite3.Connection, *, keep_days: float,
                 log: EventLog, database: str = "") -> None:
        self.path = path
        #: The shared database (a postgresql:// URL): every host writes each point there too,
        #: so replay sees them all; '' keeps them in this host's loop.db only.
        self.shared: PostgresStore | None = PostgresStore(database) if database else None
        if self.shared is not None:  # its connection closes with this log, as loop.db's does
            weakref.finalize(self, self.shared.close)
        self._conn: sqlite3.Connection | None = path if isinstance(
            path, sqlite3.Connection) else None
        self.keep_seconds = keep_days * 86_400.0
        self.log = log
        self._ready = False
        self._pruned = 0.0
        self._chain: Chain | None = None
        self._kinds: dict[str, str] = {}

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None:
            assert isinstance(self.path, Path)
            conn = sqlite3.connect(str(self.path), timeout=30.0, isolation_level=None,
                                   check_same_thread=False)
            weakref.finalize(self, conn.close)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA busy_timeout=30000")
            conn.execute("PRAGMA synchronous=NORMAL")
            self._conn = conn
        return self._conn

    def close(self) -> None:
        if self.shared is not None:
            self.shared.close()
        if self._conn is not None and not isinstance(self.path, sqlite3.Connection):
            self._conn.close()
            self._conn = None

    def record(self, ctx: Context, outcome: Outcome, chain: Chain) -> None:
        """Store one fired point; a failure is recorded as `decisions.failed`, never raised."""
        try:
            self._write(ctx, outcome, chain)
        except (sqlite3.Error, ValueError, TypeError, LoopError) as exc:
            self._failed(ctx, exc)
        except Exception as exc:  # psycopg's errors, when the log is on PostgreSQL
            if self.shared is None or type(exc).__module__.split(".")[0] != "psycopg":
                raise
            self._failed(ctx, exc)

    def _failed(self, ctx: Context, exc: BaseException) -> None:
        counted = kept()
        if counted is not None:
            counted.log_failed.inc()
        self.log.emit("decisions.failed", point=ctx.POINT, work_item=ctx.work_item.ref,
                      error=f"{type(exc).__name__}: {exc}")

    def _write(self, ctx: Context, outcome: Outcome, chain: Chain) -> None:
        if chain is not self._chain:
            self._chain = chain
            self._kinds = {link.name: registry.logged_name(link.executor) for link in chain.links}
        entry = entry_of(ctx, outcome, self._kinds)
        line = encode_record(entry)
        found = self.log.secrets_in(line)
        if found:
            line = encode_record(redact(entry, found))
        now = time.time()
        if not self._ready:
            self.conn.executescript(TABLE)
            self._ready = True
        key = item_key(ctx.work_item.ref)  # as a served log keys it: what replay filters by
        self.conn.execute(
            "INSERT INTO decision_log(at, point, work_item, record) VALUES (?, ?, ?, ?)",
            (now, ctx.POINT, key, line),
        )
        if self.shared is not None:  # the host's own copy above is what its console reads
            self.shared.write([(now, ctx.POINT, key, line)])
        if now - self._pruned >= PRUNE_EVERY:
            self.prune(now)

    def prune(self, now: float | None = None) -> int:
        """Delete the rows older than keepDays; returns how many went."""
        now = time.time() if now is None else now
        if not self._ready:
            self.conn.executescript(TABLE)
            self._ready = True
        self._pruned = now
        cur = self.conn.execute("DELETE FROM decision_log WHERE at < ?",
                                (now - self.keep_seconds,))
        return int(cur.rowcount)


@dataclass(slots=True)
class Recorded:
    """One fired point as the log holds it."""

    id: int
    at: float
    point: str
    work_item: str
    context: dict[str, Any]
    steps: list[dict[str, Any]]
    decisions: dict[str, Any]
    refused_by: str = ""
    masked: list[str] = field(default_factory=list)  # values the log did not keep
    revision: str = ""  # what answered it, where the log says (a hook server's records)


def _decode(text: Any) -> Any:
    """`json.loads(text)`: the C scanner alone when the text is one bare JSON value (what this
    version writes); anything else — whitespace around it, bytes, an error — goes through
    `json.loads` itself, so the value or the error is json.loads's own."""
    if type(text) is str:
        try:
            value, end = _SCAN(text, 0)
        except (StopIteration, ValueError):
            pass
        else:
            if end == len(text):
                return value
    return json.loads(text)


def _connect(path: Path) -> sqlite3.Connection:
    if not path.is_file():
        raise LoopError(f"no state database at {path}: the decision log is written there as "
                        "the loop fires points; run some work first (or check --config)")
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30.0)
    found = conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND "
                         "name='decision_log'").fetchone()
    if found is None:
        conn.close()
        raise LoopError(f"{path} has no decision log yet: points are recorded as the loop "
                        "fires them; run some work first")
    return conn


def _where(since: float | None, point: str, work_item: str) -> tuple[str, list[Any]]:
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
            clauses.append("(work_item = ? OR substr(work_item, -length(?)) = ?)")
            params += [work_item, tail, tail]
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", params


def count_points(path: Path, *, since: float | None = None, point: str = "",
                 work_item: str = "") -> int:
    """How many recorded points match the filters."""
    conn = _connect(path)
    try:
        where, params = _where(since, point, work_item)
        return int(conn.execute(f"SELECT count(*) FROM decision_log{where}", params)
                   .fetchone()[0])
    finally:
        conn.close()


def read_points(path: Path | str, *, since: float | None = None, point: str = "",
                work_item: str = "", problems: list[str] | None = None) -> Iterator[Recorded]:
    """The recorded points matching the filters, oldest first (streamed, not all in memory).

    `path` is loop.db, a hook server's SQLite log, or a `postgresql://` URL (a hook server's
    log, or a loop's shared database); one layout for all three.
    Raises `LoopError` when there is no log. A row this version cannot read (another
    layout, or not a record at all) raises `LoopError` too — or, with `problems`, is named
    there and skipped.
    """
    if isinstance(path, str):
        yield from records(read_pg(path, since=since, point=point, work_item=work_item), path,
                           problems)
        return
    conn = _connect(path)
    try:
        where, params = _where(since, point, work_item)
        rows = conn.execute(
            f"SELECT id, at, point, work_item, record FROM decision_log{where} ORDER BY id",
            params,
        )
        yield from records(rows, str(path), problems)
    finally:
        conn.close()


def records(rows: Iterable[tuple[int, float, str, str, str]], source: str,
            problems: list[str] | None) -> Iterator[Recorded]:
    """Rows of a decision log as `Recorded` points (see `read_points` for `problems`)."""
    decode = _decode
    for row_id, at, pt, ref, text in rows:
        try:
            rec = decode(text)
            if rec.get("v") not in READS:
                raise ValueError(f"record version {rec.get('v')!r}, expected {VERSION}")
            steps, decisions = expand(pt, rec)
            yield Recorded(row_id, at, pt, ref, rec["context"], steps, decisions,
                           rec.get("refused_by", ""), list(rec.get("masked") or ()),
                           str(rec.get("revision") or ""))
        except (ValueError, KeyError, AttributeError, TypeError) as exc:
            what = exc if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}"
            message = (f"{source}: decision log row {row_id} cannot be read ({what}); "
                       "it was not written by this version of the-loop")
            if problems is None:
                raise LoopError(message) from None
            problems.append(message)
