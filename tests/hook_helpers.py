"""Where a hook's failure line says it raised: the ` (at FILE:LINE)` it ends with."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any


def at(fn: Callable[..., Any], below: int = 1) -> str:
    """` (at FILE:LINE)` for the line `below` lines under `fn`'s first line.

    FILE is relative to the working directory when the file is under it, else absolute,
    as a user would type it to open the file. `below=0` is a lambda's own line.
    """
    code = fn.__code__
    path = os.path.realpath(code.co_filename)
    cwd = os.path.realpath(os.getcwd()) + os.sep
    shown = path[len(cwd):] if path.startswith(cwd) else path
    return f" (at {shown}:{code.co_firstlineno + below})"


def line_of(source: str, text: str) -> int:
    """The 1-based number of the line of `source` that contains `text` (exactly one)."""
    [number] = [n for n, line in enumerate(source.splitlines(), 1) if text in line]
    return number
