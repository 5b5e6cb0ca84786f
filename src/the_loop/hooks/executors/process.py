"""A program run bounded, for `command:` hooks: its own session and process group, one
deadline over writing its stdin and reading both outputs, each output capped, and its whole
group killed when it exits or the deadline passes — so nothing it starts outlives the call.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import time
from dataclasses import dataclass

__all__ = ["GRACE", "MAX_OUTPUT", "Ran", "run"]

MAX_OUTPUT = 1 << 20  # bytes the program may print on stdout, and on stderr
GRACE = 0.5  # seconds to finish reading once the program has exited
_TICK = 0.05  # seconds between two looks at whether it exited, without a pidfd


@dataclass
class Ran:
    """How one run ended: exit code (negative: the signal), what it printed, and why it was
    stopped (`timed_out`, or `over` naming the stream that passed `MAX_OUTPUT`)."""

    code: int
    stdout: bytes
    stderr: bytes
    timed_out: bool = False
    over: str = ""


def run(argv: list[str], body: bytes, *, cwd: str, env: dict[str, str], timeout: float) -> Ran:
    """Run `argv` in a session (and process group) of its own with `body` on stdin, reading
    both outputs, until it exits or `timeout` passes; its group is killed either way, so
    nothing it started outlives the call. Raises `OSError` when it cannot start."""
    proc = subprocess.Popen(  # the operator's program, resolved when the chain was built
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd,
        env=env, start_new_session=True, close_fds=True)
    try:
        return _exchange(proc, body, time.monotonic() + timeout)
    finally:
        # Only while the program is unreaped: its pid, and so its group's id, is still
        # its own (pids are reused; a reaped one may already name another process group).
        if proc.returncode is None:
            _kill_group(proc)
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        proc.wait()


def _exchange(proc: subprocess.Popen[bytes], body: bytes, deadline: float) -> Ran:
    """Feed stdin and drain stdout and stderr under one deadline (one selector, no threads),
    until the program has exited and its pipes are read.

    When it exits (its pidfd turns readable; without one, checked every `_TICK`), what it
    left running in its group is killed and what is still in the pipes is read for at most
    `GRACE` seconds, so a grandchild that left the group and kept a pipe open cannot hold
    the call."""
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    streams = {proc.stdout.fileno(): "stdout", proc.stderr.fileno(): "stderr"}
    got = {name: bytearray() for name in streams.values()}
    stdin = proc.stdin.fileno()
    sel, pidfd = _watch(streams, stdin, proc.pid)
    pending, exited = memoryview(body), False
    try:
        while not exited or _reading(sel, streams):
            now = time.monotonic()
            if now >= deadline:
                if exited:
                    break  # it is done; what it printed by now is its answer
                return Ran(-1, bytes(got["stdout"]), bytes(got["stderr"]), timed_out=True)
            ready = sel.select(_wait(deadline, now, pidfd))
            if not exited and _may_have_exited(ready, pidfd):
                exited = _has_exited(proc.pid)
                if exited:
                    _kill_group(proc)
                    deadline = min(deadline, time.monotonic() + GRACE)
            for key, _ in ready:
                if key.fd == pidfd:
                    sel.unregister(pidfd)
                elif key.fd == stdin:
                    pending = _feed(sel, proc, pending)
                elif _drained(sel, key.fd, got[streams[key.fd]]):
                    return Ran(-1, b"", bytes(got["stderr"][-MAX_OUTPUT:]),
                               over=streams[key.fd])
    finally:
        _unwatch(sel, pidfd)
    return Ran(proc.wait(), bytes(got["stdout"]), bytes(got["stderr"]))


def _watch(streams: dict[int, str], stdin: int, pid: int
           ) -> tuple[selectors.BaseSelector, int | None]:
    """A selector over the output pipes (to read) and stdin (to write), all non-blocking,
    and over the program's pidfd when there is one (returned too, or None)."""
    sel = selectors.DefaultSelector()
    for fd in (*streams, stdin):
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_WRITE if fd == stdin else selectors.EVENT_READ)
    pidfd = _pidfd(pid)
    if pidfd is not None:
        sel.register(pidfd, selectors.EVENT_READ)
    return sel, pidfd


def _unwatch(sel: selectors.BaseSelector, pidfd: int | None) -> None:
    """Close the selector and the pidfd (the pipes are the caller's to close)."""
    sel.close()
    if pidfd is not None:
        os.close(pidfd)


def _reading(sel: selectors.BaseSelector, streams: dict[int, str]) -> bool:
    """Whether an output pipe is still watched (not yet read to its end)."""
    return any(fd in sel.get_map() for fd in streams)


def _wait(deadline: float, now: float, pidfd: int | None) -> float:
    """How long one select may wait: until the deadline, and without a pidfd at most
    `_TICK` (the next look at whether the program exited)."""
    return min(deadline - now, _TICK if pidfd is None else deadline - now)


def _may_have_exited(ready: list[tuple[selectors.SelectorKey, int]], pidfd: int | None
                     ) -> bool:
    """Whether to look if the program exited: its pidfd turned readable, or (without one)
    on every turn."""
    return pidfd is None or any(k.fd == pidfd for k, _ in ready)


def _drained(sel: selectors.BaseSelector, fd: int, buffer: bytearray) -> bool:
    """Read what the pipe holds into `buffer` (at its end, stop watching it); True when
    the buffer is over `MAX_OUTPUT`."""
    try:
        chunk = os.read(fd, 65536)
    except BlockingIOError:
        return False
    except OSError:
        chunk = b""
    if not chunk:
        sel.unregister(fd)
    buffer += chunk
    return len(buffer) > MAX_OUTPUT


def _pidfd(pid: int) -> int | None:
    """A descriptor that turns readable when `pid` exits (Linux 5.3+), or None."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _has_exited(pid: int) -> bool:
    """Whether the program has exited, leaving it unreaped (so its group id stays its own)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _feed(sel: selectors.BaseSelector, proc: subprocess.Popen[bytes], pending: memoryview
          ) -> memoryview:
    """Write what the pipe takes of the body; close stdin once it is all written (or the
    program closed its end: it does not want the rest)."""
    assert proc.stdin is not None
    try:
        pending = pending[os.write(proc.stdin.fileno(), pending):] if pending else pending
    except BlockingIOError:
        return pending
    except OSError:  # EPIPE: it exited or closed stdin without reading everything
        pending = pending[len(pending):]
    if not pending:
        sel.unregister(proc.stdin.fileno())
        proc.stdin.close()
    return pending


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the program's whole process group (its own, from `start_new_session`) while
    the program is still our unreaped child — running, or a zombie holding its pid — so
    the group id cannot name anyone else's processes (pids are reused)."""
    try:
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:  # reaped already: its pid is no longer its own
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
