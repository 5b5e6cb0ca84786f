"""Who holds a claim, and the heartbeat that keeps a daemon's claims and its host alive.

A claim's owner is `host/pid/start#thread`: the host id (`THE_LOOP_HOST_ID`, `--host-id`,
else the host's name), the process id with the process's start time (a pid alone is reused;
the pair is not), and the thread. A claim lapses when its expiry passes unrenewed; on its own
host a claim whose process has died is taken over at once. A daemon's `Heartbeat` thread
renews, every `heartbeat` seconds, the expiry of every claim its process holds and its host's
row in `hosts` — the row other hosts read to decide whether the sessions this host runs are
still alive.

That row also records which *instance* owns the host id (`host_owner`): this machine's boot,
its process namespace and the state folder, the things daemons sharing one id must share
(they judge each other's sessions by the folder's locks and by pids). A second live instance
with the same id — a cloned machine, containers with one fixed name, two folders — is a
clash: the daemon that finds the row held by another instance that is still beating refuses
to start (`HostClash`), and `state check` reports it.
"""

from __future__ import annotations

import functools
import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from the_loop.errors import LoopError, UsageError
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


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return ""


def instance_of(state_dir: Path) -> str:
    """This machine's boot, this process namespace and this state folder, as a short hash:
    the daemons that may share a host id are those with the same instance."""
    try:
        pidns = os.readlink("/proc/self/ns/pid")
    except OSError:
        pidns = ""
    try:
        st = os.stat(state_dir)
        folder = f"{st.st_dev}:{st.st_ino}"
    except OSError:
        folder = str(state_dir)
    parts = (_read("/proc/sys/kernel/random/boot_id"), pidns, folder)
    import hashlib  # a daemon's: the agent's commands start without OpenSSL (issue 34)

    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def host_owner(state_dir: Path) -> str:
    """What a daemon writes as its host row's owner (JSON): its instance, the process, and
    where it runs (for the message another instance shows)."""
    return json.dumps({"instance": instance_of(state_dir), "process": process_owner(),
                       "node": os.uname().nodename, "dir": str(state_dir)}, sort_keys=True)


def owner_record(text: str) -> dict[str, str] | None:
    """A host row's owner as `host_owner` wrote it (None: an older version's, or none)."""
    try:
        got = json.loads(text)
    except ValueError:
        return None
    if isinstance(got, dict) and isinstance(got.get("instance"), str):
        return {str(k): str(v) for k, v in got.items()}
    return None


def clashes(theirs: str, mine: str) -> bool:
    """Whether two host-row owners are different instances (unknown owners never clash)."""
    a, b = owner_record(theirs), owner_record(mine)
    return a is not None and b is not None and a["instance"] != b["instance"]


class HostClash(LoopError):
    """Another live instance holds this host id."""


def clash_message(host: str, owner: str, ago: float) -> str:
    other = owner_record(owner) or {}
    pid = other.get("process", "").rsplit("/", 2)[-2:-1] or ["?"]
    return (f"host id {host!r} is in use by another live loop process (pid {pid[0]} on "
            f"{other.get('node', '?')}, state folder {other.get('dir', '?')}, seen "
            f"{max(ago, 0):.1f} s ago), on another machine or with another state folder: two "
            "hosts with one id take each other's sessions for dead. Give each host its own "
            f"id: --host-id ID, or ${HOST_ENV} (the default is the host's name)")


class Heartbeat:
    """A daemon thread renewing this process's claims and its host's `seen` time.

    `owner` (`host_owner`): the first beat refuses to start (`HostClash`) while another
    instance keeps the host's row beating; a clash found later (this process was paused
    past its lease and another instance took the id) is said, kept in `clash`, and
    `on_clash` is called once."""

    def __init__(self, store: Any, interval: float, owner: str = "",
                 on_clash: Callable[[], None] | None = None) -> None:
        self.store = store
        self.interval = interval
        self.owner = owner
        self.on_clash = on_clash
        self.clash = ""
        self.stop = threading.Event()
        self.failures = 0
        self.thread = threading.Thread(target=self._run, name="the-loop heartbeat",
                                       daemon=True)

    def start(self) -> Heartbeat:
        held = self._first_beat()
        if held is not None:  # alive, or a dead one whose row has not lapsed yet: watch it
            first = held["seen"]
            deadline = time.monotonic() + self.store.expiry + self.interval
            while held is not None and held["seen"] == first and time.monotonic() < deadline:
                time.sleep(min(0.2, self.interval))
                held = self._first_beat()
            if held is not None:
                self.store.db.close()
                why = clash_message(self.store.host, held["owner"], float(held["ago"]))
                raise HostClash(f"refusing to start: {why}")
        self.thread.start()
        return self

    def _first_beat(self) -> dict[str, Any] | None:
        """A beat before the daemon starts, tried again while the database is away (a
        restart, or a connection the server ended because this process was paused inside
        the beat's transaction) instead of ending the daemon as an unexpected error."""
        from the_loop.sqldb import retrying

        held: dict[str, Any] | None = retrying(lambda: self.store.beat(self.owner),
                                               "the host's first heartbeat")
        return held

    def _run(self) -> None:
        while not self.stop.wait(self.interval):
            try:
                held = self.store.beat(self.owner)
                self.failures = 0
                if held is not None and not self.clash:
                    self.clash = clash_message(self.store.host, held["owner"],
                                               float(held["ago"]))
                    sys.stderr.write(f"the-loop: stopping: {self.clash}\n")
                    if self.on_clash is not None:
                        self.on_clash()
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
