"""What the loop's database costs per work item walked, beside another commit's (issue 34).

N items go through `write` (agent) → `check` (agent) → done: each node is a session whose
harness is a real `the-loop graph complete` process. Every the-loop process (the pollers and
each harness) runs under benchmarks/counted.py, which counts its statements, transactions,
seconds waiting for SQLite's write lock, and CPU. A poller's CPU is also given after its
start-up: from the moment its first cycle begins (imports, migrations, the host's first
heartbeat are done by then), less the modules its cycles import for the first time (start-up
deferred to first use); and in its busy cycles (all its cycles but the idle ones). Its
cycles are counted, and what an idle one (the fewest statements) costs. Each version's
modules are compiled before it runs, as an installed package's are. On PostgreSQL the
server's side is read too: transactions from pg_stat_database (every process of the run,
on a database of its own; this script's own reads of it are counted and taken off) and the
CPU of the backends serving it (sampled from /proc every 50 ms; a backend that lives
less than that is missed). Then one `poll --once` runs on the folder with nothing to do.

The same run measures a checkout of each `--baseline REF` (benchmarks/baseline.py; the flag
may be given more than once) the same way; the table puts them side by side with this
checkout, and the ratio of this checkout to each (this ÷ baseline).

    .venv/bin/python benchmarks/loop_visits.py [--items 10] [--baseline 5a1a699]
        [--baseline main] [--backend sqlite|postgresql|both] [--dsn postgresql:///postgres]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from baseline import checkout, describe, env_for
from loop_hosts import BackendCpu, Database, cli

HERE = Path(__file__).resolve().parent
COUNTED = str(HERE / "counted.py")
GRAPH = """\
start: write
nodes:
  - {name: write, phase: writing, actor: agent}
  - {name: check, phase: checking, actor: agent}
  - {name: done, phase: done, terminal: true}
edges:
  - {from: write, outcome: done, to: check}
  - {from: check, outcome: done, to: done}
"""


def folder(root: Path, database: str) -> Path:
    root.mkdir(parents=True)
    (root / "graph.yaml").write_text(GRAPH, encoding="utf-8")
    command = json.dumps([sys.executable, COUNTED, "graph", "complete"])
    config = root / "cli-config.yaml"
    config.write_text(
        "loop: bench\nstateDir: .the-loop\ntracker: {kind: local, repository: acme/app}\n"
        + (f"database: {database}\n" if database else "")
        + f"harness: completer\nharnesses:\n  - name: completer\n    command: {command}\n"
        "    env: [LOOP_BENCH_COUNTS]\ngraph: graph.yaml\nmaxSessions: 8\n",
        encoding="utf-8")
    return config


def setup(src: Path | None, config: Path, *args: str) -> str:
    """`the-loop ARGS` by the version measured (its schema is the one its pollers read)."""
    if src is None:
        return cli(config, *args)
    return subprocess.run([sys.executable, "-m", "the_loop", "--config", str(config), *args],
                          env=env_for(src), capture_output=True, text=True, check=True,
                          timeout=120).stdout


def compiled(src: Path) -> None:
    """Write the bytecode of the version's modules beside them, as an installed package has
    it (the children write none themselves under PYTHONDONTWRITEBYTECODE): its first process
    does not compile the loop. The standard library's and the dependencies' are written at
    their install."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(src)], check=True,
                   env={k: v for k, v in os.environ.items() if k != "PYTHONPYCACHEPREFIX"},
                   stdout=subprocess.DEVNULL, timeout=300)


def server_xacts(db: Database) -> int:
    time.sleep(1.2)  # backends flush their statistics within a second (and at exit)
    row = db.query("SELECT xact_commit + xact_rollback AS n FROM pg_stat_database WHERE "
                   "datname = current_database()")
    return int(row[0]["n"])


def done_count(config: Path, database: str) -> int:
    if database:
        return 0
    db = config.parent / ".the-loop" / "loop.db"
    conn = sqlite3.connect(str(db), timeout=30)
    try:
        return int(conn.execute("SELECT COUNT(*) FROM work WHERE state='done'").fetchone()[0])
    finally:
        conn.close()


def walk(src: Path | None, items: int, pollers: int, pg: Database | None) -> dict[str, float]:
    """Per-item figures of one run of `items` items with `pollers` pollers."""
    with tempfile.TemporaryDirectory(prefix="loop-visits-") as tmp:
        root = Path(tmp)
        config = folder(root / "loop", pg.dsn if pg else "")
        refs = [setup(src, config, "items", "add", f"Item {i}").strip() for i in range(items)]
        for ref in refs:
            setup(src, config, "start", ref, "--actor", "alice")
        counts = root / "counts.jsonl"
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("THE_LOOP_") and k != "PYTHONDONTWRITEBYTECODE"}
        env.update(LOOP_BENCH_COUNTS=str(counts))
        env = env_for(src, env)
        xacts0 = server_xacts(pg) if pg else 0
        sampler = BackendCpu(pg) if pg else contextlib.nullcontext()
        with sampler:
            procs = [subprocess.Popen(
                [sys.executable, COUNTED, "--config", str(config), "poll", "--interval", "0.05",
                 "--quiet", "--host-id", f"host-{i}"], env=env, cwd=root,
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                for i in range(pollers)]
            own = 0  # this process's queries on the database, taken off the server's count
            try:
                limit = float(os.environ.get("LOOP_BENCH_TIMEOUT", "600"))
                deadline = time.monotonic() + limit
                while True:
                    own += 1
                    if (len(pg.query("SELECT ref FROM work WHERE state='done'")) if pg
                            else done_count(config, "")) >= items:
                        break
                    if time.monotonic() > deadline:
                        said = [p.stderr.read() if p.poll() is not None and p.stderr
                                else "(running)" for p in procs]
                        raise RuntimeError(f"not done in time; the pollers said: {said}")
                    time.sleep(0.25)
            finally:
                for proc in procs:
                    proc.send_signal(signal.SIGTERM)
                errors = [proc.communicate(timeout=60)[1] for proc in procs]
        if any("Traceback" in e for e in errors):
            raise RuntimeError("a poller failed:\n" + "\n".join(errors))
        # one more for the read of xacts0 itself
        xacts = server_xacts(pg) - xacts0 - own - sampler.queries - 1 if pg else 0  # type: ignore[union-attr]
        idle_env = {**env, "LOOP_BENCH_ROLE": "idle"}
        subprocess.run([sys.executable, COUNTED, "--config", str(config), "poll", "--once"],
                       env=idle_env, cwd=root, capture_output=True, check=True, timeout=120)
        rows = [json.loads(line) for line in counts.read_text().splitlines()]
    if os.environ.get("LOOP_BENCH_SQL"):  # which statements, by role, for whoever reads it
        Path(os.environ["LOOP_BENCH_SQL"]).write_text(json.dumps(rows, indent=1))
    return summarise(rows, items, xacts, sampler.seconds if pg else 0.0)  # type: ignore[union-attr]


def summarise(rows: list[dict[str, Any]], items: int, xacts: int,
              server_cpu: float) -> dict[str, float]:
    def total(role: str, key: str) -> float:
        return sum(float(r[key]) for r in rows if r["role"] == role)

    work = [r for r in rows if r["role"] != "idle"]
    # An idle cycle: no more statements than the one cycle of `poll --once` on the quiet folder.
    quiet = min((n for r in rows if r["role"] == "idle" for _, n in r.get("cycle_runs", [])),
                default=0)
    cycles = [run for r in rows if r["role"] == "poll" for run in r.get("cycle_runs", [])]
    idle = [cpu for cpu, n in cycles if n <= quiet]
    busy_cpu = sum(cpu for cpu, n in cycles if n > quiet)
    out = {
        "poller statements": total("poll", "statements") / items,
        "poller transactions": total("poll", "transactions") / items,
        "harness statements": total("graph", "statements") / items,
        "all transactions (clients)": sum(r["transactions"] for r in work) / items,
        "poller CPU ms (whole process)": total("poll", "cpu") * 1e3 / items,
        "poller CPU ms after start-up": (total("poll", "cpu") - total("poll", "startup_cpu")
                                         - total("poll", "import_cpu")) * 1e3 / items,
        "poller CPU ms in busy cycles": (busy_cpu - total("poll", "import_cpu")) * 1e3 / items,
        "harness CPU ms": total("graph", "cpu") * 1e3 / items,
        "write-lock wait % of poller wall": 100 * total("poll", "lock_wait") / max(
            total("poll", "wall"), 1e-9),
        "idle poll --once statements": total("idle", "statements"),
        "idle poll --once transactions": total("idle", "transactions"),
    }
    if xacts:
        out["server transactions"] = xacts / items
        out["server CPU ms"] = server_cpu * 1e3 / items
    pollers = max(1, sum(1 for r in rows if r["role"] == "poll"))
    out.update({  # per run or per process, not per item
        "poller start-up CPU ms (each, not per item)": total("poll", "startup_cpu") * 1e3
        / pollers,
        "first-use imports in cycles, CPU ms (each)": total("poll", "import_cpu") * 1e3
        / pollers,
        "poll cycles in the run (all pollers)": len(cycles),
        "of them idle": len(idle),
        "idle cycle: statements (poll --once, nothing to do)": quiet,
        "idle cycle: CPU ms (mean of the run's)": sum(idle) * 1e3 / len(idle) if idle
        else float("nan"),
    })
    return out


def _cell(value: float) -> str:
    return f"{value:.2f}" if abs(value) < 10 else f"{value:.1f}"


def table(title: str, columns: dict[str, dict[str, float]]) -> None:
    """One row per figure: each baseline, this checkout (last), then this ÷ each baseline."""
    names = list(columns)
    this, bases = names[-1], names[:-1]
    print(f"\n{title}\n")
    ratios = "".join(f" ÷ {n.split()[0]} |" for n in bases)
    print(f"| per item walked | {' | '.join(names)} |{ratios}")
    print("|---|" + "---:|" * (len(names) + len(bases)))
    for key in columns[this]:
        cells = [_cell(columns[n].get(key, float("nan"))) for n in names]
        line = f"| {key} | " + " | ".join(cells) + " |"
        for n in bases:
            a, b = columns[n].get(key, 0.0), columns[this].get(key, 0.0)
            line += f" {b / a:.2f} |" if a else " – |"
        print(line)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--items", type=int, default=10)
    ap.add_argument("--baseline", action="append", default=[], metavar="REF",
                    help="a commit to measure beside this checkout (may be repeated)")
    ap.add_argument("--backend", choices=("sqlite", "postgresql", "both"), default="both")
    ap.add_argument("--dsn", default=os.environ.get("THE_LOOP_BENCH_PG_DSN",
                                                    "postgresql:///postgres"))
    args = ap.parse_args()
    runs: list[tuple[str, int]] = []
    if args.backend in ("sqlite", "both"):
        runs += [("sqlite", 1), ("sqlite", 2)]
    if args.backend in ("postgresql", "both"):
        runs += [("postgresql", 1)]
    versions: dict[str, Path | None] = {}
    with contextlib.ExitStack() as stack:
        for ref in args.baseline:
            versions[describe(ref)] = stack.enter_context(checkout(ref))
        versions["this checkout"] = None
        for src in versions.values():
            compiled(src or HERE.parent / "src")
        results: dict[tuple[str, int], dict[str, dict[str, float]]] = {}
        for backend, pollers in runs:
            for name, src in versions.items():
                pg = Database(args.dsn) if backend == "postgresql" else None
                try:
                    results.setdefault((backend, pollers), {})[name] = walk(
                        src, args.items, pollers, pg)
                finally:
                    if pg is not None:
                        pg.drop()
    load = os.getloadavg()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}, load {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} at end")
    print(f"command: python benchmarks/loop_visits.py --items {args.items} --backend "
          f"{args.backend}" + "".join(f" --baseline {ref}" for ref in args.baseline))
    for (backend, pollers), columns in results.items():
        table(f"{backend}, {pollers} poller{'s' if pollers > 1 else ''}, {args.items} items "
              "(write → check → done)", columns)
    return 0


if __name__ == "__main__":
    sys.exit(main())
