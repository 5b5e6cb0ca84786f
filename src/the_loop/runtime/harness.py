"""Harness sessions: launch any command with the prompt on stdin and its output in a log file."""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import TYPE_CHECKING, Final

from the_loop.config import ENV_VAR
from the_loop.errors import LoopError

if TYPE_CHECKING:  # a launch imports it: the session's own commands never launch (issue 34)
    import subprocess


class Launched:
    __slots__ = ("log", "pid", "session_id")

    def __init__(self, session_id: str, pid: int, log: Path) -> None:
        self.session_id: Final = session_id
        self.pid: Final = pid
        self.log: Final = log


#: What every harness gets from the daemon's environment (by name); `harnesses[].env`
#: adds more. A variable named by any tokenEnv is never passed, whatever lists it.
SAFE_ENV = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TERM", "TZ", "TMPDIR",
    "VIRTUAL_ENV", "PYTHONPATH", "PYTHONPYCACHEPREFIX", "PYTHONDONTWRITEBYTECODE",
    "PYTHONUTF8", "PYTHONIOENCODING", "PYTHONHASHSEED",
})


def harness_env(passed: tuple[str, ...], secret_names: set[str]) -> dict[str, str]:
    """The environment a harness starts with: the safe base, the names its entry lists, no
    variable that carries a secret."""
    env = {k: v for k, v in os.environ.items()
           if (k in SAFE_ENV or k.startswith("LC_") or k in passed)}
    for name in secret_names:
        env.pop(name, None)
    return env


def launch(
    argv: tuple[str, ...] | list[str], *, prompt: str, cwd: Path, config_path: Path | None,
    work_item: str, session_id: str, log_dir: Path, env: dict[str, str],
) -> tuple[Launched, subprocess.Popen[bytes]]:
    """Start the process with the prompt as its stdin (a file, removed once it is open).

    The session holds an exclusive lock on `<log_dir>/<id>.lock` for as long as it (or a
    child that kept the descriptor) runs: `session_alive` asks the lock, never a bare pid.
    Raises `LoopError` when the command cannot be started (not found, not executable).
    """
    import subprocess

    log_dir.mkdir(parents=True, mode=0o700, exist_ok=True)
    log_path = log_dir / f"{session_id}.log"
    # The prompt is a file the harness reads as stdin: a loop killed right after the
    # launch cannot leave a harness running on half a prompt.
    prompt_path = log_dir / f"{session_id}.prompt"
    fd = os.open(prompt_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, prompt.encode("utf-8"))
    finally:
        os.close(fd)
    lock_fd = os.open(log_dir / f"{session_id}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    env = dict(env)
    env[ENV_VAR] = str(config_path or "")
    env["THE_LOOP_WORK_ITEM"] = work_item
    env["THE_LOOP_SESSION"] = session_id
    log_fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    stdin_fd = os.open(prompt_path, os.O_RDONLY)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX)
        try:
            proc = subprocess.Popen(
                list(argv), stdin=stdin_fd, stdout=log_fd, stderr=subprocess.STDOUT,
                cwd=str(cwd), env=env, start_new_session=True, pass_fds=(lock_fd,),
            )
        except OSError as exc:
            raise LoopError(
                f"cannot launch {argv[0]!r}: {exc.strerror or exc} (check `harnesses:` "
                "→ command in cli-config.yaml)"
            ) from None
        if os.environ.get("THE_LOOP_FAILPOINT") == "launch":  # crash-safety tests only
            os._exit(86)
        os.write(lock_fd, str(proc.pid).encode())
    finally:
        for f in (stdin_fd, log_fd, lock_fd):  # the session's copy keeps the lock
            os.close(f)
        prompt_path.unlink(missing_ok=True)
    return Launched(session_id, proc.pid, log_path), proc


def session_alive(log_dir: Path, session_id: str, pid: int) -> bool:
    """Whether a session still runs: its lock is held. Without a lock file (a session from
    an older version), the pid and its start time decide."""
    try:
        if _locked(log_dir / f"{session_id}.lock"):
            return True
    except FileNotFoundError:
        return pid > 0 and alive(pid)
    if pid:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # reap our own child
    return False


def lock_pid(log_dir: Path, session_id: str) -> int:
    """The pid the launcher wrote into a session's lock file (0 when it did not)."""
    try:
        text = (log_dir / f"{session_id}.lock").read_text(errors="replace").strip()
    except OSError:
        return 0
    return int(text) if text.isdigit() and len(text) < 10 else 0


def lock_holders(log_dir: Path, session_id: str) -> list[int]:
    """Every process that holds a session's lock (a harness's children included), this
    process aside."""
    return [int(proc.name) for proc in Path("/proc").glob("[0-9]*")
            if int(proc.name) != os.getpid()
            and any(sid == session_id for sid, _ in held_locks(proc.name, log_dir))]


def session_members(leader: int) -> list[int]:
    """Every process in the process session `leader` began (a harness's: its children in
    process groups of their own too), this process aside."""
    members: list[int] = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text(encoding="ascii", errors="replace").rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if len(fields) > 3 and fields[3] == str(leader):
            members.append(int(stat.parent.name))
    return [pid for pid in members if pid != os.getpid()]


def held_locks(pid: int | str, log_dir: Path) -> list[tuple[str, tuple[int, int]]]:
    """The session locks `pid` ("self" for this process) holds, in descriptor order: each
    session's id and the file it is held on (device, inode).

    A harness keeps its session's lock descriptor, locked, for its whole life, and its
    children inherit it unless they close it: so a process holding one is inside that
    session, whether or not the loop has recorded the session yet (`identity`). The lock
    must really be held (a descriptor merely open on a lock file names nobody), and a lock
    file removed from the folder still counts (its descriptor is what holds the lock). The
    file tells one lock from another of the same name (a lock file replaced meanwhile).
    """
    prefix = os.path.realpath(log_dir) + os.sep
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return []
    held: list[tuple[str, tuple[int, int]]] = []
    for fd in fds:
        try:
            target = os.readlink(fd).removesuffix(" (deleted)")
        except OSError:
            continue
        name = target[len(prefix):-len(".lock")] if target.startswith(prefix) and \
            target.endswith(".lock") else ""
        try:
            if name and os.sep not in name and _holds(fd):
                st = os.stat(fd)
                held.append((name, (st.st_dev, st.st_ino)))
        except OSError:  # the descriptor closed meanwhile, or cannot be opened again
            continue
    return held


def _holds(fd: Path) -> bool:
    """Whether the descriptor `fd` (/proc/<pid>/fd/<n>) is one the lock is held through: the
    harness's own, or a child's copy of it. Its fdinfo lists the lock (Linux 4.1 and later);
    a descriptor merely open on the lock file — a reader's, another poller's asking whether
    the session is alive — lists none, so it names no session and is never signalled.
    Raises `OSError` when the descriptor is gone."""
    info = (fd.parent.parent / "fdinfo" / fd.name).read_text(encoding="ascii", errors="replace")
    return any(line.startswith("lock:") and " FLOCK " in line for line in info.splitlines())


def _locked(path: Path) -> bool:
    """Whether the file at `path` (a lock file, or a /proc/<pid>/fd/<n> link to one, which
    reaches it even when removed) is flock-ed by someone: a fresh open of it is refused the
    lock. Raises `OSError` (`FileNotFoundError` when there is no file)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing releases a lock we took
    return False


def process_start_time(pid: int) -> str:
    """When a process started (clock ticks since boot, from /proc); '' when it is gone.
    A pid is reused; a pid with its start time names one process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return ""
        except PermissionError:
            return "?"
        return "?"  # no procfs (not Linux): the pid is all we know
    fields = stat.rsplit(")", 1)[-1].split()
    if not fields or fields[0] == "Z":
        return ""
    return fields[19] if len(fields) > 19 else "?"


def alive(pid: int) -> bool:
    """Whether a process we launched is still running (reaps it if it is our child)."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A session launched by a process that has since exited is reparented; until its new
    # parent reaps it, it is a zombie that kill(0) still finds. A zombie has ended.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return True  # no procfs (not Linux): kill(0) is all we know
    return stat.rsplit(")", 1)[-1].split()[:1] != ["Z"]
