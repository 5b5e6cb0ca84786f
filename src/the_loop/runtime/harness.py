"""Harness sessions: launch any command with the prompt on stdin and its output in a log file."""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import TYPE_CHECKING, Final

from the_loop.config import ENV_VAR
from the_loop.errors import LoopError
from the_loop.util import made_afresh

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


def make_lock(log_dir: Path, session_id: str) -> tuple[int, str]:
    """The lock file of a session about to launch, made and locked now (`_fresh_lock`): its
    descriptor, which `launch` hands to the harness, and its `lock_key`, which the loop
    records with the session's id before the harness exists, so that the file can be told
    from one put at its name later (`holding`). Raises `LoopError` when it cannot be made."""
    try:
        log_dir.mkdir(parents=True, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise LoopError(f"cannot make the sessions folder {log_dir}: {exc.strerror or exc}. "
                        "Remove what is at that name, then re-arm the item with "
                        "`the-loop start`") from None
    fd = _fresh_lock(log_dir / f"{session_id}.lock")
    st = os.fstat(fd)
    return fd, lock_key(st.st_dev, st.st_ino)


def lock_key(dev: int, ino: int) -> str:
    """A lock file's identity as the loop records it: `device:inode` (as stat gives them)."""
    return f"{dev}:{ino}"


def launch(
    argv: tuple[str, ...] | list[str], *, prompt: str, cwd: Path, config_path: Path | None,
    work_item: str, session_id: str, log_dir: Path, env: dict[str, str],
    lock_fd: int | None = None,
) -> tuple[Launched, subprocess.Popen[bytes]]:
    """Start the process with the prompt as its stdin (a file, removed once it is open).

    The session holds an exclusive lock on `<log_dir>/<id>.lock` for as long as it (or a
    child that kept the descriptor) runs: `session_alive` asks the lock, never a bare pid.
    `lock_fd`: that lock, made by `make_lock` (made here when not given); closed here
    either way. Raises `LoopError` when the command cannot be started (not found, not
    executable).
    """
    if lock_fd is None:
        lock_fd, _ = make_lock(log_dir, session_id)
    log_path = log_dir / f"{session_id}.log"
    # The prompt is a file the harness reads as stdin: a loop killed right after the
    # launch cannot leave a harness running on half a prompt.
    prompt_path = log_dir / f"{session_id}.prompt"
    env = dict(env)
    env[ENV_VAR] = str(config_path or "")
    env["THE_LOOP_WORK_ITEM"] = work_item
    env["THE_LOOP_SESSION"] = session_id
    try:
        # Written and read through one descriptor of a file made now: no other process's
        # file (a link put at its name) is written, and none replaces it before it is read.
        stdin_fd = _fresh(prompt_path, os.O_RDWR)
        try:
            os.write(stdin_fd, prompt.encode("utf-8"))
            os.lseek(stdin_fd, 0, os.SEEK_SET)
            proc = _spawn(argv, stdin_fd, log_path, cwd, env, lock_fd)
        finally:
            os.close(stdin_fd)
        if os.environ.get("THE_LOOP_FAILPOINT") == "launch":  # crash-safety tests only
            os._exit(86)
        os.write(lock_fd, str(proc.pid).encode())
    finally:
        os.close(lock_fd)  # the session's copy keeps the lock
        with contextlib.suppress(OSError):  # (a folder put there: the prompt was read)
            prompt_path.unlink(missing_ok=True)
    return Launched(session_id, proc.pid, log_path), proc


def _spawn(argv: tuple[str, ...] | list[str], stdin_fd: int, log_path: Path, cwd: Path,
           env: dict[str, str], lock_fd: int) -> subprocess.Popen[bytes]:
    """The harness's process, in a process session of its own, holding the lock's copy."""
    import subprocess

    # Made now too: a FIFO at its name would block the open, a link would send the
    # harness's output to another file. (A session's launch starts no harness once one ran.)
    log_fd = _fresh(log_path, os.O_WRONLY | os.O_APPEND)
    try:
        return subprocess.Popen(
            list(argv), stdin=stdin_fd, stdout=log_fd, stderr=subprocess.STDOUT,
            cwd=str(cwd), env=env, start_new_session=True, pass_fds=(lock_fd,),
        )
    except OSError as exc:
        raise LoopError(
            f"cannot launch {argv[0]!r}: {exc.strerror or exc} (check `harnesses:` "
            "→ command in cli-config.yaml)"
        ) from None
    finally:
        os.close(log_fd)


#: Times a launch makes its session's lock file afresh when another process keeps
#: putting one of its own in its place (`_fresh_lock`).
_LOCK_TRIES = 5


def _fresh_lock(path: Path) -> int:
    """A new lock file at `path`, made and locked by this process (its descriptor).

    Whatever is at `path` is removed first. A launch's session has no lock file yet: one
    already there was left by an earlier session (after a crash the launch is redone only
    when that session is not found running: launching._start), or was put there by another
    process of the same user, such as an agent of another session that worked out this
    session's id and locked the file first, to block the launch or to pass for this
    session (identity._own_lock). Its lock stays on the removed file and names no one.
    Raises `LoopError` when another process keeps putting a file in its place."""
    for _ in range(_LOCK_TRIES):
        fd = _fresh(path, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # locked by another between the two calls
            os.close(fd)
            continue
        return fd
    raise _crowded(path)


def _fresh(path: Path, mode: int) -> int:
    """A file made now at `path` (what was there removed first: a FIFO, a link), open with
    `mode`. Raises `LoopError` when it cannot be made (a folder at its name), or another
    process keeps putting a file in its place."""
    try:
        return made_afresh(path, mode, _LOCK_TRIES)
    except FileExistsError:
        raise _crowded(path) from None
    except OSError as exc:  # a folder at its name, a folder not writable: said, and the
        # launch fails at once (its item no longer names the session: a lock put at its
        # name later is not taken for its harness, launching._start)
        raise LoopError(
            f"cannot make the session's file {path}: {exc.strerror or exc}. Remove what is "
            "at that name, then re-arm the item with `the-loop start`") from None


def _crowded(path: Path) -> LoopError:
    return LoopError(
        f"cannot make the session's file {path}: another process keeps putting a file of its "
        "own in its place. Find it (`fuser` on the sessions folder), stop it, then re-arm "
        "the item with `the-loop start`")


def session_alive(log_dir: Path, session_id: str, pid: int,
                  held: set[bytes] | None = None) -> bool:
    """Whether a session still runs: its lock is held. Without a lock file (a session from
    an older version), the pid and its start time decide. `held`: the table of locks as
    `held_files` read it just now, for a caller that asks of several sessions at once."""
    try:
        if _locked(log_dir / f"{session_id}.lock", held=held):
            return True
    except FileNotFoundError:
        return pid > 0 and alive(pid)
    if pid:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # reap our own child
    return False


def lock_pid(log_dir: Path, session_id: str, key: str = "") -> int:
    """The pid the launcher wrote into a session's lock file (0 when it did not; with
    `key`, when the file at its name is not that one, `lock_key`)."""
    try:  # without blocking on a FIFO put at its name, nor following a link
        fd = os.open(log_dir / f"{session_id}.lock",
                     os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return 0
    try:
        st = os.fstat(fd)
        if key and lock_key(st.st_dev, st.st_ino) != key:
            return 0
        return _pid_in(os.read(fd, 32))
    except OSError:
        return 0
    finally:
        os.close(fd)


def _pid_in(written: bytes) -> int:
    """The pid a launcher wrote into a lock file (0 when there is none)."""
    text = written.decode(errors="replace").strip()
    return int(text) if text.isdigit() and len(text) < 10 else 0


def holding(log_dir: Path, session_id: str, key: str) -> list[Path]:
    """The descriptors (/proc/<pid>/fd/<n>, this process's aside) through which the lock
    on the session's own lock file is held: the file its launch made, `key` (`lock_key`),
    whatever is at its name now (a locked file of another process renamed over it)."""
    return [fd for pid in _others() for name, file, fd in _lock_descriptors(pid, log_dir)
            if name == session_id and lock_key(*file) == key]


def pid_written(fd: Path) -> int:
    """The pid the launcher wrote into the lock file a holder's descriptor `fd` is open on
    (0 when none was written yet, or the descriptor is gone)."""
    try:
        with open(fd, "rb") as f:
            return _pid_in(f.read(32))
    except OSError:
        return 0


def lock_holders(log_dir: Path, session_id: str) -> list[int]:
    """Every process that holds a session's lock (a harness's children included), this
    process aside."""
    return [int(pid) for pid in _others()
            if any(sid == session_id for sid, _ in held_locks(pid, log_dir))]


def _others() -> list[str]:
    """Every process's pid (as /proc names it) but this process's."""
    return [proc.name for proc in Path("/proc").glob("[0-9]*") if int(proc.name) != os.getpid()]


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
    return [(name, file) for name, file, _ in _lock_descriptors(pid, log_dir)]


def _lock_descriptors(pid: int | str,
                      log_dir: Path) -> list[tuple[str, tuple[int, int], Path]]:
    """`held_locks`, with the descriptor (/proc/<pid>/fd/<n>) each lock is held through."""
    prefix = os.path.realpath(log_dir) + os.sep
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return []
    held: list[tuple[str, tuple[int, int], Path]] = []
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
                held.append((name, (st.st_dev, st.st_ino), fd))
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


def _locked(path: Path, folder: Path | None = None, held: set[bytes] | None = None) -> bool:
    """Whether the file at `path` (a lock file in `folder`, by default its parent, or a
    /proc/<pid>/fd/<n> link to one, which reaches it even when removed) is flock-ed by
    someone. Raises `OSError` (`FileNotFoundError` when there is no file).

    The kernel's table of locks (/proc/locks) is read, by the file's device and inode:
    asking never takes the lock. A probe that took it for an instant would, in that
    instant, be a holder of the session's lock to anyone scanning for them (`lock_holders`:
    `end_session` signals the holders). Where the table names files otherwise than their
    stat does (btrfs names a lock by the volume's device, stat by the subvolume's), or
    there is no procfs, the probe is what there is: never a held lock taken for a free one.
    """
    st = os.stat(path)
    held = held if held is not None else held_files()
    if held is None or not _table_agrees(folder or path.parent, st.st_dev):
        return _probed(path)
    return _lock_key(st) in held


def held_files() -> set[bytes] | None:
    """The files flock locks are held on now, as /proc/locks names them (None without
    procfs): read once by a caller that asks whether several sessions live (`_locked`)."""
    table = _lock_table()
    return None if table is None else _held_keys(table)


def _lock_table() -> bytes | None:
    try:
        return Path("/proc/locks").read_bytes()
    except OSError:
        return None


def _lock_key(st: os.stat_result) -> bytes:
    """How /proc/locks names the file `st` is of: its device and inode, MAJ:MIN:INODE."""
    return f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}".encode()


def _held_keys(table: bytes) -> set[bytes]:
    """The files the table's flock locks are held on ("->" marks a process waiting for
    one, not holding it). A line: `1: FLOCK  ADVISORY  WRITE 4950 fe:00:2146691 0 EOF`."""
    keys: set[bytes] = set()
    for line in table.splitlines():
        fields = line.split()
        if len(fields) > 5 and fields[1] == b"FLOCK":
            keys.add(fields[5])
    return keys


#: Per device: whether /proc/locks names the files on it as their stat does (`_locked`).
_AGREES: dict[int, bool] = {}


def _table_agrees(folder: Path, dev: int) -> bool:
    """Asked once per device and process: a file of this process's own in `folder`, locked,
    is looked for in the table."""
    known = _AGREES.get(dev)
    if known is None:
        known = _AGREES[dev] = _finds_own_lock(folder)
    return known


def _finds_own_lock(folder: Path) -> bool:
    import threading

    # (not a .lock: it names no session)
    name = folder / f".alive-{os.getpid()}-{threading.get_ident()}.probe"
    try:
        fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        table = _lock_table()
        return table is not None and _lock_key(os.fstat(fd)) in _held_keys(table)
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            name.unlink()


def _probed(path: Path) -> bool:
    """Whether a fresh open of `path` is refused the lock (`_locked` without procfs)."""
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


def started_at(pid: int) -> float | None:
    """When process `pid` started, in seconds since the epoch (None: it has ended, or there
    is no procfs to tell)."""
    ticks = process_start_time(pid)
    if not ticks.isdigit():
        return None
    try:
        stat = Path("/proc/stat").read_text(encoding="ascii", errors="replace")
        boot = next(int(line.split()[1]) for line in stat.splitlines()
                    if line.startswith("btime "))
    except (OSError, StopIteration, ValueError, IndexError):
        return None
    return boot + int(ticks) / os.sysconf("SC_CLK_TCK")


def started_before(pid: int, recorded: float) -> bool | None:
    """Whether process `pid` started no later than `recorded` (seconds since the epoch, with
    2 s of slack for a clock stepped meanwhile): a pid used again belongs to a process that
    started later. None when the process has ended, or there is no procfs to tell."""
    began = started_at(pid)
    return None if began is None else began <= recorded + 2.0


def recorded_process(pid: int, start: str, recorded: float) -> bool | None:
    """Whether process `pid` is the one the loop recorded with that pid: the same start
    (`start`: its `process_start_time` when the session was recorded; clock ticks since
    boot, which no step of the clock moves), or, when that was not known (a session
    recorded by an older version, or after its harness had ended), one that started no
    later than `recorded` (`started_before`). None when the process has ended, or there is
    no procfs to tell."""
    if start.isdigit():
        now = process_start_time(pid)
        return now == start if now.isdigit() else None
    return started_before(pid, recorded)


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
