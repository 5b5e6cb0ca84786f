"""Who is acting: the operator at a terminal names a person; an agent is always itself.

The CLI belongs to the operator (the operating system authenticated them), so `--actor` and
`--author` name the person the operator acts for. A command run from inside an agent
session — its environment names the session, or its process session is a live harness's —
is the agent's: attributed to `agent:<alias>` (`agent_login`: named after its session
without naming it), it cannot name anyone else, and the loop never lets it answer a gate.
Keeping an agent from bypassing the CLI (writing the state folder itself) takes OS
isolation: see docs/security.md.

Each session is handed a secret of its own (`THE_LOOP_SESSION_TOKEN`, made at launch:
`session_token`): the control plane's only agent credential, bound to that one session.
The loop keeps its sha256 (`token_digest`), never the token.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from the_loop.errors import UsageError
from the_loop.runtime.db import Database
from the_loop.runtime.harness import (
    held_locks,
    lock_key,
    process_start_time,
    recorded_process,
    session_alive,
)
from the_loop.runtime.lease import host_id

AGENT_PREFIX = "agent:"
#: The variable holding a session's own control-plane token (in its environment only).
SESSION_TOKEN_ENV = "THE_LOOP_SESSION_TOKEN"


def agent_login(sid: str) -> str:
    """The login a session's agent writes as: stable for the session, and not its id
    (an id is what a comment must never show: docs/security.md)."""
    import hashlib  # loads OpenSSL: `ask` names no agent and starts without it (issue 34)

    return AGENT_PREFIX + "a-" + hashlib.sha256(f"agent {sid}".encode()).hexdigest()[:12]


def token_digest(token: str) -> str:
    """What the loop stores of a session token: its sha256, in hex."""
    import hashlib

    return hashlib.sha256(token.encode()).hexdigest()


def session_token() -> tuple[str, str]:
    """A new session token and its digest (256 random bits)."""
    import secrets  # only a launch makes one: agent commands start without it

    token = secrets.token_urlsafe(32)
    return token, token_digest(token)


class Caller:
    """Whose command this is: the environment it was run with and its process. The
    default is this process; the agent door (cli/door.py) names the process at the other
    end of its socket, as the kernel gives it (SO_PEERCRED), and that process's own
    claims — the same variables a one-shot reads from its environment, no more."""

    __slots__ = ("env", "pid")

    def __init__(self, env: Mapping[str, str] | None = None, pid: int = 0) -> None:
        self.env: Mapping[str, str] = os.environ if env is None else env
        self.pid = pid  # 0: this process


SELF = Caller()


def agent_session(db: Database, sessions_dir: Path, caller: Caller = SELF) -> str:
    """The agent session the caller (this process by default) runs in ('' for the
    operator), by the first of:

    1. a session lock it holds itself (inherited from the harness);
    2. its process session: the leader is a live harness the loop recorded, or
    3. the leader holds a session's lock — a harness the loop has not recorded yet (the
       moments between spawning a session and recording it, longer after a crash);
    4. `THE_LOOP_SESSION` in its environment (a process that left both behind).

    What its process shows comes first: a session's id is no credential (the sessions
    folder's lock files name them all), so one claimed by a process of another session
    names that process's own. Nor is a lock anyone can take (`_own_lock`).
    """
    sid = _held(db, sessions_dir, caller.pid or "self") or \
        _led_by_session(db, sessions_dir, caller) or caller.env.get("THE_LOOP_SESSION", "")
    if sid or not caller.pid or process_start_time(caller.pid):
        return sid
    # Another process (the agent door's caller) that ended shows no descriptors and may be
    # a zombie in a process session of its own: what was read of it names no one.
    raise UsageError("the process that sent this command ended before it was answered, so "
                     "whose command it is cannot be told; run it from a process that waits "
                     "for its answer")


def _led_by_session(db: Database, sessions_dir: Path, caller: Caller) -> str:
    """The session whose harness leads the caller's process session (2 and 3 above)."""
    try:
        leader = os.getsid(caller.pid)
    except OSError:
        return ""
    row = db.conn.execute("SELECT id, started, exited, pid_start FROM sessions WHERE pid=? "
                          "AND host IN ('', ?) ORDER BY started DESC LIMIT 1",
                          (leader, host_id())).fetchone()
    if row is not None and _leads(sessions_dir, leader, dict(row)):
        return str(row["id"])
    return _held(db, sessions_dir, leader) if leader != (caller.pid or os.getpid()) else ""


def _leads(sessions_dir: Path, leader: int, row: dict[str, Any]) -> bool:
    """Whether session `row` (the newest recorded with the pid `leader`) is the one its
    process session belongs to. While that process runs, it is the harness if it is the
    process the loop recorded (the same start; a pid used again starts later:
    harness.recorded_process), whatever became of the lock: a harness that closes its lock
    descriptor is still its session's, though the loop records the session ended then.
    Once it has ended, its children (still in its process session: its pid is not used
    again while they live) are the session's while the lock is held."""
    same = recorded_process(leader, str(row.get("pid_start") or ""), float(row["started"]))
    if same is not None:
        return same
    return not row["exited"] and session_alive(sessions_dir, str(row["id"]), leader)


def _held(db: Database, sessions_dir: Path, pid: int | str) -> str:
    """The first session whose own lock `pid` holds (1 and 3 above), or ''."""
    for sid, file in held_locks(pid, sessions_dir):
        if _own_lock(db, sessions_dir, sid, file):
            return sid
    return ""


def _own_lock(db: Database, sessions_dir: Path, sid: str, file: tuple[int, int]) -> bool:
    """Whether a lock held on `file`, named as session `sid`'s, is that session's own.

    A session's lock is free once its processes end, before the loop has seen them end,
    and anyone can take it then (the lock files are its own user's), or lock a file of
    its own put in its place. So a recorded session's lock names it only while the
    session's harness (the pid recorded) holds it on the same file: it has been held since
    the launch, so every descriptor holding it is a copy of the harness's. A session not
    recorded yet has only its lock to show, on the file its launch made and recorded with
    the session's id on its item's row before the harness existed (`session_lock`,
    harness.make_lock): a lock on any other file is not the session's, whatever its name
    (a locked file renamed over the session's). A launch by a version that recorded none:
    a launch removes a file another process put at its name first and makes its own
    (harness._fresh_lock), so a lock on a file other than the one at that name is not the
    session's. (One with no file at its name still is: a harness that removed its own lock
    file is still an agent.)
    """
    row = db.conn.execute("SELECT pid, host FROM sessions WHERE id=?", (sid,)).fetchone()
    if row is None:
        launched = db.conn.execute("SELECT session_lock FROM work WHERE session_id=? AND "
                                   "session_lock<>''", (sid,)).fetchone()
        if launched is not None:
            return lock_key(*file) == str(launched["session_lock"])
        try:
            st = os.stat(sessions_dir / f"{sid}.lock")
        except FileNotFoundError:
            return True
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == file
    pid = int(row["pid"])
    return row["host"] in ("", host_id()) and pid > 0 and \
        (sid, file) in held_locks(pid, sessions_dir)


def acting_as(db: Database, state_dir: Path, named: str | None, default: str,
              flag: str = "--actor", caller: Caller = SELF) -> str:
    """The login input is attributed to: the agent inside a session, else whom the
    operator named (or `default`)."""
    return attributed(agent_session(db, state_dir / "sessions", caller), named, default, flag)


def attributed(sid: str, named: str | None, default: str, flag: str = "--actor") -> str:
    """`acting_as` for a caller whose agent session (`sid`, '' for the operator) is known."""
    if sid:
        me = agent_login(sid)
        if named and named != me:
            raise UsageError(f"this command runs inside agent session {sid}: what it writes is "
                             f"the agent's ({me}); {flag} cannot name another person")
        return me
    return named or default
