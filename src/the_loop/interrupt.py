"""Tells a real Ctrl-C of our own process from a `KeyboardInterrupt` a hook raised itself.

Issue 11 rule 3: every exception a hook raises is that hook's failure — `KeyboardInterrupt`,
`SystemExit`, `GeneratorExit`, `asyncio.CancelledError` and any custom `BaseException`
included. Only a real interrupt of our own process may leave the chain. The two look alike
from inside an `except`, so the interrupt is marked where it is born:

- `install()` swaps Python's own SIGINT handler (`signal.default_int_handler`) for
  `on_sigint`, which raises the same `KeyboardInterrupt` and remembers that very object.
  The CLI calls it first thing; building a chain never does (no process side effect), so an
  embedder calls it itself (`the_loop.hooks.install_interrupt`) when it wants the same. A
  handler someone else installed (or SIG_IGN) is left alone.
- `is_real(exc)` is true only for that object: a hook that raises `KeyboardInterrupt()`
  itself fails like any other hook, and the chain goes on.
- The daemons (`poll`, `serve`, `hooks serve`) install handlers that never raise: they set
  a stop flag, so a Ctrl-C never lands inside a hook there; the daemon finishes the cycle
  and stops.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

_last: BaseException | None = None


def on_sigint(signum: int, frame: FrameType | None) -> None:
    """Python's default SIGINT behaviour (raise `KeyboardInterrupt`), remembered as real."""
    global _last
    exc = KeyboardInterrupt()
    _last = exc
    raise exc


def install() -> None:
    """Use `on_sigint` when SIGINT still has Python's default handler (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        return
    try:
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, on_sigint)
    except (ValueError, OSError):  # no signals here (an embedded interpreter)
        return


def is_real(exc: BaseException) -> bool:
    """Whether `exc` is the interrupt a real SIGINT raised in this process."""
    return exc is _last and exc is not None


def reraise_if_real(exc: BaseException) -> None:
    """Re-raise `exc` when it is a real interrupt of our process; otherwise do nothing."""
    if exc is _last and exc is not None:
        raise exc


__all__ = ["install", "is_real", "on_sigint", "reraise_if_real"]
