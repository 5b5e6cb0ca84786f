"""`hooks.slow`: a hook still running `SLOW_SECONDS` after it was called is recorded while it
runs, once per call, whether or not it has a deadline.

The loop's runs (`Chain.invoke`: every point the loop fires, `hooks run`, a served chain)
tell one watcher thread, started on first use, which hook each thread is calling and since
when; the watcher looks every `LOOK_SECONDS`. A hook without `timeoutSeconds` is never cut
off: this record is how a hung one shows. `Chain.run`, the embedding API's untraced path,
does not tell the watcher (that would cost every call).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

from the_loop.hooks.engine.records import Records

#: How long a call runs before it is recorded as slow.
SLOW_SECONDS = 5.0
#: How often the watcher looks.
LOOK_SECONDS = 0.5

#: What one thread is calling: (records, point, hook, work item, started).
_Call = tuple[Records, str, str, str, float]


class Watch:
    """Which hook each thread is calling, and the thread that records the slow ones."""

    def __init__(self) -> None:
        self._calls: dict[int, _Call] = {}
        self._watcher: threading.Thread | None = None
        self._lock = threading.Lock()

    def call(self, fn: Callable[[Any], Any], ctx: Any, records: Records, hook: str) -> Any:
        """`fn(ctx)`, watched."""
        me = threading.get_ident()
        self._calls[me] = (records, ctx.POINT, hook, ctx.work_item.ref, time.monotonic())
        if self._watcher is None:
            self._start()
        try:
            return fn(ctx)
        finally:
            self._calls.pop(me, None)

    def _start(self) -> None:
        with self._lock:
            if self._watcher is None:
                self._watcher = threading.Thread(target=self._look, daemon=True,
                                                 name="the-loop slow hooks")
                self._watcher.start()

    def forget(self) -> None:
        """After a fork: the child has no watcher thread (and no calls running)."""
        self._watcher = None
        self._calls = {}
        self._lock = threading.Lock()

    def _look(self) -> None:
        said: set[tuple[int, float]] = set()  # (thread, started) of calls recorded already
        while True:
            time.sleep(LOOK_SECONDS)
            now = time.monotonic()
            calls = list(self._calls.items())
            for thread, (records, point, hook, ref, started) in calls:
                if now - started >= SLOW_SECONDS and (thread, started) not in said:
                    said.add((thread, started))
                    records.emit("hooks.slow", point=point, hook=hook, work_item=ref,
                                 seconds=round(now - started, 1), still_running=True)
            said &= {(thread, call[4]) for thread, call in calls}


WATCH = Watch()
os.register_at_fork(after_in_child=WATCH.forget)

__all__ = ["LOOK_SECONDS", "SLOW_SECONDS", "WATCH", "Watch"]
