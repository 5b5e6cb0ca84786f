"""Who is acting: the operator at a terminal names a person; an agent is always itself.

The CLI belongs to the operator (the operating system authenticated them), so `--actor` and
`--author` name the person the operator acts for. A command run from inside an agent
session — its environment names the session, or its process session is a live harness's —
is the agent's: attributed to `agent:<session>`, it cannot name anyone else, and the loop
never lets it answer a gate. Keeping an agent from bypassing the CLI (writing the state
folder itself) takes OS isolation: see docs/security.md.
"""

from __future__ import annotations

import os
from pathlib import Path

from the_loop.errors import UsageError
from the_loop.runtime.db import Database
from the_loop.runtime.harness import held_session, session_alive
from the_loop.runtime.lease import host_id

AGENT_PREFIX = "agent:"


def agent_session(db: Database, sessions_dir: Path) -> str:
    """The agent session this process runs in ('' for the operator), by the first of:

    1. `THE_LOOP_SESSION` in its environment;
    2. a session lock it holds itself (inherited from the harness);
    3. its process session: the leader is a live harness the loop recorded, or
    4. the leader holds a session's lock — a harness the loop has not recorded yet (the
       moments between spawning a session and recording it, longer after a crash).
    """
    sid = os.environ.get("THE_LOOP_SESSION", "") or held_session("self", sessions_dir)
    if sid:
        return sid
    try:
        leader = os.getsid(0)
    except OSError:
        return ""
    row = db.conn.execute("SELECT id FROM sessions WHERE pid=? AND exited=0 AND host IN "
                          "('', ?)", (leader, host_id())).fetchone()
    if row is not None and session_alive(sessions_dir, str(row["id"]), leader):
        return str(row["id"])
    return held_session(leader, sessions_dir) if leader != os.getpid() else ""


def acting_as(db: Database, state_dir: Path, named: str | None, default: str,
              flag: str = "--actor") -> str:
    """The login input is attributed to: the agent inside a session, else whom the
    operator named (or `default`)."""
    sid = agent_session(db, state_dir / "sessions")
    if sid:
        me = AGENT_PREFIX + sid
        if named and named != me:
            raise UsageError(f"this command runs inside agent session {sid}: what it writes is "
                             f"the agent's ({me}); {flag} cannot name another person")
        return me
    return named or default
