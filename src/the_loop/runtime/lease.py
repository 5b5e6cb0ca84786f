"""Who holds a claim, and the heartbeat that keeps a daemon's claims and its host alive.

A claim's owner is `host/pid/start#thread`: the host id (`THE_LOOP_HOST_ID`, `--host-id`,
else the host's name), the process id with the process's start time (a pid alone is reused;
the pair is not), and the thread. A claim lapses when its expiry passes unrenewed; on its own
host a claim whose process has died is taken over at once. A daemon's `Heartbeat` thread
renews, every `heartbeat` seconds, the expiry of every claim its process holds and its host's
row in `hosts` — the row other hosts read to decide whether the sessions this host runs are
still alive.
"""

from __future__ import annotations

import functools
import os
import re
import sys
import threading
from typing import Any

from the_loop.errors import UsageError
from the_loop.runtime.harness import process_start_time

HOST_ENV = "THE_LOOP_HOST_ID"
HOST_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")


def host_id() -> str:
    """This host's id: $THE_LOOP_HOST_ID, else the host's name."""
    return os.environ.get(HOST_ENV, "") or os.uname().nodename  # gethostname(), no socket


def set_host_id(value: str, flag: str = "--host-id") -> None:
    """Use `value` as this process's host id (and its sessions' commands')."""
    if not HOST_PATTERN.match(value):
        raise UsageError(f"{flag} {value[:40]!r}: a host id is letters, digits, '.', '_', ':' "
                         "and '-' (at most 128), starting with a letter or digit")
    os.environ[HOST_ENV] = value


def check_host_id() -> None:
    """Refuse a $THE_LOOP_HOST_ID no claim can carry."""
    value = os.environ.get(HOST_ENV, "")
    if value:
        set_host_id(value, f"${HOST_ENV}")


def process_owner() -> str:
    """This process as a claim owner, without the thread: host/pid/start."""
    return _process_id(host_id(), os.getpid())


def owner_id() -> str:
    """This thread as a claim owner."""
    return f"{process_owner()}#{threading.get_ident()}"


@functools.lru_cache(maxsize=4)
def _process_id(host: str, pid: int) -> str:
    """host/pid/start time, read once per process (keyed by pid: a fork gets its own)."""
    return f"{host}/{pid}/{process_start_time(pid)}"


def owner_host(owner: str) -> str:
    return owner.split("#", 1)[0].rsplit("/", 2)[0]


def owner_dead_here(owner: str) -> bool:
    """Whether `owner` is a process of this host that no longer runs (another host's
    process is never judged from here: its claim lapses instead)."""
    try:
        host, pid_s, start = owner.split("#", 1)[0].rsplit("/", 2)
        pid = int(pid_s)
    except ValueError:
        return True
    if host != host_id():
        return False
    return process_start_time(pid) != start or start == ""


class Heartbeat:
    """A daemon thread renewing this process's claims and its host's `seen` time."""

    def __init__(self, store: Any, interval: float) -> None:
        self.store = store
        self.interval = interval
        self.stop = threading.Event()
        self.failures = 0
        self.thread = threading.Thread(target=self._run, name="the-loop heartbeat",
                                       daemon=True)

    def start(self) -> Heartbeat:
        self.store.beat()
        self.thread.start()
        return self

    def _run(self) -> None:
        while not self.stop.wait(self.interval):
            try:
                self.store.beat()
                self.failures = 0
            except Exception as exc:  # the database is away: the next beat tries again
                self.failures += 1
                if self.failures == 1:
                    sys.stderr.write(f"the-loop: heartbeat failed ({type(exc).__name__}: "
                                     f"{str(exc).strip()[:200]}); retrying\n")

    def close(self) -> None:
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join(timeout=5.0)
        self.store.db.close()
