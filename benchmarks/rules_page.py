"""The console's rules page over 100,000 recorded points, SQLite and PostgreSQL (issue 32.6).

100,000 points are written into a real SQLite file and, with `--pg DSN`, a real PostgreSQL
database, through the decision log's own store (`stores.open_store(...).write`, in batches
of the writer's size): the rows of real served calls (`handle_request` on a 20-rule policy
folder, each call's row as `decisions.served` builds it with its context encoded, as the
loop's own records are), spread over the last 6.5 days, on
500 work items and two hosts; one point in three matched a rule (one or two, enforce or
audit), the others none.

Then the rules page is timed as the console renders it — `console.views.rules` (the 7-day
period, one policy hook of the folder) over `reads.rule_hits`, the code path the page runs,
not a copy of its SQL — three ways on the same rows, measured in the same run:

- **as written**: the table as this version makes it (the `rules` column and its partial
  covering index);
- **no index**: the same table with the index `decision_log_rules` dropped, so the same
  query scans the table;
- **earlier layout**: the table without the `rules`, `host` and `refused` columns, as the
  version before issue 32 made it, which the page reads by decoding every record in the
  period (what round 3 measured as "1.2 s scanning on SQLite").

Before each, the planner sees the table as it is (SQLite `ANALYZE`; PostgreSQL `VACUUM
ANALYZE`, what autovacuum does to a table of this size soon after it is written: without
it the index is no index-only scan, every entry a visit to the table). Each is the best of
3 (and the median) wall time; the earlier layout's, tens of seconds,
is one render. Target: as written under 1 s on both.

    .venv/bin/python benchmarks/rules_page.py [--pg postgresql:///DBNAME] [--points N]
"""

from __future__ import annotations

import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from the_loop.console import views
from the_loop.decisions.layout import Row
from the_loop.decisions.masking import Masker
from the_loop.decisions.served import ServedRecords
from the_loop.decisions.stores import open_store
from the_loop.hooks.engine.chain import Link
from the_loop.hooks.engine.points import POINTS
from the_loop.hooks.serving.hosted import policy_executor
from the_loop.hooks.serving.jsonrpc import CallRecord, handle_request

POINTS_WRITTEN = 100_000
BATCH = 500  # rows per write: the writer's batch
ITEMS = 500
SPAN = 6.5 * 86_400.0  # seconds the points are spread over (inside the page's 7 days)
REPEATS = 3
TARGET = 1.0  # seconds


def policy_folder(folder: Path) -> Path:
    """20 rules at session_spawn: rule-0..rule-9 enforce, audit-0..audit-9 audit; a call
    labelled `m-<i>` matches rule-i, `a-<i>` audit-i."""
    lines = ["rules:"]
    for i in range(10):
        lines += [f"  - name: rule-{i}", "    on: session_spawn",
                  f"    when: \"contains(labels, 'm-{i}')\"", "    set:",
                  f"      prompt_prefix: \"[{i}] \"",
                  f"  - name: audit-{i}", "    on: session_spawn", "    mode: audit",
                  f"    when: \"contains(labels, 'a-{i}')\"", "    set:",
                  "      proceed: false"]
    out = folder / "policy"
    out.mkdir(exist_ok=True)
    (out / "rules.yaml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


def _labels(n: int) -> list[str]:
    """One call in three matches: a rule, an audit rule, or both."""
    if n % 3:
        return ["loop"]
    kind = (n // 3) % 3
    return [[f"m-{n % 10}"], [f"a-{n % 10}"], [f"m-{n % 10}", f"a-{(n + 1) % 10}"]][kind]


def sample_rows(executor: Any) -> list[Row]:
    """Rows of 30 real calls (one of each label set), each record with its context encoded
    (as the loop's records and every record before layout 3 are: the earlier layout's
    reading then decodes what round 3 decoded, not a request read through the dialect)."""
    records = ServedRecords(Masker())
    rows: list[Row] = []
    for n in range(30):
        body = json.dumps({"jsonrpc": "2.0", "method": "session_spawn", "id": n, "params": {
            "labels": _labels(n), "prompt": "Implement the login page described in the ticket.",
            "actor": "ann", "harness": "demo",
            "work_item": {"ref": f"local:acme/app#{n}", "number": n, "repository": "acme/app",
                          "kind": "issue"}}}).encode()
        heard: list[CallRecord] = []
        handle_request(executor, body, on_call=heard.append)
        rows.append(records._built(0.0, heard[0]))  # its context encoded, as a loop's are
    return rows


def write_points(target: str, samples: list[Row], n: int) -> None:
    """`n` points through the store, oldest first, spread over `SPAN` up to now."""
    store = open_store(target)
    store.prepare()
    start = time.time() - SPAN
    step = SPAN / n
    batch: list[Row] = []
    for i in range(n):
        _, point, _, text, _, rules, refused = samples[i % len(samples)]
        batch.append((start + i * step, point, f"local:acme/app#{i % ITEMS}", text,
                      f"host-{'ab'[i % 2]}", rules, refused))
        if len(batch) == BATCH:
            store.write(batch)
            batch = []
    if batch:
        store.write(batch)
    store.close()


def _sql(target: str, *statements: str, analyze: bool = True) -> None:
    """Run `statements` on the log as the benchmark's own change to its table (then let the
    planner see the table as it now is)."""
    if target.startswith("postgresql"):
        import psycopg

        with psycopg.connect(target, autocommit=True) as conn:
            for statement in statements:
                conn.execute(statement)
            if analyze:  # what autovacuum does to a table this size, done now
                conn.execute("VACUUM ANALYZE decision_log")
        return
    conn = sqlite3.connect(target, isolation_level=None)
    try:
        for statement in statements:
            conn.execute(statement)
        if analyze:
            conn.execute("ANALYZE")
    finally:
        conn.close()


def timed(page: Callable[[], dict[str, Any]], repeats: int = REPEATS
          ) -> tuple[float, float, int]:
    """(best, median) seconds of `repeats` renders, and the matches the page counted."""
    times = []
    counted = 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        values = page()
        times.append(time.perf_counter() - t0)
        counted = sum(r["enforce"] + r["audit"] for f in values["folders"] for r in f["rules"])
    return min(times), statistics.median(times), counted


def measure(target: str, links: list[Link]) -> list[tuple[str, float, float, int]]:
    def page() -> dict[str, Any]:
        return views.rules(target, links, {"since": "7d"})

    _sql(target)
    out = [("as written (rules column, partial covering index)", *timed(page))]
    _sql(target, "DROP INDEX decision_log_rules")
    out.append(("no index (the same query scans the table)", *timed(page)))
    _sql(target, *(f"ALTER TABLE decision_log DROP COLUMN {c}" for c in
                   ("rules", "host", "refused")))
    out.append(("earlier layout (every record in the period decoded; 1 render)",
                *timed(page, 1)))
    return out


def _load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def main() -> int:
    args = sys.argv[1:]
    pg = args[args.index("--pg") + 1] if "--pg" in args else ""
    n = int(args[args.index("--points") + 1]) if "--points" in args else POINTS_WRITTEN
    began = time.perf_counter()
    met = True
    with tempfile.TemporaryDirectory() as tmp:
        folder = policy_folder(Path(tmp))
        executor = policy_executor(folder)
        links = [Link("policy", executor, frozenset(POINTS))]
        samples = sample_rows(executor)
        targets = [("SQLite", str(Path(tmp) / "loop.db"))]
        if pg:
            _sql(pg, "DROP TABLE IF EXISTS decision_log", analyze=False)
            targets.append(("PostgreSQL", pg))
        print(f"\n### The rules page over {n:,} recorded points (7-day period, 20 rules)\n")
        print("Wall time of `console.views.rules`, best and median of "
              f"{REPEATS}; × is the time over the table as written, in the same run.\n")
        print("| store | table | best s | median s | × | matches counted | load |")
        print("|---|---|---:|---:|---:|---:|---|")
        try:
            for name, target in targets:
                t0 = time.perf_counter()
                write_points(target, samples, n)
                wrote = time.perf_counter() - t0
                rows = measure(target, links)
                base = rows[0][1]
                met = met and base < TARGET
                for table, best, median, counted in rows:
                    print(f"| {name} | {table} | {best:.3f} | {median:.3f} | "
                          f"{best / base:.1f} | {counted:,} | {_load()} |")
                print(f"| {name} | (written in {wrote:.1f} s) | | | | | |")
        finally:
            if pg:
                _sql(pg, "DROP TABLE IF EXISTS decision_log", analyze=False)
    print(f"\nTarget: the rules page over {n:,} points under {TARGET:g} s on each store: "
          f"{'met' if met else 'MISSED'}{'' if pg else ' (PostgreSQL not measured: --pg DSN)'}"
          f". CPUs: {os.cpu_count()}; Python {sys.version.split()[0]}; run "
          f"{time.perf_counter() - began:.1f} s.")
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
