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
    except BrokenPipeError:
        return 1
    except (Exception, KeyboardInterrupt) as exc:
        code, line = failure(exc)
        print(line, file=sys.stderr)
        return code


def failure(exc: BaseException) -> tuple[int, str]:
    """The exit code and the stderr line of a command that raised `exc` (as `call` prints
    them; the agent door answers with them)."""
    if isinstance(exc, LoopError):
        return exc.exit_code, f"the-loop: {exc}"
    if isinstance(exc, KeyboardInterrupt):
        return 130, "the-loop: interrupted"
    assert isinstance(exc, Exception)
    return 1, f"the-loop: {unexpected(exc)}"  # the last guard: never a traceback


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
    from the_loop.sqldb import transient

    # Its first line: PostgreSQL's message adds the statement and a caret on lines of their own.
    said = exception_line(exc).splitlines()[0]
    if transient(exc):  # the server went away mid-command (a restart, a connection it ended)
        return (f"the database went away while this ran ({said}); nothing of "
                "its unfinished transaction was kept: run it again once the database is back")
    return (
        f"unexpected error: {said}. This is a bug in the-loop; run again with "
        "THE_LOOP_DEBUG=1 for the traceback and report it"
    )
