"""The loop on PostgreSQL with 1, 2 and 4 hosts, or those `--hosts` names (issue 24, Measure;
8 hosts: issue 34): `loop_throughput.py --backend postgresql` runs this.

Each host is a folder of its own (its stateDir, `--host-id host-N`) and one `poll --interval
0.1` daemon on one shared database, with the same `maxSessions`. A session is a shell that
only sleeps `--sleep` seconds, then leaves a marker; this process (the agent's stand-in, so no
interpreter start is counted) completes that node with `graph complete` and removes the
marker, and the shell exits. The graph is one agent node, then done. The clock runs from the
arming of `--items` items until every one is done; the pollers start just after the arming,
inside the clock, or (`--pollers-first`) before it, each having beaten once. Then: sessions per
item (must be 1) and starts per item (must be 1). Claim latency is measured apart: N processes
(one per host) claim and release items of one table for `--claim-seconds`, each timing every
`claim()`. CPU per item: the pollers with their sessions (this process's children), and the database
backends serving the run (sampled from /proc, see BackendCpu).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from the_loop.cli import main as cli_main

GRAPH = """\
start: work
nodes:
  - {name: work, phase: work, actor: agent}
  - {name: done, phase: done, terminal: true}
edges:
  - {from: work, outcome: done, to: done}
"""
#: A session: sleep, leave a marker, then wait (blocked on a FIFO, no CPU) until the agents'
#: stand-in has completed the node. (It polled for the marker's removal every 20 ms: with 32
#: sessions that was 1,600 `sleep` processes a second, the machine's bound at 8 hosts.)
SLEEPER = """\
#!/bin/sh
sleep "$1"
mkfifo "$2/$THE_LOOP_SESSION.fifo"
echo "$THE_LOOP_WORK_ITEM" > "$2/$THE_LOOP_SESSION.tmp"
mv "$2/$THE_LOOP_SESSION.tmp" "$2/$THE_LOOP_SESSION"
read _ < "$2/$THE_LOOP_SESSION.fifo"
rm -f "$2/$THE_LOOP_SESSION.fifo"
"""


def cli(config: Path, *args: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = cli_main(["--config", str(config), *args])
    if code:
        raise RuntimeError(f"the-loop {' '.join(args)} exited {code}")
    return out.getvalue()


def stop_pollers(procs: list[subprocess.Popen[str]], fatal: tuple[str, ...] = ("Traceback",)
                 ) -> None:
    """SIGTERM every poller, wait for each, and fail the run if one printed any of `fatal`."""
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        _, err = proc.communicate(timeout=60)
        if any(mark in err for mark in fatal):
            raise RuntimeError(f"a poller failed:\n{err}")


class Database:
    """A fresh database on the server `admin` names, dropped on exit."""

    def __init__(self, admin: str) -> None:
        import psycopg

        self.admin = admin
        self.name = f"the_loop_bench_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {self.name}")
        base = admin.split("?", 1)
        path = base[0].rsplit("/", 1)[0] + "/" + self.name
        self.dsn = path + (f"?{base[1]}" if len(base) > 1 else "")

    def query(self, sql: str) -> list[dict[str, Any]]:
        import psycopg
        from psycopg.rows import dict_row

        with psycopg.connect(self.dsn, autocommit=True, row_factory=dict_row) as conn:
            return conn.execute(sql).fetchall()

    def drop(self) -> None:
        import psycopg

        from the_loop.sqldb import _close_pools

        _close_pools()
        with psycopg.connect(self.admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {self.name} WITH (FORCE)")


class BackendCpu:
    """The CPU of the PostgreSQL backends serving database `name` (sampled from /proc)."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.best: dict[int, float] = {}
        self.queries = 0  # its own transactions on the database, taken off the server's
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.tick = os.sysconf("SC_CLK_TCK")

    def _sample(self, conn: Any) -> None:
        self.queries += 1
        rows = conn.execute("SELECT pid FROM pg_stat_activity WHERE datname = "
                            "current_database() AND pid <> pg_backend_pid()").fetchall()
        for (pid,) in rows:
            with contextlib.suppress(OSError, IndexError, ValueError):
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                cpu = (int(fields[11]) + int(fields[12])) / self.tick
                self.best[pid] = max(self.best.get(pid, 0.0), cpu)

    def _run(self) -> None:
        import psycopg

        with psycopg.connect(self.db.dsn, autocommit=True) as conn:
            while not self.stop.is_set():
                self._sample(conn)
                self.stop.wait(0.05)
            self._sample(conn)

    def __enter__(self) -> BackendCpu:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join()

    @property
    def seconds(self) -> float:
        return sum(self.best.values())


def host_folder(root: Path, dsn: str, name: str, *, sleep: float, max_sessions: int,
                markers: Path) -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "graph.yaml").write_text(GRAPH, encoding="utf-8")
    script = d / "sleeper.sh"
    script.write_text(SLEEPER, encoding="utf-8")
    script.chmod(0o755)
    config = d / "cli-config.yaml"
    config.write_text(
        f"loop: bench\nstateDir: state\ndatabase: {dsn}\ngraph: graph.yaml\n"
        f"harness: sleeper\nharnesses:\n  - name: sleeper\n    command: "
        f"{json.dumps([str(script), f'{sleep:g}', str(markers)])}\n"
        f"maxSessions: {max_sessions}\n", encoding="utf-8")
    return config


def run(admin: str, hosts: int, items: int, *, sleep: float, max_sessions: int,
        pollers_first: bool = False) -> tuple[float, dict[str, int], dict[str, float]]:
    """Seconds from arming to every item done, the duplicate counts (all must be 0), and
    CPU seconds per item: the pollers with their sessions, and the database's backends.
    `pollers_first`: the pollers are started, and each has beaten once (its start-up done),
    before the clock starts and the items are armed; otherwise they start after the items
    are armed, inside the clock (the N pollers' start-ups on the machine's cores then count
    in N hosts' time)."""
    db = Database(admin)
    cpu: dict[str, float] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="loop-hosts-") as tmp:
            root = Path(tmp)
            markers = root / "markers"
            markers.mkdir()
            configs = [host_folder(root, db.dsn, f"host-{i}", sleep=sleep,
                                   max_sessions=max_sessions, markers=markers)
                       for i in range(hosts)]
            refs = [cli(configs[0], "items", "add", f"Item {i}").strip() for i in range(items)]
            stop = threading.Event()
            agent = threading.Thread(target=complete_marked, args=(configs[0], markers, stop))
            agent.start()
            env = {k: v for k, v in os.environ.items() if not k.startswith("THE_LOOP_")}

            def pollers() -> list[subprocess.Popen[str]]:
                return [subprocess.Popen(
                    [sys.executable, "-m", "the_loop", "--config", str(c), "poll",
                     "--interval", "0.1", "--quiet", "--host-id", f"host-{i}"], env=env,
                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                    for i, c in enumerate(configs)]
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            sampler = BackendCpu(db).__enter__()
            procs = pollers() if pollers_first else []
            while pollers_first and len(db.query("SELECT id FROM hosts")) < hosts:
                time.sleep(0.02)
            t0 = time.perf_counter()
            for ref in refs:
                cli(configs[0], "start", ref, "--actor", "alice")
            procs = procs or pollers()
            try:
                deadline = time.monotonic() + 900
                while len(db.query("SELECT ref FROM work WHERE state='done'")) < items:
                    if time.monotonic() > deadline:
                        raise RuntimeError("not done in 900 s")
                    time.sleep(0.05)
                elapsed = time.perf_counter() - t0
            finally:
                stop.set()
                agent.join()
                stop_pollers(procs)
                sampler.__exit__()
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu["pollers"] = (after.ru_utime + after.ru_stime - before.ru_utime
                              - before.ru_stime) / items
            cpu["server"] = sampler.seconds / items
            return elapsed, duplicates(db, items), cpu
    finally:
        db.drop()


def complete_marked(config: Path, markers: Path, stop: threading.Event) -> None:
    """The agents' stand-in: each marker is a session done sleeping; complete its node (8
    at a time, as agents would, each thread with a loop of its own)."""
    from concurrent.futures import ThreadPoolExecutor

    from the_loop.config import read_config
    from the_loop.errors import LoopError
    from the_loop.runtime.service import Loop

    local = threading.local()
    taken: set[str] = set()

    def complete(marker: Path) -> None:
        if not hasattr(local, "loop"):
            local.loop = Loop(read_config(config), strict_hooks=False, source="bench")
        with contextlib.suppress(LoopError):  # the item moved on meanwhile
            local.loop.graph_complete(marker.read_text().strip(), summary="ok")
        marker.unlink()
        release(marker.with_suffix(".fifo"))

    with ThreadPoolExecutor(max_workers=8) as pool:
        while not stop.is_set():
            for marker in markers.iterdir():
                if marker.suffix not in (".tmp", ".fifo") and marker.name not in taken:
                    taken.add(marker.name)
                    pool.submit(complete, marker)
            stop.wait(0.02)


def release(fifo: Path) -> None:
    """Let the session waiting on `fifo` end (it may not be reading yet: retry a while)."""
    for _ in range(500):
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:  # no reader yet (ENXIO), or the session is gone
            time.sleep(0.01)
            continue
        try:
            os.write(fd, b"done\n")
        finally:
            os.close(fd)
        return


def duplicates(db: Database, items: int) -> dict[str, int]:
    starts = db.query("SELECT COUNT(*) AS n FROM steps WHERE kind='start' AND "
                      "outcome='started'")[0]["n"]
    sessions = db.query("SELECT ref, COUNT(*) AS n FROM sessions GROUP BY ref")
    completes = db.query("SELECT COUNT(*) AS n FROM steps WHERE kind='complete' AND "
                         "outcome='completed'")[0]["n"]
    return {"starts": starts - items, "sessions": sum(r["n"] - 1 for r in sessions),
            "completions": completes - items}


def claimer(dsn: str, seconds: float, items: int) -> None:
    """One host's claims (a hidden mode): claim and release random items; print latencies."""
    import random

    from the_loop.runtime.db import open_database
    from the_loop.runtime.store import Store

    store = Store(open_database(dsn))
    refs = [f"local:bench/claims#{i}" for i in range(items)]
    rng = random.Random(os.getpid())
    out: list[float] = []
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        ref = rng.choice(refs)
        t0 = time.perf_counter()
        got = store.claim(ref)
        out.append(time.perf_counter() - t0)
        if got:
            store.release(ref)
    print(json.dumps(out))


def claim_latency(admin: str, hosts: int, *, seconds: float, items: int = 64) -> list[float]:
    db = Database(admin)
    try:
        from the_loop.runtime.db import open_database
        from the_loop.runtime.store import Store

        seed = Store(open_database(db.dsn))
        for i in range(items):
            seed.arm(f"local:bench/claims#{i}", actor="a", source="bench", cursors={})
        seed.db.close()
        procs = [subprocess.Popen([sys.executable, __file__, "--claimer", db.dsn, str(seconds),
                                   str(items)], stdout=subprocess.PIPE, text=True)
                 for _ in range(hosts)]
        out: list[float] = []
        for proc in procs:
            stdout, _ = proc.communicate(timeout=seconds + 120)
            out += json.loads(stdout)
        return out
    finally:
        db.drop()


def percentile(values: list[float], p: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(p) - 1]


def report(admin: str, *, items: int, sleep: float, max_sessions: int, repeat: int,
           claim_seconds: float, counts: tuple[int, ...] = (1, 2, 4),
           pollers_first: bool = False) -> None:
    best: dict[int, float] = {}
    dups: dict[int, dict[str, int]] = {}
    cpus: dict[int, dict[str, float]] = {}
    for _ in range(repeat):
        for n in counts:
            elapsed, d, cpu = run(admin, n, items, sleep=sleep, max_sessions=max_sessions,
                                  pollers_first=pollers_first)
            if elapsed < best.get(n, float("inf")):
                cpus[n] = cpu
            best[n] = min(best.get(n, elapsed), elapsed)
            dups[n] = {k: max(v, dups.get(n, {}).get(k, 0)) for k, v in d.items()}
    latencies = {n: claim_latency(admin, n, seconds=claim_seconds) for n in counts}
    ideal = items / max_sessions * sleep
    print(f"\n{items} items, one agent node each (a session that sleeps {sleep:g} s), "
          f"maxSessions {max_sessions} per host, best of {repeat}; one host's ideal is "
          f"{ideal:.1f} s; the pollers "
          f"{'started before the clock' if pollers_first else 'started inside the clock'}"
          "\n")
    print("| hosts | seconds | items/s | ratio (÷ 1 host) | target (0.8·N) | duplicate "
          "starts / sessions / completions | claim p50 | claim p99 | loop CPU / item | "
          "db server CPU / item |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in counts:
        rate = items / best[n]
        ratio = rate / (items / best[1])
        lat = latencies[n]
        d = dups[n]
        print(f"| {n} | {best[n]:.2f} | {rate:.2f} | {ratio:.2f} | {0.8 * n:.1f} | "
              f"{d['starts']} / {d['sessions']} / {d['completions']} | "
              f"{percentile(lat, 50) * 1e3:.2f} ms | {percentile(lat, 99) * 1e3:.2f} ms | "
              f"{cpus[n]['pollers'] * 1e3:.0f} ms | {cpus[n]['server'] * 1e3:.0f} ms |")


if __name__ == "__main__" and len(sys.argv) == 5 and sys.argv[1] == "--claimer":
    claimer(sys.argv[2], float(sys.argv[3]), int(sys.argv[4]))
