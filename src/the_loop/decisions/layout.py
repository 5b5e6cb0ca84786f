"""The decision record's layout: its table, its version, and a stored row read back.

One `decision_log` table holds every fired point, the loop's and a hook server's alike, in
SQLite or PostgreSQL: `id, at, point, work_item, record` (the record a JSON object of
version `VERSION`), and three columns kept beside it so a reader need not open the record:
`host` (the host id that fired the point; '' for a served call), `rules` (each rule that
matched, one `hook<TAB>rule<TAB>mode` line each, mode `e` enforce or `a` audit) and `refused`
(1 when the point was refused). `COLUMNS` says how a table made before they existed gains
them; `records` turns stored rows into `Recorded` points, skipping (or refusing) a row it
cannot read.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from the_loop.decisions.encoding import context_json
from the_loop.errors import LoopError
from the_loop.hooks.engine.dialect import read_params
from the_loop.hooks.engine.points import SPECS

#: The layout of `record`; a reader refuses a version it does not know. Version 1 kept
#: every changed text and every final decision in full; `expand` reads both. Version 3
#: lets a served call's record keep the request's own bytes (`request`: the JSON-RPC
#: request object as received) in place of its `context`, which a reader rebuilds from
#: them through the dialect reader, as the server did; and a served executor's one step
#: as its `hook` and `kind` (`served_step`). Every other field is version 2's.
VERSION = 3
READS = (1, 2, 3)

#: `id` is the rowid (no AUTOINCREMENT: its bookkeeping cost a served record a sixth of its
#: insert); ids grow with each row, as replay's order needs, since pruning removes the
#: oldest rows, never the newest. The partial index on `at` over rows with rules is what
#: the rules page reads (100,000 points in well under a second).
TABLE = """
CREATE TABLE IF NOT EXISTS decision_log(
    id INTEGER PRIMARY KEY, at REAL NOT NULL, point TEXT NOT NULL,
    work_item TEXT NOT NULL, record TEXT NOT NULL,
    host TEXT NOT NULL DEFAULT '', rules TEXT NOT NULL DEFAULT '',
    refused INTEGER NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS decision_log_at ON decision_log(at);
CREATE INDEX IF NOT EXISTS decision_log_item ON decision_log(work_item, at)
"""
#: Made once the columns above exist (a table of an earlier version gains them first).
INDEXES = """
CREATE INDEX IF NOT EXISTS decision_log_rules ON decision_log(at, id, rules) WHERE rules <> ''
"""
#: Columns added after the table was first released: name → definition.
COLUMNS = {"host": "TEXT NOT NULL DEFAULT ''", "rules": "TEXT NOT NULL DEFAULT ''",
           "refused": "INTEGER NOT NULL DEFAULT 0"}
#: One row as written: (at, point, work_item, record text, host, rules, refused).
Row = tuple[float, str, str, str, str, str, int]
FIELDS = ("at", "point", "work_item", "record", "host", "rules", "refused")
#: Characters of an item ref the item column keeps as they are. PostgreSQL's index on the
#: column takes at most 2,704 bytes a row: one call with a longer ref (a body may hold 1 MiB)
#: cost its whole batch, every other caller's records with it.
ITEM_KEY_MAX = 512
#: What json.loads runs, without its layers of Python (set in JSONDecoder.__init__; typeshed
#: does not list it).
_SCAN: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
DECISIONS: dict[str, tuple[str, ...]] = {
    point: tuple(d.name for d in spec.decisions) for point, spec in SPECS.items()
}


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


def _clean(name: Any) -> str:
    return str(name).replace("\t", " ").replace("\n", " ").replace("\0", "\ufffd")


def step_of(hook: str, kind: str, status: str, changed: Mapping[str, Any], error: str = "",
            dropped: Iterable[str] = (), detail: Mapping[str, Any] | None = None
            ) -> dict[str, Any]:
    """One hook's step as a record holds it (changes in full, fresh copies): its hook, kind,
    status, the decisions it changed, its error, the fields it tried to change and could
    not, and the policy rules that applied and the audit rules that matched."""
    out: dict[str, Any] = {"hook": hook, "kind": kind, "status": status}
    if changed:
        out["changed"] = dict(changed)
    if error:
        out["error"] = error
    dropped = list(dropped)
    if dropped:
        out["dropped"] = dropped
    if detail:
        for key in ("rules", "audit"):
            if detail.get(key):
                out[key] = list(detail[key])
    return out


def step_status(error: str, changed: Mapping[str, Any]) -> str:
    """A served executor's step status: failed, changed or unchanged."""
    return "failed" if error else "changed" if changed else "unchanged"


def served_step(rec: dict[str, Any]) -> dict[str, Any]:
    """The one step of a version-3 served record that keeps it as `hook` and `kind` (with
    its `decisions`, `error`, `rules` and `audit`), as `step_of` builds it."""
    decisions = rec["decisions"]
    error = rec.get("error", "")
    if not isinstance(decisions, dict) or not isinstance(error, str):
        raise ValueError("its decisions or error are not of the record's layout")
    return step_of(str(rec["hook"]), str(rec["kind"]), step_status(error, decisions),
                   decisions, error, (), rec)


def _from_request(point: str, rec: dict[str, Any]) -> None:
    """Give a version-3 record that keeps the request's bytes its `context` (read from them
    by the dialect reader, as the server read them) and its `steps`."""
    request = rec.pop("request")
    if not isinstance(request, dict):
        raise ValueError("its request is not a JSON-RPC request object")
    ctx, _ignored = read_params(point, request.get("params", {}))
    rec["context"] = context_json(ctx)
    if "steps" not in rec:
        rec["steps"] = [served_step(rec)]


def rules_text(steps: Iterable[dict[str, Any]]) -> str:
    """The `rules` column of a record whose steps are `steps`."""
    lines = []
    for step in steps:
        hook = _clean(step.get("hook", ""))
        for key, mode in (("rules", "e"), ("audit", "a")):
            for rule in step.get(key) or ():
                lines.append(f"{hook}\t{_clean(rule)}\t{mode}")
    return "\n".join(lines)


def rules_of(text: str) -> Iterator[tuple[str, str, str]]:
    """(hook, rule, `enforce`|`audit`) for each line of a `rules` column."""
    for line in text.split("\n"):
        hook, _, rest = line.partition("\t")
        rule, _, mode = rest.partition("\t")
        if rule:
            yield hook, rule, "audit" if mode == "a" else "enforce"


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
    host: str = ""  # the host id that fired it ('' for a served call)
    input: int = 0  # the input's own id (a comment's) at input_received, when the loop fired it
    revision: str = ""  # what answered it, where the log says (a hook server's records)


def decode(text: Any) -> Any:
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


def expand(point: str, rec: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A stored record's steps with every change in full, and its final decisions."""
    context = rec["context"]
    current: dict[str, Any] = {}
    for name in DECISIONS[point]:  # a loop, not a comprehension: one frame less per record
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


def _masked(rec: dict[str, Any]) -> list[str]:
    masked = rec.get("masked") or []
    if not isinstance(masked, list) or not all(isinstance(m, str) for m in masked):
        raise ValueError("its `masked` is not a list of texts")
    return masked


def recorded(row: tuple[Any, ...]) -> Recorded:
    """One stored row (id, at, point, work_item, record[, host]) as a point; raises
    ValueError, KeyError, AttributeError, TypeError or RecursionError when it is not one."""
    row_id, at, pt, ref, text = row[:5]
    rec = decode(text)
    if rec.get("v") not in READS:
        raise ValueError(f"record version {rec.get('v')!r}, expected {VERSION}")
    if "request" in rec:
        _from_request(pt, rec)
    if not isinstance(rec["context"], dict) or not isinstance(rec["steps"], list) \
            or not all(isinstance(s, dict) for s in rec["steps"]):
        raise ValueError("its context or steps are not of the record's layout")
    steps, decisions = expand(pt, rec)
    refused_by = rec.get("refused_by", "")
    given = rec.get("input", 0)
    return Recorded(row_id, at, pt, ref, rec["context"], steps, decisions,
                    refused_by if isinstance(refused_by, str) else "", _masked(rec),
                    str(row[5]) if len(row) > 5 else "",
                    given if type(given) is int else 0, str(rec.get("revision") or ""))


def records(rows: Iterable[tuple[Any, ...]], source: str,
            problems: list[str] | None) -> Iterator[Recorded]:
    """Rows of a decision log as `Recorded` points. A row this version cannot read (another
    layout, not a record at all, nesting too deep to decode) raises `LoopError` — or, with
    `problems`, is named there and skipped."""
    for row in rows:
        try:
            yield recorded(row)
        except (ValueError, KeyError, AttributeError, TypeError, RecursionError) as exc:
            what = exc if isinstance(exc, ValueError) else (
                "nested too deep to read" if isinstance(exc, RecursionError)
                else f"{type(exc).__name__}: {exc}")
            message = (f"{source}: decision log row {row[0]} cannot be read ({what}); "
                       "it was not written by this version of the-loop")
            if problems is None:
                raise LoopError(message) from None
            problems.append(message)


__all__ = ["COLUMNS", "DECISIONS", "FIELDS", "INDEXES", "READS", "TABLE", "VERSION",
           "Recorded", "Row", "decode", "expand", "item_key", "recorded", "records",
           "rules_of", "rules_text", "served_step", "step_of", "step_status"]
