"""The CLI run in this process as a fresh `python -m the_loop` would see the world.

`in_process(argv, cwd=, stdin=, env=)` calls `the_loop.cli.main(argv)` with its own working
directory, environment and standard streams, bounded by CLI_TIMEOUT like a subprocess, and
puts the process back as it was. It saves an interpreter start (about half a second of CPU)
per command; a test that needs a real process (PYTHONPATH, signals, a dying interpreter,
the console script) starts one instead.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

#: Seconds a CLI run may take, in a process or in this one.
CLI_TIMEOUT = 60

#: Compiled bytecode for this run's interpreters, the test processes and the children they
#: start (the environment may forbid writing it next to the sources): shared by every
#: process of every run, so each module (and each rewritten test module) compiles once.
PYCACHE = Path(tempfile.gettempdir()) / f"the-loop-test-pyc-{os.getuid()}"


class CliTimedOut(BaseException):
    """An in-process CLI run took longer than CLI_TIMEOUT (a hang fails the test)."""


def _is_temporary(module: object) -> bool:
    """A module imported from a test's temporary folder (a hook file, not a library)."""
    where = getattr(module, "__file__", None) or ""
    return where.startswith(tempfile.gettempdir() + os.sep)


def in_process(
    argv: list[str], *, cwd: Path, stdin: str, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """`main(argv)` with cwd, environment and standard streams of its own, then the
    process's state as it was (see `run_cli`)."""
    from the_loop.cli import main
    from the_loop.hooks.declaring import loading

    saved_env, saved_cwd, saved_path = dict(os.environ), os.getcwd(), sys.path[:]
    saved_modules = set(sys.modules)
    saved_signals = {sig: signal.getsignal(sig)
                     for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGALRM)}

    def too_long(signum: int, frame: object) -> None:
        raise CliTimedOut(f"the-loop {' '.join(argv)} still ran after {CLI_TIMEOUT} s")

    streams = [sys.stdin, sys.stdout, sys.stderr]
    out, err = io.BytesIO(), io.BytesIO()
    code: int | str | None
    try:
        os.environ.clear()
        os.environ.update(env)
        os.chdir(cwd)
        loading._CACHE.clear()  # each run is a new process as far as the chain cache knows
        sys.stdin = io.TextIOWrapper(io.BytesIO(stdin.encode("utf-8")), encoding="utf-8")
        sys.stdout = io.TextIOWrapper(out, encoding="utf-8", write_through=True)
        sys.stderr = io.TextIOWrapper(err, encoding="utf-8", errors="backslashreplace",
                                      write_through=True)
        signal.signal(signal.SIGALRM, too_long)  # as a subprocess's timeout would
        signal.alarm(CLI_TIMEOUT)
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
    finally:
        signal.alarm(0)
        for wrapper in (sys.stdout, sys.stderr):  # detached: the bytes stay readable
            if wrapper not in streams:
                wrapper.flush()
                wrapper.detach()  # type: ignore[attr-defined]
        sys.stdin, sys.stdout, sys.stderr = streams
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(saved_cwd)
        sys.path[:] = saved_path
        loading._CACHE.clear()
        for sig, handler in saved_signals.items():
            with contextlib.suppress(ValueError, OSError):
                signal.signal(sig, handler)
        for name in set(sys.modules) - saved_modules:  # the hook modules a run imported
            if name.startswith("the_loop_hook_") or _is_temporary(sys.modules[name]):
                del sys.modules[name]
    if code is None:
        returncode = 0
    elif isinstance(code, int):
        returncode = code
    else:  # sys.exit("message"): printed on stderr, exit 1, as the interpreter does
        err.write(f"{code}\n".encode())
        returncode = 1
    return subprocess.CompletedProcess(
        ["the-loop", *argv], returncode, out.getvalue().decode("utf-8"),
        err.getvalue().decode("utf-8"),
    )
