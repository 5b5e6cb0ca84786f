"""The decision pages over a hook server's own log (`hooks serve --decision-log FILE`).

The operator lists the logs the console may read under `serve.console.servedLogs` (a page
names one by its position, never by a path); each shows its rules' matches over a period
(every rule of its policy folder when the entry names one, so the rules never matched are
listed), its points newest first, and each point as the timeline shows it.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from the_loop.console import charts, views
from the_loop.decisions import reads
from the_loop.decisions.stores import is_url
from the_loop.errors import LoopError
from the_loop.hooks.policy.rules import read_policy

POINTS_PER_PAGE = 100


def entry(served: list[dict[str, str]], raw: str) -> tuple[int, dict[str, str]]:
    """The listed log a page's number names; `LoopError` for any other."""
    if not (raw.isascii() and raw.isdigit() and int(raw) < len(served)):
        raise LoopError("no such served log; the console shows those listed under "
                        "serve.console.servedLogs")
    return int(raw), served[int(raw)]


def _rule_rows(log: Path | str, policy: str, period: str) -> dict[str, Any]:
    until = time.time()
    since = until - views.RULE_PERIODS[period]
    hits: dict[str, dict[str, Any]] = {}
    for (_hook, rule), one in reads.rule_hits(log, since, until, views.BUCKETS).items():
        got = hits.setdefault(rule, {"enforce": 0, "audit": 0, "last_id": 0, "last_at": 0.0,
                                     "buckets": [0] * views.BUCKETS})
        got["enforce"] += one["enforce"]
        got["audit"] += one["audit"]
        got["buckets"] = [a + b for a, b in zip(got["buckets"], one["buckets"], strict=True)]
        if one["last_at"] >= got["last_at"]:
            got["last_id"], got["last_at"] = one["last_id"], one["last_at"]
    declared: list[tuple[str, str, list[str], str]] = []
    tests: dict[str, int] = {}
    note = ""
    if policy:
        if not Path(policy).is_dir():
            raise LoopError("its policy folder is not there (serve.console.servedLogs); mend "
                            "the entry or create the folder")
        read = read_policy(Path(policy))
        declared = [(r.name, r.mode, list(r.points), r.description) for r in read.rules]
        tests, note = views.test_coverage(read)
    names = [d[0] for d in declared] + sorted(set(hits) - {d[0] for d in declared})
    about = {d[0]: d for d in declared}
    rows: list[dict[str, Any]] = []
    for name in names:
        h = hits.get(name)
        _, mode, points, description = about.get(name, (name, "", [], ""))
        rows.append({"name": name, "mode": mode or "(not in the folder)", "points": points,
                     "description": description, "enforce": h["enforce"] if h else 0,
                     "audit": h["audit"] if h else 0,
                     "chart": charts.bars(h["buckets"] if h else [0] * views.BUCKETS),
                     "last_id": h["last_id"] if h else 0,
                     "last_at": charts.clock(h["last_at"]) if h else "",
                     "tests": tests.get(name)})
    never = [r["name"] for r in rows if not r["enforce"] + r["audit"]]
    return {"rules": rows, "tests_note": note, "never": never,
            "since": charts.clock(since), "until": charts.clock(until)}


def log_page(served: list[dict[str, str]], raw: str, query: dict[str, str]) -> dict[str, Any]:
    n, e = entry(served, raw)
    log: Path | str = e["log"] if is_url(e["log"]) else Path(e["log"])
    if isinstance(log, Path) and not log.is_file():
        raise LoopError(f"{e['name']}: its log file is not there yet; a hook server writes it "
                        "once it answers a call (hooks serve --decision-log FILE)")
    period = query.get("since", "7d")
    period = period if period in views.RULE_PERIODS else "7d"
    total, _ = reads.recent(log, offset=0, limit=0)
    pages = max(math.ceil(total / POINTS_PER_PAGE), 1)
    page = views.page_of(query.get("page", ""), pages)
    _, recs = reads.recent(log, offset=(page - 1) * POINTS_PER_PAGE, limit=POINTS_PER_PAGE)
    points = [{"id": r.id, "time": charts.clock(r.at), "point": r.point,
               "work_item": r.work_item, "refused": views.refused(r)} for r in recs]
    return {"n": n, "name": e["name"], "period": period, "periods": list(views.RULE_PERIODS),
            "points": points, "total": total, "page": page, "pages": pages,
            **_rule_rows(log, e["policy"], period)}


def point_page(served: list[dict[str, str]], raw: str, point_id: int) -> dict[str, Any]:
    n, e = entry(served, raw)
    rec = reads.point(e["log"] if is_url(e["log"]) else Path(e["log"]), point_id)
    if rec is None:
        raise LoopError(f"no recorded point #{point_id} in {e['name']}'s log")
    return {"p": views.shown(rec), "back": (f"/console/served/{n}", f"{e['name']}'s log"),
            "base": f"/console/served/{n}/points/"}
