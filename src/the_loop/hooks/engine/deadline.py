"""Local hooks with a deadline (`timeoutSeconds` on a `module:` or `path:` entry).

Each call runs on a worker thread of its own, and the chain waits for it at most that long.
At the deadline the call is that hook's failure ("did not answer within …"): the chain
records `hooks.failed` and goes on, or refuses when the entry is `required`. Python cannot
stop a thread, so the worker is left to finish on its own: a daemon thread, never joined,
whose answer is thrown away, and the failure says how many of that hook's threads are still
running. A hook declared without `timeoutSeconds` runs in the chain's own thread (no thread
to start: see benchmarks/chain.py for what one costs).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from the_loop.errors import HookError


def _call(fn: Callable[[Any], Any], ctx: Any, box: list[tuple[Any, BaseException | None]]
          ) -> None:
    """The worker thread's entry: the hook's answer, or what it raised, into `box`.
    (`location.py` follows a traceback from here into the hook's own frames.)"""
    try:
        box.append((fn(ctx), None))
    except BaseException as exc:  # the hook's failure, handed to the chain's thread
        box.append((None, exc))


class Deadline:
    """A hook's handler, called on a thread of its own and awaited at most `seconds`."""

    def __init__(self, fn: Callable[[Any], Any], hook: str, seconds: float) -> None:
        self.fn = fn  # what a failure's location is looked up against
        self.hook = hook
        self.seconds = seconds
        self._left: list[threading.Thread] = []  # abandoned workers, while they run

    def __call__(self, ctx: Any) -> Any:
        box: list[tuple[Any, BaseException | None]] = []
        worker = threading.Thread(target=_call, args=(self.fn, ctx, box), daemon=True,
                                  name=f"hook {self.hook} at {ctx.POINT}")
        worker.start()
        worker.join(self.seconds)
        if not box:
            raise HookError(self._abandon(worker))
        answer, raised = box[0]
        if raised is not None:
            raise raised
        return answer

    def _abandon(self, worker: threading.Thread) -> str:
        self._left = [t for t in self._left if t.is_alive()] + [worker]
        return (f"did not answer within {self.seconds:g} s (timeoutSeconds); its thread is "
                f"left to finish on its own, never joined ({len(self._left)} of this hook's "
                "threads still running)")


__all__ = ["Deadline"]
