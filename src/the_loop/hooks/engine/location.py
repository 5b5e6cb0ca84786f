"""Where a hook's exception came from: the file and line a hook author opens to fix it.

A hook's failure is reported as one line (`errors.describe_exception`), never a traceback;
`failure_line` adds ` (at hooks/acme.py:12)` to it. The line chosen is the deepest frame of
the traceback that belongs to the hook:

1. in the folder of the code the chain called (the hook's own file, or its package; not a
   virtualenv inside that folder), else
2. anywhere outside the-loop, the standard library and installed packages, else
3. nowhere: an exception raised by our own code or by a library with no hook frame in
   between gets no location rather than a misleading one.

The path is shown relative to the working directory when it lies under it (the way an
editor or `grep -n` would be given it), else absolute. Only called on a failure, so it can
afford to walk the traceback.
"""

from __future__ import annotations

import os
import sysconfig
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from the_loop.errors import describe_exception, one_line
from the_loop.hooks.engine.deadline import _call
from the_loop.interrupt import reraise_if_real
from the_loop.util import shown_path

#: Our own package: frames here are the chain, the loader or an executor, never the hook.
_OURS = str(Path(__file__).resolve().parents[2]) + os.sep
#: The standard library and installed packages: a hook's call into them is blamed on the hook.
_LIBRARIES = tuple(sorted({
    os.path.realpath(p) + os.sep
    for key in ("stdlib", "platstdlib", "purelib", "platlib")
    if (p := sysconfig.get_paths().get(key))
}))
#: The longest a location's path is shown (a hook may name its code's file anything); with
#: the line number, a location stays within about `errors.MAX_ERROR` characters.
MAX_PATH = 480
#: The entry of a hook's worker thread (`timeoutSeconds`), where a raise site is followed on.
_WORKER_ENTRY = _call.__code__
#: A traceback is walked at most this deep (a RecursionError's is about 1,000 frames).
MAX_FRAMES = 5000


def code_file(fn: Callable[..., Any] | None) -> str | None:
    """The file `fn` (a function, bound method or callable object) was defined in."""
    if isinstance(fn, type):  # a class: its constructor
        fn = getattr(fn, "__init__", None)
    target: Any = getattr(fn, "__func__", fn)
    code = getattr(target, "__code__", None)
    if code is None and callable(target):  # a callable object: its class's __call__
        code = getattr(type(target).__call__, "__code__", None)
    name = getattr(code, "co_filename", None)
    return name if isinstance(name, str) and not name.startswith("<") else None


def raise_site(exc: BaseException, fn: Callable[..., Any] | None = None) -> str:
    """`path:line` of the hook's frame that raised `exc` (see the module docstring), or ''."""
    frames = _frames(exc)
    home = _home(fn)
    picked = None
    if home and not home.startswith(_OURS):  # (a virtualenv inside it is not the hook's)
        picked = next((f for f in reversed(frames)
                       if f[0].startswith(home) and not f[0].startswith(_LIBRARIES)), None)
    if picked is None:
        picked = next((f for f in reversed(frames) if not f[0].startswith(_LIBRARIES)), None)
    if picked is None:
        return ""
    # A file name is the hook's to choose (`compile(src, "x\ny", …)`): one line, always.
    return f"{one_line(shown_path(picked[0]), MAX_PATH)}:{picked[1]}"


def _frames(exc: BaseException) -> list[tuple[str, int]]:
    """`(real path, line)` of each frame of `exc`'s traceback outside our own package, outermost
    first, up to where the traceback turns into an older one (`_old_part_next`)."""
    frames: list[tuple[str, int]] = []
    real: dict[str, str] = {}  # a deep recursion repeats one file a thousand times
    tb = exc.__traceback__
    for _ in range(MAX_FRAMES):
        if tb is None:
            break
        name, line = tb.tb_frame.f_code.co_filename, tb.tb_lineno
        if type(name) is not str or type(line) is not int:  # a traceback the hook made up
            break
        if not name.startswith("<"):  # <string>, <frozen …>: nothing to open
            path = real.get(name) or real.setdefault(name, os.path.realpath(name))
            if not path.startswith(_OURS):
                frames.append((path, line))
        if _old_part_next(tb):
            break
        tb = tb.tb_next
    return frames


def _old_part_next(tb: TracebackType) -> bool:
    """Whether the entry after `tb` begins an old traceback: an exception object raised a
    second time keeps its old traceback after the new frames; the old part is where a frame
    was not called by the one before it -- except a hook's own worker thread (`deadline.py`),
    whose exception the chain's thread raises again: its frames are where the hook raised it."""
    inner = tb.tb_next
    return inner is not None and inner.tb_frame.f_back not in (None, tb.tb_frame) \
        and inner.tb_frame.f_code is not _WORKER_ENTRY


def _home(fn: Callable[..., Any] | None) -> str | None:
    """The folder (real path, ending in a separator) of the file `fn` was defined in, if any."""
    home_file = code_file(fn)
    return os.path.dirname(os.path.realpath(home_file)) + os.sep if home_file else None


def failure_line(
    exc: BaseException, fn: Callable[..., Any] | None = None, *, plain: bool = False
) -> str:
    """What a hook raised, then where in the hook's own code: `ValueError: x (at hooks/a.py:3)`.

    The location comes after the (bounded) message, so a long message never cuts it off.
    """
    text = describe_exception(exc, plain=plain)
    site = hook_raise_site(exc, fn)
    return located(text, site)


def located(text: str, site: str) -> str:
    """`text (at path:line)`, or `text` when there is no location."""
    return f"{text} (at {site})" if site else text


def hook_raise_site(exc: BaseException, fn: Callable[..., Any] | None = None) -> str:
    """`path:line` in the hook's own code where `exc` came from, or '' (never raises)."""
    try:
        return raise_site(exc, fn)  # bounded there (`MAX_PATH`)
    except BaseException as inner:  # a hook's odd traceback must not break its failure
        reraise_if_real(inner)
        return ""
