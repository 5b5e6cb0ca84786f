"""The loop's throughput with 1 and 2 pollers on one state folder (issue 12, Measure).

A scripted graph: `write` (an agent node) → `review` (a human gate) → `done`. The harness
completes its node at once with `the-loop graph complete` (a real CLI process per session);
a reviewer thread approves each item that reaches the gate with `the-loop reply … /approve`
(the CLI's own code, called in this process so the reviewer's interpreter start-up is not
counted). N items are armed together; the clock runs from the arming until every item is
done. Pollers are `the-loop poll --interval 0.05 --quiet` daemons on the same stateDir,
sharing the work through claims. Best of `--repeat` runs (default 2). Prints a markdown
table: items per second for each poller count and its ratio to one poller.

    .venv/bin/python benchmarks/loop_throughput.py [--items 20] [--repeat 2] [--quick]

With `--backend postgresql` it measures 1, 2 and 4 hosts on one PostgreSQL database instead
(see benchmarks/loop_hosts.py): `--dsn` names a server where it may create and drop
databases (default $THE_LOOP_BENCH_PG_DSN, else postgresql:///postgres).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from loop_hosts import cli, report, stop_pollers

GRAPH = """\
start: write
nodes:
  - {name: write, phase: writing, actor: agent}
  - {name: review, phase: review, actor: human}
  - {name: done, phase: done, terminal: true}
edges:
  - {from: write, outcome: done, to: review}
  - {from: review, outcome: approved, to: done}
"""


def folder(root: Path) -> Path:
    """A loop folder whose harness completes its node at once; returns the config path."""
    root.mkdir(parents=True)
    (root / "graph.yaml").write_text(GRAPH, encoding="utf-8")
    command = json.dumps([sys.executable, "-m", "the_loop", "graph", "complete"])
    config = root / "cli-config.yaml"
    config.write_text(
        "loop: bench\nstateDir: .the-loop\ntracker: {kind: local, repository: acme/app}\n"
        f"harness: completer\nharnesses:\n  - name: completer\n    command: {command}\n"
        "graph: graph.yaml\n", encoding="utf-8")
    return config


def states(db: Path) -> dict[str, str]:
    conn = sqlite3.connect(str(db), timeout=30)
    try:
        return {str(r[0]): str(r[1]) for r in conn.execute("SELECT ref, state FROM work")}
    finally:
        conn.close()


def run(items: int, pollers: int) -> tuple[float, int]:
    """Seconds for `items` items from arming to done, and how many sessions ran."""
    with tempfile.TemporaryDirectory(prefix="loop-throughput-") as tmp:
        root = Path(tmp) / "loop"
        config = folder(root)
        refs = [cli(config, "items", "add", f"Item {i}").strip() for i in range(items)]
        env = {k: v for k, v in os.environ.items() if not k.startswith("THE_LOOP_")}
        db = root / ".the-loop" / "loop.db"
        approved: set[str] = set()
        stop = threading.Event()

        def reviewer() -> None:
            while not stop.is_set():
                for ref, state in states(db).items():
                    if state == "gate" and ref not in approved:
                        approved.add(ref)
                        cli(config, "reply", ref, "/approve", "--actor", "rita")
                stop.wait(0.02)

        t0 = time.perf_counter()
        for ref in refs:
            cli(config, "start", ref, "--actor", "alice")
        procs = [subprocess.Popen(
            [sys.executable, "-m", "the_loop", "--config", str(config), "poll", "--interval",
             "0.05", "--quiet"], cwd=root, env=env, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True) for _ in range(pollers)]
        thread = threading.Thread(target=reviewer)
        thread.start()
        try:
            deadline = time.monotonic() + 600
            while sum(s == "done" for s in states(db).values()) < items:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"not done in 600 s: {states(db)}")
                time.sleep(0.02)
            elapsed = time.perf_counter() - t0
        finally:
            stop.set()
            thread.join()
            stop_pollers(procs, fatal=("Traceback", "IntegrityError"))
        conn = sqlite3.connect(str(db))
        sessions = int(conn.execute("SELECT COUNT(*) FROM sessions").fetchone()[0])
        starts = int(conn.execute("SELECT COUNT(*) FROM steps WHERE kind='start' AND "
                                  "outcome='started'").fetchone()[0])
        conn.close()
        if starts != items or sessions != items:
            raise RuntimeError(f"{starts} starts and {sessions} sessions for {items} items")
        return elapsed, sessions


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--items", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="8 items, one run each")
    ap.add_argument("--backend", choices=("sqlite", "postgresql"), default="sqlite")
    ap.add_argument("--dsn", default=os.environ.get("THE_LOOP_BENCH_PG_DSN",
                                                    "postgresql:///postgres"))
    ap.add_argument("--sleep", type=float, default=2.0, help="postgresql: a session's sleep")
    ap.add_argument("--max-sessions", type=int, default=4, help="postgresql: per host")
    ap.add_argument("--claim-seconds", type=float, default=3.0)
    ap.add_argument("--hosts", default="1,2,4", help="postgresql: the host counts to run")
    ap.add_argument("--pollers-first", action="store_true",
                    help="postgresql: start the pollers (and wait for each one's first beat) "
                         "before the clock, not after the items are armed")
    args = ap.parse_args()
    items, repeat = (8, 1) if args.quick else (args.items, args.repeat)
    if args.backend == "postgresql":
        return hosts_report(args, items, repeat)
    best: dict[int, float] = {}
    for _ in range(repeat):
        for pollers in (1, 2):
            elapsed, _ = run(items, pollers)
            best[pollers] = min(best.get(pollers, elapsed), elapsed)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, {platform.system()} "
          f"{platform.release()}, Python {platform.python_version()}, load {load:.1f} at end")
    print(f"command: python benchmarks/loop_throughput.py --items {items} --repeat {repeat}")
    print(f"\n{items} items through write (agent) → review (gate) → done, best of {repeat}\n")
    print("| pollers | seconds | items/s | ratio (÷ 1 poller) |")
    print("|---:|---:|---:|---:|")
    for pollers in (1, 2):
        rate = items / best[pollers]
        base = items / best[1]
        print(f"| {pollers} | {best[pollers]:.2f} | {rate:.2f} | {rate / base:.2f} |")
    return 0


def hosts_report(args: argparse.Namespace, items: int, repeat: int) -> int:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, {platform.system()} "
          f"{platform.release()}, Python {platform.python_version()}, load {load:.1f} at start")
    print(f"command: python benchmarks/loop_throughput.py --backend postgresql --items {items} "
          f"--repeat {repeat} --sleep {args.sleep:g} --max-sessions {args.max_sessions} "
          f"--hosts {args.hosts}" + (" --pollers-first" if args.pollers_first else ""))
    report(args.dsn, items=items, sleep=args.sleep, max_sessions=args.max_sessions,
           repeat=repeat, claim_seconds=args.claim_seconds,
           counts=tuple(int(n) for n in args.hosts.split(",")),
           pollers_first=args.pollers_first)
    return 0


if __name__ == "__main__":
    sys.exit(main())
