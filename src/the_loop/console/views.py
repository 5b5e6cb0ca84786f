"""What each console page shows, as plain values for its template (no markup made here).

Work items (filtered, paginated), one item's timeline (a page of its points on a time axis,
each hook's outcome with a before/after of every decision it changed, the rules that matched,
its inputs and sessions), one point, and every declared policy rule's matches over a period.
"""

from __future__ import annotations

import json
import math
import re
import time
import urllib.parse
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from the_loop.console import charts
from the_loop.decisions import reads
from the_loop.decisions.layout import Recorded
from the_loop.errors import LoopError
from the_loop.hooks.engine.chain import Link
from the_loop.hooks.engine.points import POINTS, SPECS
from the_loop.hooks.executors.policy import PolicyExecutor
from the_loop.hooks.policy.rules import Policy
from the_loop.hooks.policy.testing import run_tests
from the_loop.runtime.service import LOOP_AUTHOR, Loop
from the_loop.runtime.tracker.base import Item

ITEMS_PER_PAGE = 50
POINTS_PER_PAGE = 100
INPUTS_PER_PAGE = 50
TEXT_LIMIT = 2000  # characters of one side of a diff shown before it is cut
RULE_PERIODS = {"1d": 86_400, "7d": 7 * 86_400, "30d": 30 * 86_400}
BUCKETS = 30
#: The hidden marker a loop comment ends with (`runtime.service.marker`).
MARKER = re.compile(r"\s*<!-- the-loop:[^>]*-->\s*$")
_DECISIONS = {point: tuple(d.name for d in spec.decisions) for point, spec in SPECS.items()}
#: The facts a timeline shows beside each point (when the point has them).
_FACTS = ("actor", "source", "kind", "node", "from_phase", "to_phase", "session_id", "state",
          "control", "respawn", "outcome")


def item_link(ref: str) -> str:
    return "/console/items/" + urllib.parse.quote(ref, safe="")


def page_of(raw: str, pages: int) -> int:
    n = int(raw) if raw.isascii() and raw.isdigit() and len(raw) < 9 else 1
    return min(max(n, 1), max(pages, 1))


def age(seconds: float) -> str:
    if seconds < 120:
        return f"{int(seconds)} s"
    if seconds < 7200:
        return f"{int(seconds // 60)} min"
    if seconds < 172_800:
        return f"{int(seconds // 3600)} h"
    return f"{int(seconds // 86_400)} d"


def item_row(loop: Loop, item: Item, stats: dict[str, reads.ItemStats],
             now: float) -> dict[str, Any]:
    """One work item as the items page lists it: its tracker state, its loop state and its
    points' counts."""
    work = loop.work(item.ref) or {}
    st = stats.get(item.ref) or reads.ItemStats(0, 0, "", 0.0, 0)
    return {
        "ref": item.ref, "link": item_link(item.ref), "title": item.title,
        "tracker_state": item.state, "state": work.get("state", "not armed"),
        "phase": work.get("node", ""), "labels": item.labels,
        "last_point": st.last_point, "last_id": st.last_id,
        "last_at": charts.clock(st.last_at) if st.last_id else "",
        "refusals": st.refusals, "points": st.points, "hosts": list(st.hosts),
        "age": age(now - item.created) if item.created else ""}


def wanted(row: dict[str, Any], query: dict[str, str]) -> bool:
    """Whether a row passes the items page's filters (state, label, text, refused)."""
    want_state, want_label = query.get("state", ""), query.get("label", "")
    text, refused = query.get("q", "").casefold(), query.get("refused", "") == "1"
    return bool((not want_state or row["state"] == want_state)
                and (not want_label or want_label in row["labels"])
                and (not text or text in row["title"].casefold()
                     or text in row["ref"].casefold())
                and (not refused or row["refusals"]))


def items(loop: Loop, query: dict[str, str]) -> dict[str, Any]:
    stats = reads.item_stats(loop.settings.db_target)
    now = time.time()
    rows = [item_row(loop, item, stats, now) for item in loop.tracker.items()]
    states = sorted({r["state"] for r in rows})
    labels = sorted({label for r in rows for label in r["labels"]})
    rows = [r for r in rows if wanted(r, query)]
    pages = max(math.ceil(len(rows) / ITEMS_PER_PAGE), 1)
    page = page_of(query.get("page", ""), pages)
    keep = {k: v for k, v in query.items() if k in ("state", "label", "q", "refused") and v}
    return {"rows": rows[(page - 1) * ITEMS_PER_PAGE: page * ITEMS_PER_PAGE],
            "total": len(rows), "page": page, "pages": pages, "states": states,
            "labels": labels, "query_text": urllib.parse.urlencode(keep),
            "query": {k: query.get(k, "") for k in ("state", "label", "q", "refused")}}


def _cut(text: str) -> str:
    if len(text) <= TEXT_LIMIT:
        return text
    half = TEXT_LIMIT // 2
    return f"{text[:half]} … ({len(text) - TEXT_LIMIT} characters not shown) … {text[-half:]}"


def diff(name: str, before: Any, after: Any) -> dict[str, Any]:
    """One decision's change: for texts the common head and tail and what differs between."""
    if isinstance(before, str) and isinstance(after, str):
        head = 0
        while head < min(len(before), len(after)) and before[head] == after[head]:
            head += 1
        tail = 0
        while (tail < min(len(before), len(after)) - head
               and before[-1 - tail] == after[-1 - tail]):
            tail += 1
        return {"name": name, "text": True, "head": _cut(before[:head]),
                "old": _cut(before[head:len(before) - tail]),
                "new": _cut(after[head:len(after) - tail]),
                "tail": _cut(before[len(before) - tail:]) if tail else ""}
    return {"name": name, "text": False, "old": _cut(json.dumps(before, ensure_ascii=False)),
            "new": _cut(json.dumps(after, ensure_ascii=False))}


def refused(rec: Recorded) -> bool:
    return bool(rec.refused_by) or rec.decisions.get("proceed") is False


def shown(rec: Recorded) -> dict[str, Any]:
    """One point as the timeline and the point page show it."""
    current = {name: rec.context.get(name) for name in _DECISIONS.get(rec.point, ())}
    hooks = []
    for step in rec.steps:
        changed = step.get("changed") or {}
        outcome = ("failed" if step.get("status") == "failed" else
                   "refused" if changed.get("proceed") is False else
                   "changed" if changed else "no change")
        hooks.append({"hook": str(step.get("hook", "")), "kind": str(step.get("kind", "")),
                      "outcome": outcome, "error": str(step.get("error", "")),
                      "diffs": [diff(k, current.get(k), v) for k, v in changed.items()],
                      "rules": [str(r) for r in step.get("rules", [])],
                      "audit": [str(r) for r in step.get("audit", [])],
                      "dropped": step.get("dropped")})
        current.update(changed)
    facts = {k: rec.context[k] for k in _FACTS if k in rec.context and rec.context[k] != ""}
    text = rec.context.get("text") or rec.context.get("question")
    return {"id": rec.id, "point": rec.point, "time": charts.clock(rec.at), "host": rec.host,
            "work_item": rec.work_item, "link": item_link(rec.work_item),
            "phase": charts.phase_of(rec), "facts": facts,
            "text": _cut(text) if isinstance(text, str) else "",
            "hooks": hooks, "refused": refused(rec), "refused_by": rec.refused_by,
            "reason": str(rec.decisions.get("reason", "") or "")}


def timeline(loop: Loop, ref: str, query: dict[str, str]) -> dict[str, Any]:
    item = loop.tracker.get(ref)
    db = loop.settings.db_target
    total, _ = reads.points_of(db, item.ref, offset=0, limit=0)
    pages = max(math.ceil(total / POINTS_PER_PAGE), 1)
    page = page_of(query.get("page", ""), pages)
    _, recs = reads.points_of(db, item.ref, offset=(page - 1) * POINTS_PER_PAGE,
                              limit=POINTS_PER_PAGE)
    fired = [p for p in POINTS if any(r.point == p for r in recs)]
    work = loop.work(item.ref) or {}
    return {"item": {"ref": item.ref, "title": item.title, "state": item.state,
                     "labels": item.labels, "loop_state": work.get("state", "not armed"),
                     "phase": work.get("node", "")},
            "link": item_link(item.ref), "points": [shown(r) for r in recs],
            "axis": charts.axis(recs, {r.id for r in recs if refused(r)}),
            "fired": fired, "total": total, "page": page, "pages": pages,
            "refusals": sum(1 for r in recs if refused(r)),
            "hosts": sorted({r.host for r in recs if r.host}),
            **inputs(loop, item.ref, item.comments, query),
            "sessions": sessions(loop, item.ref)}


def fate(rec: Recorded | None) -> str:
    """What the loop did with one input, as its input_received point recorded it."""
    if rec is None:
        return "not an input to the loop (no input_received point)"
    if refused(rec):
        return f"refused by {rec.refused_by or 'a hook'}: {rec.decisions.get('reason')}"
    if any(s.get("changed", {}).get("text") is not None for s in rec.steps):
        return "delivered, its text changed by a hook"
    return "delivered as written"


def inputs(loop: Loop, ref: str, comments: list[Any], query: dict[str, str]) -> dict[str, Any]:
    """People's comments, newest page last, each with what the loop did with it (its
    input_received point, matched by the comment's own id); the loop's own comments apart,
    without their hidden markers."""
    people = [c for c in comments if c.author != LOOP_AUTHOR]
    pages = max(math.ceil(len(people) / INPUTS_PER_PAGE), 1)
    page = page_of(query.get("ipage", ""), pages)
    received = {r.input: r for r in reads.inputs_of(loop.settings.db_target, ref) if r.input}
    out = []
    for c in people[(page - 1) * INPUTS_PER_PAGE: page * INPUTS_PER_PAGE]:
        rec = received.get(c.id)
        out.append({"author": c.author, "source": c.source, "time": charts.clock(c.created),
                    "body": _cut(c.body), "fate": fate(rec), "point": rec.id if rec else 0,
                    "host": rec.host if rec else ""})
    own = [{"time": charts.clock(c.created), "body": _cut(MARKER.sub("", c.body).rstrip())}
           for c in comments if c.author == LOOP_AUTHOR]
    return {"inputs": out, "ipage": page, "ipages": pages, "loop_comments": own}


def sessions(loop: Loop, ref: str) -> list[dict[str, Any]]:
    out = []
    for s in loop.store.sessions_of(ref):
        end = ("running" if not s["exited"] else
               f"ended (exit {s['code']})" if s["code"] is not None else "ended")
        out.append({"id": s["id"], "node": s["node"], "harness": s["harness"],
                    "started": charts.clock(float(s["started"])), "end": end})
    return out


def one_point(db: Path | str, point_id: int) -> dict[str, Any]:
    """One recorded point of the decision log in `db` (any loop.db-shaped log)."""
    rec = reads.point(db, point_id)
    if rec is None:
        raise LoopError(f"no recorded point #{point_id} in the decision log")
    return {"p": shown(rec)}


def test_coverage(policy: Policy) -> tuple[dict[str, int], str]:
    """rule → how many of the folder's `policy test` cases match it, and a note when its
    tests cannot say (none written, or a test file that does not load)."""
    try:
        report = run_tests(policy.folder, policy=policy)
    except LoopError as exc:
        return {}, f"its tests could not run: {exc}"
    note = "; ".join(e.replace(str(policy.folder), f"{policy.folder.name}/")
                     for e in report.errors[:3])  # the folder's name, not the server's path
    return {name: counts[0] for name, counts in report.coverage.items()}, note


def rules(db: Path | str, links: Iterable[Link], query: dict[str, str]) -> dict[str, Any]:
    """Each rule of each policy hook in `links`, with its matches in the log in `db`."""
    period = query.get("since", "7d")
    period = period if period in RULE_PERIODS else "7d"
    until = time.time()
    since = until - RULE_PERIODS[period]
    hits = reads.rule_hits(db, since, until, BUCKETS)
    folders = []
    for link in links:
        if not isinstance(link.executor, PolicyExecutor):
            continue
        policy = link.executor.policy
        tests, tests_note = test_coverage(policy)
        rows: list[dict[str, Any]] = []
        for rule in policy.rules:
            h = hits.get((link.name, rule.name))
            rows.append({"name": rule.name, "file": Path(rule.file).name, "mode": rule.mode,
                         "points": list(rule.points), "description": rule.description,
                         "enforce": h["enforce"] if h else 0, "audit": h["audit"] if h else 0,
                         "chart": charts.bars(h["buckets"] if h else [0] * BUCKETS),
                         "last_id": h["last_id"] if h else 0,
                         "last_at": charts.clock(h["last_at"]) if h else "",
                         "tests": tests.get(rule.name)})
        folders.append({"hook": link.name, "folder": policy.folder.name, "rules": rows,
                        "tests_note": tests_note,
                        "never": [r["name"] for r in rows if not r["enforce"] + r["audit"]]})
    return {"folders": folders, "period": period, "periods": list(RULE_PERIODS),
            "since": charts.clock(since), "until": charts.clock(until)}
