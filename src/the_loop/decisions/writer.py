"""A background writer for a hook server's decision log: a caller never waits on the store.

`LogWriter.put(row)` hands one encoded record to a bounded queue and returns at once; one
thread takes what is queued (up to `BATCH` at a time) and writes the batch in one
transaction. The record is encoded (and masked) by the caller's thread, in a few
microseconds: encoding here instead would hold the interpreter's lock for a whole batch
(milliseconds) while the server's event loop waits for it, which is what a caller's tail
latency saw; the insert itself runs in C with the lock released. A full queue, a
full disk or an unreachable database costs the records, never an answer: each lost record
is counted (`failed`), the first failure is reported once on stderr (and once more when
writing works again), and `error` says what the last failure was until a batch succeeds.
"""

from __future__ import annotations

import collections
import contextlib
import os
import threading
import time
import weakref
from collections.abc import Callable

from the_loop.decisions.layout import Row
from the_loop.decisions.stores import PRUNE_SLICE, Store, shown
from the_loop.errors import one_line
from the_loop.util import say

MAX_QUEUED = 10_000  # records waiting for the writer; past this a record is lost (counted)
#: Characters of record text waiting or being written, at most: a body may be 1 MiB, so
#: 10,000 records alone would let one caller hold gigabytes while the store is stalled.
MAX_QUEUED_TEXT = 64 << 20
BATCH = 500  # records per transaction at most
#: Seconds between the writer's looks at what is queued: records arriving meanwhile share
#: one transaction (a commit per call would cost more than the call). The caller never
#: waits: a put is a deque append under a lock held for an addition, with no wake-up (a
#: queue's cost a third of it). A transaction's own cost is most of a row's at tens of
#: rows (measured: SQLite 30 µs a row at 100 rows a batch, 16 at 400; PostgreSQL's client
#: 12.5 and 9): at 0.2 s a server answering 2,000 calls/s writes 400 a batch, each record
#: reaching the log at most 0.2 s after its call.
LINGER = 0.2
PRUNE_EVERY = 3600.0  # seconds between two prunes of records past their keep time
RETRY_PAUSE = 1.0  # seconds the writer rests after a failed batch (a database coming back)


class LogWriter:
    """Writes encoded records to `store` from one daemon thread (see the module doc)."""

    def __init__(self, store: Store, target: str,
                 on_failed: Callable[[int], None] = lambda n: None, *,
                 keep_days: float = 0.0) -> None:
        """`keep_days`: records older than this are deleted (at start, then hourly, in
        slices between batches); 0 keeps every record."""
        self.store = store
        self.keep_seconds = keep_days * 86_400.0
        self.pruned = 0
        self._prune_at = 0.0  # when the next prune is due (monotonic clock)
        self.target = shown(target)
        self.on_failed = on_failed
        self.failed = 0
        self.written = 0
        self.error = ""
        self._start()
        ref = weakref.ref(self)
        os.register_at_fork(after_in_child=lambda: _restart(ref))

    def _start(self) -> None:
        self._rows: collections.deque[Row] = collections.deque()
        self._taken = 0  # rows the thread took and has not yet written or lost
        self._held = 0  # characters of the records queued or being written
        self._held_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="decision-log", daemon=True)
        self._thread.start()

    def _forked(self) -> None:
        """In a forked child (gunicorn --preload builds the app in its master, then forks
        the workers): no thread survives a fork, so the child gets a writer of its own, on
        a connection of its own; what the parent queued is the parent's to write."""
        self.store.forget()
        self.written = self.failed = self.pruned = 0
        self.error = ""
        self._prune_at = 0.0
        self._start()

    def put(self, row: Row) -> None:
        """Queue one call's record; never blocks (a full queue loses it, counted)."""
        size = len(row[3])
        with self._held_lock:
            count_full = len(self._rows) >= MAX_QUEUED
            full = count_full or self._held + size > MAX_QUEUED_TEXT
            if not full:
                self._held += size
                self._rows.append(row)
        if full:
            what = (f"more than {MAX_QUEUED} records" if count_full else
                    f"more than {MAX_QUEUED_TEXT >> 20} Mi characters of records")
            self.lost(1, f"{what} waiting (the store is too slow)")

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until everything queued so far is written or lost; False on timeout."""
        deadline = time.monotonic() + timeout
        while self._rows or self._taken:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        return True

    def close(self, timeout: float = 5.0) -> None:
        """Write what is queued (for at most `timeout` seconds), then stop the thread. If
        the store has not taken it all by then, what still waits is lost, counted and said;
        the store is left open under a batch still being written (closing a connection in
        use by another thread crashed the process: a segmentation fault in SQLite)."""
        self._stop.set()
        self._thread.join(timeout)
        if not self._thread.is_alive():
            self.store.close()
            return
        left = size = 0
        with contextlib.suppress(IndexError):  # the thread may pop the next batch meanwhile
            while True:
                size += len(self._rows.popleft()[3])
                left += 1
        with self._held_lock:
            self._held -= size
        if left:
            self.failed += left
            self.on_failed(left)
        busy = f"; a batch of {self._taken} was still being written" if self._taken else ""
        say(f"the-loop: decision log {self.target}: {left} record(s) not written at stop "
             f"(the store did not take them within {timeout:g} s){busy}")

    def _run(self) -> None:
        rows = self._rows
        while True:
            stopping = self._stop.wait(LINGER)  # a close wakes it at once
            # What waits now, then more only while a whole batch waits: records that came
            # during a write wait out a linger with the next ones (written at once, they
            # were batches of 2 or 3 on PostgreSQL, whose write is round trips: 60 µs of
            # this thread's CPU a record instead of 6).
            more = len(rows)
            while rows and (more > 0 or stopping or len(rows) >= BATCH):
                self._taken = n = min(len(rows), BATCH)  # before the pops: flush sees them
                more -= n
                batch: list[Row] = []
                with contextlib.suppress(IndexError):  # a close() past its wait takes the rest
                    for _ in range(n):
                        batch.append(rows.popleft())
                try:
                    self._write(batch)
                finally:
                    size = sum(len(row[3]) for row in batch)
                    with self._held_lock:
                        self._held -= size
                    self._taken = 0
            if stopping:
                return
            if self.keep_seconds and time.monotonic() >= self._prune_at:
                self._prune()

    def _prune(self) -> None:
        """One slice of the records past their keep time; the next slice at the next look
        while a slice comes back full, else in `PRUNE_EVERY`."""
        try:
            gone = self.store.prune(time.time() - self.keep_seconds)
        except Exception as exc:  # the next prune tries again; writing goes on
            say(f"the-loop: decision log {self.target}: cannot delete old records "
                 f"({one_line(f'{type(exc).__name__}: {exc}', 300)}); trying again in "
                 f"{PRUNE_EVERY:g} s")
            gone = 0
        self.pruned += gone
        full = gone >= PRUNE_SLICE
        self._prune_at = time.monotonic() + (0.0 if full else PRUNE_EVERY)

    def _write(self, rows: list[Row]) -> None:
        if not rows:
            return
        try:
            self.store.write(rows)
        except Exception as exc:
            self.lost(len(rows), f"{type(exc).__name__}: {exc}")
            time.sleep(RETRY_PAUSE)
            return
        self.written += len(rows)
        if self.error:
            say(f"the-loop: decision log {self.target}: writing again ({self.failed} "
                 "record(s) lost so far)")
            self.error = ""

    def lost(self, n: int, why: str) -> None:
        """Count `n` records lost for `why` (said on stderr the first time in a row)."""
        first = not self.error
        self.failed += n
        self.error = one_line(why, 300)
        self.on_failed(n)
        if first:
            say(f"the-loop: decision log {self.target}: cannot write ({self.error}); calls "
                 "are still answered, lost records are counted "
                 "(the_loop_served_decision_log_writes_failed_total)")


def _restart(ref: weakref.ref[LogWriter]) -> None:
    writer = ref()
    if writer is not None and not writer._stop.is_set():  # a closed log stays closed
        writer._forked()
