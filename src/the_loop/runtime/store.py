"""The loop's own state in SQL: work items' progress, durable steps, claims, sessions, cursors.

A *step* is one thing the loop owes a work item — start it, handle a person's input, enter a
node, launch a session, tell the channels about a phase, complete it. A step is written
before anything acts on it and marked done in the same transaction that records its effect,
so a crash anywhere leaves it pending and the next poll redoes it. The decisions of the
points a step fired are recorded on the step before the effect, so a redo never asks the
hooks again. A *claim* on a work item is the right to run its steps: one process at a time.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from the_loop.runtime.db import Database
from the_loop.runtime.harness import process_start_time
from the_loop.runtime.identity import AGENT_PREFIX
from the_loop.runtime.stepkinds import StepKind, step_kind

ACTIVE = ("armed", "running", "waiting", "gate")


@dataclass
class Step:
    seq: int
    key: str
    ref: str
    kind: StepKind
    payload: dict[str, Any]
    decisions: dict[str, Any]
    state: str
    outcome: str
    detail: str

    @classmethod
    def of(cls, row: sqlite3.Row) -> Step:
        key = str(row["key"])
        return cls(int(row["seq"]), key, str(row["ref"]), step_kind(str(row["kind"]), key),
                   json.loads(row["payload"]), json.loads(row["decisions"]),
                   str(row["state"]), str(row["outcome"]), str(row["detail"]))


def owner_id() -> str:
    """This thread as a claim owner: host, pid and the process's start time (a pid alone
    is reused; the pair is not), and the thread."""
    return f"{_process_id(os.getpid())}#{threading.get_ident()}"


@functools.lru_cache(maxsize=4)
def _process_id(pid: int) -> str:
    """host/pid/start time, read once per process (keyed by pid: a fork gets its own)."""
    return f"{socket.gethostname()}/{pid}/{process_start_time(pid)}"


def owner_alive(owner: str) -> bool:
    """Whether the process that wrote `owner` still runs (on another host: assume it does;
    a claim there is released by its owner — see docs/runtime.md for shared databases)."""
    try:
        host, pid_s, start = owner.split("#", 1)[0].rsplit("/", 2)
        pid = int(pid_s)
    except ValueError:
        return False
    if host != socket.gethostname():
        return True
    return process_start_time(pid) == start and start != ""


class Store:
    """The SQL for the loop's state; `Loop` keeps the orchestration."""

    def __init__(self, db: Database, redact: Callable[[str], str] = str) -> None:
        self.db = db
        self.redact = redact

    @property
    def me(self) -> str:
        return owner_id()

    # ------------------------------------------------------------------ work
    def work(self, ref: str) -> dict[str, Any] | None:
        row = self.db.conn.execute("SELECT * FROM work WHERE ref=?", (ref,)).fetchone()
        return dict(row) if row else None

    def set_work(self, ref: str, conn: sqlite3.Connection | None = None, **fields: Any) -> None:
        fields["updated"] = time.time()
        cols = ", ".join(f"{k}=?" for k in fields)
        sql = f"UPDATE work SET {cols} WHERE ref=?"
        if conn is not None:
            conn.execute(sql, (*fields.values(), ref))
            return
        with self.db.transaction() as c:
            c.execute(sql, (*fields.values(), ref))

    def refs(self, *states: str) -> list[str]:
        marks = ",".join("?" * len(states))
        return [str(r["ref"]) for r in self.db.conn.execute(
            f"SELECT ref FROM work WHERE state IN ({marks}) ORDER BY updated, ref", states)]

    def arm(self, ref: str, *, actor: str, source: str, cursors: dict[str, int]) -> int:
        """Arm `ref` and queue its start step in one transaction; 0 when already active."""
        with self.db.transaction() as conn:
            row = conn.execute("SELECT state, arm_seq FROM work WHERE ref=?", (ref,)).fetchone()
            if row is not None and row["state"] in ACTIVE:
                return 0
            seq = (row["arm_seq"] if row else 0) + 1
            conn.execute(
                "INSERT INTO work(ref, state, arm_seq, actor, source, updated) "
                "VALUES (?, 'armed', ?, ?, ?, ?) ON CONFLICT(ref) DO UPDATE SET "
                "state='armed', arm_seq=excluded.arm_seq, node='', session_id='', "
                "actor=excluded.actor, source=excluded.source, respawns=0, "
                "updated=excluded.updated", (ref, seq, actor, source, time.time()),
            )
            for endpoint, last in cursors.items():
                conn.execute("INSERT INTO cursors VALUES (?, ?) ON CONFLICT(ref) DO UPDATE "
                             "SET last=excluded.last", (endpoint, last))
            self.add_step(conn, StepKind.START.key(ref, seq), ref, StepKind.START,
                          {"actor": actor, "source": source, "arm_seq": seq})
        return int(seq)

    # ------------------------------------------------------------------ claims
    def claim(self, ref: str) -> bool:
        """Take the right to run `ref`'s steps; False while another live process holds it."""
        with self.db.transaction() as conn:
            row = conn.execute("SELECT claim FROM work WHERE ref=?", (ref,)).fetchone()
            if row is None:
                return False
            held = str(row["claim"])
            if held and held != self.me and owner_alive(held):
                return False
            conn.execute("UPDATE work SET claim=? WHERE ref=?", (self.me, ref))
        return True

    def claim_wait(self, ref: str, timeout: float) -> bool:
        """`claim`, retrying until `timeout` seconds have passed."""
        deadline = time.monotonic() + timeout
        while not self.claim(ref):
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def release(self, ref: str) -> None:
        with self.db.transaction() as conn:
            conn.execute("UPDATE work SET claim='' WHERE ref=? AND claim=?", (ref, self.me))

    # ------------------------------------------------------------------ steps
    def add_step(self, conn: sqlite3.Connection, key: str, ref: str, kind: StepKind,
                 payload: dict[str, Any]) -> None:
        """Queue a step (inside the caller's transaction); a key already queued is kept.
        A kind that is not a `StepKind`, or a payload its kind cannot run, is refused here."""
        if not isinstance(kind, StepKind):
            raise TypeError(f"a step's kind is a StepKind, not {kind!r}")
        kind.check(payload)
        now = time.time()
        conn.execute(
            "INSERT OR IGNORE INTO steps(key, ref, kind, payload, created, updated) "
            "VALUES (?,?,?,?,?,?)",
            (key, ref, kind.value, self.redact(json.dumps(payload)), now, now))

    def queue(self, key: str, ref: str, kind: StepKind, payload: dict[str, Any]) -> None:
        with self.db.transaction() as conn:
            self.add_step(conn, key, ref, kind, payload)

    @staticmethod
    def extend_queued_launch(conn: sqlite3.Connection, ref: str, node: str, endpoint: str,
                             text: str) -> str:
        """Append `text` to the prompt of `ref`'s launch at `node` that is queued and not yet
        decided (inside the caller's transaction); its key, or '' when there is none. A
        second launch would end that session before it read its input."""
        for row in conn.execute("SELECT key, payload, decisions FROM steps WHERE ref=? AND "
                                "kind=? AND state='pending' ORDER BY seq",
                                (ref, StepKind.LAUNCH.value)):
            payload = json.loads(row["payload"])
            if (json.loads(row["decisions"]) or payload["node"] != node
                    or payload["endpoint"] != endpoint):
                continue
            payload["prompt"] += text
            conn.execute("UPDATE steps SET payload=? WHERE key=?",
                         (json.dumps(payload), row["key"]))
            return str(row["key"])
        return ""

    def queued_by(self, ref: str, sid: str, node: str, epoch: int) -> set[StepKind]:
        """What session `sid` of `ref` queued of what an agent can: a question it asked,
        input it wrote (as `agent:<sid>`), its `graph complete` of `node` at `epoch` (still
        pending). Any of them proves that the session ran."""
        kinds: set[StepKind] = set()
        for row in self.db.conn.execute(
                "SELECT kind, payload, state FROM steps WHERE ref=? AND kind IN (?, ?, ?)",
                (ref, StepKind.QUESTION.value, StepKind.INPUT.value, StepKind.DONE.value)):
            p, kind = json.loads(row["payload"]), StepKind(row["kind"])
            asked = kind is StepKind.QUESTION and p.get("session_id") == sid
            wrote = kind is StepKind.INPUT and p.get("actor") == AGENT_PREFIX + sid
            done = (kind is StepKind.DONE and row["state"] == "pending"
                    and p.get("node") == node and int(p.get("epoch", -1)) == epoch)
            if asked or wrote or done:
                kinds.add(kind)
        return kinds

    def next_step(self, ref: str) -> Step | None:
        row = self.db.conn.execute(
            "SELECT * FROM steps WHERE state='pending' AND ref=? ORDER BY seq LIMIT 1",
            (ref,)).fetchone()
        return Step.of(row) if row else None

    def step(self, key: str) -> Step | None:
        row = self.db.conn.execute("SELECT * FROM steps WHERE key=?", (key,)).fetchone()
        return Step.of(row) if row else None

    def pending_refs(self) -> list[str]:
        return [str(r["ref"]) for r in self.db.conn.execute(
            "SELECT ref, MIN(seq) AS first FROM steps WHERE state='pending' GROUP BY ref "
            "ORDER BY first")]

    def has_pending(self, ref: str) -> bool:
        return self.db.conn.execute("SELECT 1 FROM steps WHERE state='pending' AND ref=? "
                                    "LIMIT 1", (ref,)).fetchone() is not None

    def record(self, step: Step, point: str, decisions: dict[str, Any]) -> None:
        """Record what a point decided for a step, before its effect."""
        step.decisions[point] = decisions
        with self.db.transaction() as conn:
            conn.execute("UPDATE steps SET decisions=?, updated=? WHERE key=?",
                         (self.redact(json.dumps(step.decisions)), time.time(), step.key))

    def finish(self, step: Step, outcome: str, detail: str = "",
               conn: sqlite3.Connection | None = None) -> None:
        """Mark a step done (inside the caller's transaction when one is given)."""
        sql = "UPDATE steps SET state='done', outcome=?, detail=?, updated=? WHERE key=?"
        args = (outcome, self.redact(detail), time.time(), step.key)
        if conn is not None:
            conn.execute(sql, args)
        else:
            with self.db.transaction() as c:
                c.execute(sql, args)
        step.state, step.outcome, step.detail = "done", outcome, detail

    # ------------------------------------------------------------------ input
    def cursor(self, ref: str) -> int:
        row = self.db.conn.execute("SELECT last FROM cursors WHERE ref=?", (ref,)).fetchone()
        return int(row["last"]) if row else 0

    def take_input(self, target: str, endpoint: str, comments: list[Any], skip: str) -> int:
        """Queue one input step per comment after the cursor and move the cursor, in one
        transaction: an input is durable before the cursor passes it. Returns how many."""
        n = 0
        with self.db.transaction() as conn:
            row = conn.execute("SELECT last FROM cursors WHERE ref=?", (endpoint,)).fetchone()
            last = int(row["last"]) if row else 0
            for c in comments:
                if c.id <= last:
                    continue
                last = c.id
                if c.author == skip:
                    continue
                self.add_step(conn, StepKind.INPUT.key(endpoint, c.id), target, StepKind.INPUT,
                              {"endpoint": endpoint, "comment": c.id, "actor": c.author,
                               "source": c.source})
                n += 1
            conn.execute("INSERT INTO cursors VALUES (?, ?) ON CONFLICT(ref) DO UPDATE SET "
                         "last=MAX(last, excluded.last)", (endpoint, last))
        return n

    # ------------------------------------------------------------------ sessions
    def session(self, sid: str) -> dict[str, Any] | None:
        row = self.db.conn.execute("SELECT * FROM sessions WHERE id=?", (sid,)).fetchone()
        return dict(row) if row else None

    def session_of_step(self, key: str) -> dict[str, Any] | None:
        row = self.db.conn.execute("SELECT * FROM sessions WHERE step=?", (key,)).fetchone()
        return dict(row) if row else None

    def register_session(self, sid: str, step_key: str, *, ref: str, endpoint: str,
                         harness: str, pid: int, node: str, log: str,
                         state: str = "running") -> None:
        """A launched session, and its item running it (or `waiting` for the answer to a
        question the session already asked), in one transaction."""
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO sessions(id, ref, endpoint, harness, pid, node, "
                "started, log, step) VALUES (?,?,?,?,?,?,?,?,?)",
                (sid, ref, endpoint, harness, pid, node, time.time(), log, step_key))
            self.set_work(ref, conn, state=state, node=node, session_id=sid)

    def live_sessions(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self.db.conn.execute(
            "SELECT * FROM sessions WHERE exited=0 ORDER BY started")]

    def session_ended(self, sid: str, code: int | None) -> bool:
        """Record a session's end; False when another process already did."""
        with self.db.transaction() as conn:
            cur = conn.execute("UPDATE sessions SET exited=1, code=? WHERE id=? AND exited=0",
                               (code, sid))
        return cur.rowcount == 1
