"""Run `the-loop ARGS` counting its SQL: the instrumented process of benchmarks/loop_visits.py.

    python benchmarks/counted.py --config C poll --interval 0.05 --quiet

At exit it appends one JSON line to the file $LOOP_BENCH_COUNTS names: the role ($LOOP_BENCH_ROLE,
else the command's first word), statements and transactions it ran on SQLite and PostgreSQL,
the seconds its SQLite connections spent in `BEGIN IMMEDIATE` (waiting for the write lock),
its CPU and wall seconds. It patches the libraries (sqlite3.connect, psycopg's cursors),
not the-loop, so a checkout of any commit runs under it unchanged.

- SQLite: every statement the library steps (a trace callback), and a transaction is each
  BEGIN, and each statement run outside one (autocommit).
- PostgreSQL: every `Cursor.execute`/`executemany` call (one executemany is one statement
  call), and a transaction is each `Connection.transaction()` block that is not nested, and
  each statement run in autocommit outside one.
"""

from __future__ import annotations

import atexit
import json
import os
import resource
import sqlite3
import sys
import time
from typing import Any

COUNTS = {"statements": 0, "transactions": 0, "lock_wait": 0.0}
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
            if _KEEP_TEXTS and args:
                text = str(args[0])[:120]
                TEXTS[text] = TEXTS.get(text, 0) + 1
            conn = self.connection
            if depth.get(id(conn), 0) == 0 and conn.autocommit and (
                    conn.info.transaction_status == TransactionStatus.IDLE):
                COUNTS["transactions"] += 1
            return method(self, *args, **kwargs)
        return run

    psycopg.Cursor.execute = counting(psycopg.Cursor.execute)  # type: ignore[method-assign]
    psycopg.Cursor.executemany = counting(  # type: ignore[method-assign]
        psycopg.Cursor.executemany)
    transaction = psycopg.Connection.transaction

    import contextlib

    @contextlib.contextmanager
    def counted_transaction(self: Any, *args: Any, **kwargs: Any) -> Any:
        key = id(self)
        if depth.get(key, 0) == 0:
            COUNTS["transactions"] += 1
        depth[key] = depth.get(key, 0) + 1
        try:
            with transaction(self, *args, **kwargs) as tx:
                yield tx
        finally:
            depth[key] -= 1

    psycopg.Connection.transaction = counted_transaction  # type: ignore[method-assign]


def _report() -> None:
    path = os.environ.get("LOOP_BENCH_COUNTS")
    if not path:
        return
    usage = resource.getrusage(resource.RUSAGE_SELF)
    line = json.dumps({
        "role": os.environ.get("LOOP_BENCH_ROLE") or next(
            (a for a in sys.argv[1:] if not a.startswith("-") and not a.endswith(".yaml")), ""),
        "pid": os.getpid(), **COUNTS, "cpu": usage.ru_utime + usage.ru_stime,
        "wall": time.perf_counter() - T0, **({"texts": TEXTS} if _KEEP_TEXTS else {})}) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def main() -> int:
    _patch_psycopg()
    atexit.register(_report)  # registered after psycopg's pools: runs before they close
    from the_loop.cli import main as cli_main

    return cli_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
