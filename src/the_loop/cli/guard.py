"""How a command's outcome becomes an exit code: its own, or one line on stderr for an error,
never a traceback (issue 11 rule 7). Shared by the parser's path (app.py) and the agent
commands' short one (quick.py), which imports no argparse."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

from the_loop.errors import LoopError, exception_line


def call(func: Callable[[Any], int], args: Any) -> int:
    """`func(args)`'s exit code; a `LoopError` is its sentence and its code, anything else
    one line (`unexpected`)."""
    try:
        return func(args)
    except LoopError as exc:
        print(f"the-loop: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("the-loop: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 1
    except Exception as exc:  # the last guard: one line, never a traceback (issue 11 rule 7)
        print(f"the-loop: {unexpected(exc)}", file=sys.stderr)
        return 1


def unexpected(exc: Exception) -> str:
    """One line for an error no command turned into a `LoopError`.

    An OS error names the file and what the system said; anything else is a bug of ours,
    said plainly; `THE_LOOP_DEBUG=1` prints the traceback as well.
    """
    if os.environ.get("THE_LOOP_DEBUG"):
        import traceback

        traceback.print_exc()
    if isinstance(exc, OSError):
        where = f"{exc.filename}: " if exc.filename else ""
        return f"{where}{exc.strerror or exception_line(exc)}; check the path and its permissions"
    if isinstance(exc, MemoryError):
        return "out of memory; an input is too large (see docs/security.md)"
    return (
        f"unexpected error: {exception_line(exc)}. This is a bug in the-loop; run again with "
        "THE_LOOP_DEBUG=1 for the traceback and report it"
    )
