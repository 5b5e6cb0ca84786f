"""Run `the-loop ARGS` counting its SQL: the instrumented process of benchmarks/loop_visits.py.

    python benchmarks/counted.py --config C poll --interval 0.05 --quiet

At exit it appends one JSON line to the file $LOOP_BENCH_COUNTS names: the role ($LOOP_BENCH_ROLE,
else the command's first word), statements and transactions it ran on SQLite and PostgreSQL,
the seconds its SQLite connections spent in `BEGIN IMMEDIATE` (waiting for the write lock),
its CPU and wall seconds. It patches the libraries (sqlite3.connect, psycopg's cursors),
not the-loop, so a checkout of any commit runs under it unchanged — but for one function:

- A poller's cycles: `the_loop.runtime.poller.poll_once` (the name every commit measured
  has) is wrapped, so the report also says the CPU when the first cycle began (the end of
  start-up: imports, migrations, hooks loaded), and the CPU (this thread's) and statements
  (this thread's) of each cycle (loop_visits.py calls a cycle idle when it ran no more
  statements than `poll --once` does on a quiet folder). A module a cycle imports for the
  first time (the hooks engine, the decision log: imported where used) is start-up done
  late: the CPU of such imports is counted apart. With $LOOP_BENCH_PROFILE=DIR the cycles
  run under cProfile and DIR/ROLE-PID.prof holds what they spent.

- SQLite: every statement the library steps (a trace callback), and a transaction is each
  BEGIN, and each statement run outside one (autocommit).
- PostgreSQL: every `Cursor.execute`/`executemany`/`copy` call (one executemany is one
  statement call; a COPY, the decision log's write, is one), and a transaction is each
  `Connection.transaction()` block that is not nested, and each statement run in
  autocommit outside one.
"""

from __future__ import annotations

import atexit
import json
import os
import resource
import sqlite3
import sys
import threading
import time
from typing import Any

COUNTS = {"statements": 0, "transactions": 0, "lock_wait": 0.0}
#: With $LOOP_BENCH_TRACE=FILE: every PostgreSQL statement, and where each transaction
#: begins and ends, in order, appended to FILE.PID (to read one visit's sequence).
_TRACE = os.environ.get("LOOP_BENCH_TRACE")


def _trace(text: str) -> None:
    if _TRACE:
        with open(f"{_TRACE}.{os.getpid()}", "a", encoding="utf-8") as out:
            out.write(f"{threading.current_thread().name[:12]:12} {' '.join(text.split())[:150]}\n")


#: The statements each thread ran (a poll cycle counts its own thread's).
_MINE = threading.local()
#: With $LOOP_BENCH_SQL set: how often each statement text ran (written beside the counts).
TEXTS: dict[str, int] = {}
_KEEP_TEXTS = bool(os.environ.get("LOOP_BENCH_SQL"))
T0 = time.perf_counter()


class _Counted(sqlite3.Connection):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.set_trace_callback(self._traced)

    def _traced(self, sql: str) -> None:
        COUNTS["statements"] += 1
        _MINE.n = getattr(_MINE, "n", 0) + 1
        if _KEEP_TEXTS:
            TEXTS[sql[:120]] = TEXTS.get(sql[:120], 0) + 1
        head = sql.lstrip()[:8].upper()
        if head.startswith("BEGIN") or not (self.in_transaction or head.startswith(
                ("COMMIT", "ROLLBACK", "END"))):
            COUNTS["transactions"] += 1

    def execute(self, sql: str, *args: Any) -> Any:  # type: ignore[override]
        if sql.startswith("BEGIN IMMEDIATE"):
            t = time.perf_counter()
            try:
                return super().execute(sql, *args)
            finally:
                COUNTS["lock_wait"] += time.perf_counter() - t
        return super().execute(sql, *args)


_connect = sqlite3.connect


def _counted_connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
    kwargs.setdefault("factory", _Counted)
    return _connect(*args, **kwargs)


sqlite3.connect = _counted_connect  # type: ignore[assignment]


def _patch_psycopg() -> None:
    try:
        import psycopg
        from psycopg.pq import TransactionStatus
    except ImportError:
        return
    depth: dict[int, int] = {}

    def counting(method: Any) -> Any:
        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            COUNTS["statements"] += 1
            _MINE.n = getattr(_MINE, "n", 0) + 1
            if _KEEP_TEXTS and args:
                text = str(args[0])[:120]
                TEXTS[text] = TEXTS.get(text, 0) + 1
            conn = self.connection
            alone = depth.get(id(conn), 0) == 0 and conn.autocommit and (
                conn.info.transaction_status == TransactionStatus.IDLE)
            if alone:
                COUNTS["transactions"] += 1
            _trace(("autocommit " if alone else "") + str(args[0] if args else ""))
            return method(self, *args, **kwargs)
        return run

    psycopg.Cursor.execute = counting(psycopg.Cursor.execute)  # type: ignore[method-assign]
    psycopg.Cursor.executemany = counting(  # type: ignore[method-assign]
        psycopg.Cursor.executemany)
    psycopg.Cursor.copy = counting(psycopg.Cursor.copy)  # type: ignore[method-assign]
    transaction = psycopg.Connection.transaction

    import contextlib

    @contextlib.contextmanager
    def counted_transaction(self: Any, *args: Any, **kwargs: Any) -> Any:
        key = id(self)
        if depth.get(key, 0) == 0:
            COUNTS["transactions"] += 1
            _trace("BEGIN")
        depth[key] = depth.get(key, 0) + 1
        try:
            with transaction(self, *args, **kwargs) as tx:
                yield tx
        finally:
            depth[key] -= 1
            if depth[key] == 0:
                _trace("END")

    psycopg.Connection.transaction = counted_transaction  # type: ignore[method-assign]


#: The poller's cycles: CPU (process) when the first began, and per cycle (this thread's
#: CPU, this thread's statements).
CYCLES: dict[str, Any] = {"startup_cpu": None, "runs": [], "import_cpu": 0.0}


def _timing_imports() -> None:
    """From now on, the CPU (the importing thread's) of importing a module not loaded yet
    is added to CYCLES["import_cpu"]."""
    import builtins

    real = builtins.__import__

    def timed(name: str, *args: Any, **kwargs: Any) -> Any:
        if getattr(_MINE, "importing", False) or name in sys.modules:
            return real(name, *args, **kwargs)
        _MINE.importing, t = True, time.thread_time()
        try:
            return real(name, *args, **kwargs)
        finally:
            _MINE.importing = False
            CYCLES["import_cpu"] += time.thread_time() - t

    builtins.__import__ = timed


def _watch_cycles() -> None:
    try:
        from the_loop.runtime import poller
    except ImportError:
        return
    poll_once = poller.poll_once
    profile: Any = None
    if os.environ.get("LOOP_BENCH_PROFILE"):
        import cProfile

        profile = CYCLES["profile"] = cProfile.Profile(time.thread_time)  # CPU, not wall

    def cycle(*args: Any, **kwargs: Any) -> Any:
        if CYCLES["startup_cpu"] is None:
            CYCLES["startup_cpu"] = time.process_time()
            CYCLES["startup_statements"] = COUNTS["statements"]
            _timing_imports()
        cpu, n = time.thread_time(), getattr(_MINE, "n", 0)
        if profile is not None:
            profile.enable()
        try:
            return poll_once(*args, **kwargs)
        finally:
            if profile is not None:
                profile.disable()
            CYCLES["runs"].append((time.thread_time() - cpu, getattr(_MINE, "n", 0) - n))

    poller.poll_once = cycle


def _cycle_figures() -> dict[str, Any]:
    runs: list[tuple[float, int]] = CYCLES["runs"]
    if CYCLES["startup_cpu"] is None or not runs:
        return {}
    if "profile" in CYCLES and os.environ.get("LOOP_BENCH_PROFILE"):
        CYCLES["profile"].dump_stats(os.path.join(os.environ["LOOP_BENCH_PROFILE"],
                                                  f"{_role()}-{os.getpid()}.prof"))
    return {"startup_cpu": CYCLES["startup_cpu"],
            "startup_statements": CYCLES["startup_statements"],
            "cycle_runs": runs, "import_cpu": CYCLES["import_cpu"]}


def _role() -> str:
    return os.environ.get("LOOP_BENCH_ROLE") or next(
        (a for a in sys.argv[1:] if not a.startswith("-") and not a.endswith(".yaml")), "")


def _report() -> None:
    path = os.environ.get("LOOP_BENCH_COUNTS")
    if not path:
        return
    usage = resource.getrusage(resource.RUSAGE_SELF)
    line = json.dumps({
        "role": _role(),
        "pid": os.getpid(), **COUNTS, "cpu": usage.ru_utime + usage.ru_stime,
        "wall": time.perf_counter() - T0, **_cycle_figures(),
        **({"texts": TEXTS} if _KEEP_TEXTS else {})}) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


class _PatchOnImport:
    """Patches psycopg when the process imports it, not before: importing it here would
    put its ~0.1 s of start-up into every counted process, a harness's `graph complete`
    answered by the poller's agent door too (it opens no database)."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != "psycopg":
            return None
        sys.meta_path.remove(self)
        import importlib.util

        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        loader: Any = spec.loader
        run = loader.exec_module

        def exec_module(module: Any) -> None:
            run(module)
            sys.modules[name] = module
            _patch_psycopg()

        loader.exec_module = exec_module
        return spec


def main() -> int:
    if "psycopg" in sys.modules:
        _patch_psycopg()
    else:
        sys.meta_path.insert(0, _PatchOnImport())  # type: ignore[arg-type]
    _watch_cycles()
    atexit.register(_report)  # registered after psycopg's pools: runs before they close
    from the_loop.cli import main as cli_main

    return cli_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
