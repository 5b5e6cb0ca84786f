"""Replay from the decision log vs the same chain on contexts held in memory (issue 16).

A 100-rule policy (session_spawn; one rule in ten matches and adds a prompt prefix, one in
fifty refuses items carrying a label) runs in a real chain. Two tables:

1. Replay: 100,000 recorded points are written to a real loop.db through `DecisionLog` (as
   the loop writes them), then `Replayer.run(read_points(db))` — reading, decoding, rebuilding
   each context, running the chain, comparing the decisions — against `chain.invoke` on the
   same 100,000 contexts already in memory. Target: replay within 2x. Below it, where replay's
   time goes: the same reading pipeline cut after each stage (SQLite rows; + JSON decoding;
   + the rest of `read_points`; + `rebuild`), each stage's cost being the difference.
2. The loop's cost of the decision log per point: `DecisionLog.record` (one INSERT committed on
   its own, on the log's own connection, as `Loop.fire` does it) next to the point's own cost
   in `Loop.fire` (`chain.invoke` plus the `lifecycle.point` event, written to a real
   events.jsonl), and, for scale, one of the loop's own state writes (a flushed commit).

Table 1 is CPU time, taken in slices of 5,000 points: in each of 3 rounds every path runs
over the same slice one after the other, and each path's time is the sum over slices of the
slice's best round (a burst of load from elsewhere on this shared machine then costs a slice,
not a whole path); the best whole round of each path is printed too. Table 2 is wall time
(disk flushes included), best of 3 interleaved rounds. Prints markdown tables.

    .venv/bin/python benchmarks/replay.py [--quick]     (--quick: 10,000 points)
"""

from __future__ import annotations

import gc
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from itertools import islice
from pathlib import Path
from typing import Any

from the_loop.decisions.layout import decode as _decode  # what read_points decodes with
from the_loop.decisions.looplog import DecisionLog
from the_loop.decisions.reads import read_points
from the_loop.events import EventLog
from the_loop.hooks.engine.chain import Chain, Link
from the_loop.hooks.engine.points import SessionSpawn, WorkItem
from the_loop.hooks.executors.policy import load_policy
from the_loop.runtime.db import Database
from the_loop.runtime.record import point_record
from the_loop.runtime.replay import Replayer, Report, rebuild

QUICK = "--quick" in sys.argv
POINTS = 10_000 if QUICK else 100_000
RULES = 100
FIRE_SAMPLE = 2_000  # points fired one commit each for table 2


def rules_yaml(n: int) -> str:
    lines = ["rules:"]
    for i in range(n):
        lines.append(f"  - name: rule-{i}")
        lines.append("    on: session_spawn")
        if i % 50 == 7:
            lines.append(f"    when: \"contains(labels, 'frozen-{i}')\"")
            lines.append(f"    set: {{proceed: false, reason: \"frozen by rule {i} "
                         "({{ work_item.ref }})\"}")
        else:
            label = "loop" if i % 10 == 0 else f"team-{i}"
            lines.append(f"    when: \"work_item.repository == 'acme/app' && "
                         f"contains(labels, '{label}')\"")
            lines.append(f"    set: {{prompt_prefix: \"[{i}] \"}}")
    return "\n".join(lines) + "\n"


def contexts(n: int) -> list[SessionSpawn]:
    out = []
    for i in range(n):
        number = i % 1000 + 1
        item = WorkItem(ref=f"local:acme/app#{number}", tracker="local", owner="acme",
                        repo="app", repository="acme/app", number=number, kind="issue",
                        url=f"local://acme/app/{number}", id=str(number))
        labels = ["loop", "backend", f"loop:phase-{i % 5}"]
        if i % 97 == 0:
            labels.append("frozen-7")
        out.append(SessionSpawn(
            work_item=item, loop="acme", labels=labels, actor="alice", harness="demo",
            model="demo-1", command=["python3", "-m", "the_loop.demo.agent"],
            cwd=f"/srv/loop/workspaces/acme-app-{number}", node="design", phase="design",
            prompt=(f"You are working on {item.ref}: item {number}.\n\nWrite the design "
                    "document for this work item. Ask with `the-loop ask` when you need a "
                    "person; finish with `the-loop graph complete`.\n") * 2,
        ))
    return out


def best(fns: dict[str, Callable[[], Any]], clock: Callable[[], float],
         rounds: int = 3) -> dict[str, float]:
    """Best of `rounds` for each function, the rounds interleaved (a burst of load from
    elsewhere on the machine then hits every path alike)."""
    took: dict[str, float] = {}
    for _ in range(rounds):
        for name, fn in fns.items():
            gc.collect()
            start = clock()
            fn()
            took[name] = min(took.get(name, float("inf")), clock() - start)
    return took


def build_chain(folder: Path) -> Chain:
    policy = load_policy("house-rules", folder)
    chain = Chain([Link("house-rules", policy, frozenset(policy.points()), True)],
                  log=EventLog())
    policy.bind_log(chain.log)
    return chain


def fill(db: Path, chain: Chain, ctxs: list[SessionSpawn]) -> None:
    """Record every context through DecisionLog (one transaction, to fill the log fast)."""
    conn = sqlite3.connect(str(db), isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    log = DecisionLog(conn, keep_days=30, log=EventLog())
    log.prune()  # makes the table (outside the transaction) and sets the prune clock
    conn.execute("BEGIN")
    for ctx in ctxs:
        log.record(ctx, chain.invoke(ctx), chain)
    conn.execute("COMMIT")
    conn.close()


SLICE = 5_000  # points per timed slice (table 1)
ROUNDS = 3


def stages(db: Path) -> dict[str, tuple[Iterator[Any], Callable[[Any], Any] | None]]:
    """The reading pipeline cut after each stage: a fresh stream, and what is done with each
    item (read_points's own query and decoder: what it runs, stage by stage)."""
    def rows() -> Iterator[Any]:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        try:
            yield from conn.execute(
                "SELECT id, at, point, work_item, record FROM decision_log ORDER BY id")
        finally:
            conn.close()

    return {"rows": (rows(), None), "json": (rows(), lambda row: _decode(row[4])),
            "read_points": (read_points(db), None),
            "rebuild": (read_points(db), lambda rec: rebuild(rec.point, rec.context))}


def measure_replay(chain: Chain, ctxs: list[SessionSpawn], db: Path,
                   ) -> tuple[Report, dict[str, float], dict[str, float]]:
    """CPU seconds per path: the sum of each slice's best round, and the best whole round."""
    invoke = chain.invoke
    slices = range(0, len(ctxs), SLICE)
    best: dict[str, list[float]] = {}
    whole: dict[str, float] = {}
    clock = time.process_time
    report = Report()
    for _ in range(ROUNDS):
        replayer = Replayer(chain, {})
        points = read_points(db)
        streams = stages(db)
        spent: dict[str, list[float]] = {}
        for start in slices:
            gc.collect()
            t = clock()
            for ctx in ctxs[start:start + SLICE]:
                invoke(ctx)
            spent.setdefault("mem", []).append(clock() - t)
            t = clock()  # Replayer.run is exactly this loop, then run(()) below
            for rec in islice(points, SLICE):
                replayer.one(rec)
            spent.setdefault("replay", []).append(clock() - t)
            for name, (stream, fn) in streams.items():
                t = clock()
                if fn is None:
                    for _ in islice(stream, SLICE):
                        pass
                else:
                    for item in islice(stream, SLICE):
                        fn(item)
                spent.setdefault(name, []).append(clock() - t)
        t = clock()
        report = replayer.run(())  # the summaries and the stand-ins' counts
        spent["replay"][-1] += clock() - t
        for name, times in spent.items():
            best[name] = [min(a, b) for a, b in zip(best.get(name, times), times, strict=True)]
            whole[name] = min(whole.get(name, float("inf")), sum(times))
    return report, {name: sum(times) for name, times in best.items()}, whole


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "policies").mkdir()
        (root / "policies" / "rules.yaml").write_text(rules_yaml(RULES), encoding="utf-8")
        chain = build_chain(root / "policies")
        ctxs = contexts(POINTS)
        db = root / "loop.db"
        fill(db, chain, ctxs)
        size = db.stat().st_size
        # The baseline's 100,000 contexts stay alive for the whole run (replay itself holds
        # none); frozen, the collector does not rescan them on every path's allocations.
        gc.collect()
        gc.freeze()

        report, took, rounds = measure_replay(chain, ctxs, db)
        assert report.replayed == POINTS and report.changed == 0

        # Table 2: as the loop writes, one committed INSERT per point, on a fresh loop.db
        # that the loop's own Database also has open.
        sample = ctxs[:FIRE_SAMPLE]
        state = Database(root / "state" / "loop.db")
        state.conn.execute("INSERT INTO work(ref, state) VALUES ('local:acme/app#1', 'running')")
        events = EventLog(root / "events.jsonl")
        dlog = DecisionLog(state.path, keep_days=30, log=events)
        dlog.prune()
        outcomes = [chain.invoke(ctx) for ctx in sample]

        def state_write() -> None:
            for _ in sample:
                with state.transaction() as conn:
                    conn.execute("UPDATE work SET updated=? WHERE ref='local:acme/app#1'",
                                 (time.time(),))

        def point_cost() -> None:
            invoke = chain.invoke
            for ctx in sample:
                outcome = invoke(ctx)
                events.emit("lifecycle.point", **point_record(ctx, outcome))

        def log_cost() -> None:
            for ctx, outcome in zip(sample, outcomes, strict=True):
                dlog.record(ctx, outcome, chain)

        # Wall time: what the loop waits for, disk flushes included.
        wall = best({"point": point_cost, "log": log_cost, "state": state_write},
                    time.perf_counter)
        t_point, t_log, t_state = wall["point"], wall["log"], wall["state"]
        dlog.close()
        state.close()

    n = POINTS
    print(f"## Replay of {n:,} recorded session_spawn points, {RULES}-rule policy "
          f"(loop.db {size / 1e6:.1f} MB)\n")
    t_mem, t_replay = took["mem"], took["replay"]
    print(f"CPU time; each {SLICE:,}-point slice's best of {ROUNDS} interleaved rounds, summed "
          "(in brackets: the best whole round)\n")
    print("| path | points/s | µs/point | ratio to in-memory | best whole round |")
    print("|---|---:|---:|---:|---:|")
    for name, key in (("chain.invoke on contexts in memory (baseline)", "mem"),
                      ("policy replay: read + decode + rebuild + run + compare", "replay")):
        t = took[key]
        print(f"| {name} | {n / t:,.0f} | {t / n * 1e6:.1f} | {t / t_mem:.2f}x | "
              f"{rounds[key] / rounds['mem']:.2f}x |")
    print(f"\ntarget: replay within 2x of the in-memory chain: "
          f"{'met' if t_replay <= 2 * t_mem else 'NOT met'} ({t_replay / t_mem:.2f}x; "
          f"best whole rounds {rounds['replay'] / rounds['mem']:.2f}x)\n")
    print("Where replay's time goes (each stage: the pipeline up to it, less the one before)\n")
    print("| stage | µs/point | ratio to in-memory |")
    print("|---|---:|---:|")
    before = 0.0
    for name, key in (("SQLite: the rows of decision_log", "rows"),
                      ("JSON decoding of each row's record", "json"),
                      ("the rest of read_points: version check, expand, Recorded", "read_points"),
                      ("rebuild: the typed context from the record", "rebuild"),
                      ("chain.invoke on it, compare, report (replay less the above)", "replay")):
        t = took[key] - before
        before = took[key]
        print(f"| {name} | {t / n * 1e6:.1f} | {t / t_mem:.2f}x |")
    print()
    m = FIRE_SAMPLE
    print(f"## The loop's cost of the decision log, per point ({m:,} points, one commit each)\n")
    print("| cost | µs/point | ratio to the point's own cost |")
    print("|---|---:|---:|")
    print(f"| the point: chain.invoke + lifecycle.point event (Loop.fire without the log) | "
          f"{t_point / m * 1e6:.1f} | 1.00x |")
    print(f"| DecisionLog.record: encode, redact check, INSERT + commit (WAL, its own "
          f"connection, synchronous=NORMAL) | {t_log / m * 1e6:.1f} | {t_log / t_point:.2f}x |")
    print(f"| for scale: one loop state write (Database.transaction: UPDATE work, commit "
          f"flushed to disk) | {t_state / m * 1e6:.1f} | {t_state / t_point:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
