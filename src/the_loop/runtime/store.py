"""The loop's own state in SQL: work items' progress, durable steps, claims, sessions, cursors.

A *step* is one thing the loop owes a work item — start it, handle a person's input, enter a
node, launch a session, tell the channels about a phase, complete it. A step is written
before anything acts on it and marked done in the same transaction that records its effect,
so a crash anywhere leaves it pending and the next poll redoes it. The decisions of the
points a step fired are recorded on the step before the effect, so a redo never asks the
hooks again. A *claim* on a work item is the right to run its steps: one owner at a time, a
lease with an expiry (renewed by the owner's heartbeat) and a fencing number that grows with
every new owner (see db.py: a write under a stale fencing number is refused). Every
statement here runs on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from the_loop.errors import InputTooLong
from the_loop.runtime.db import Database
from the_loop.runtime.identity import AGENT_PREFIX, agent_login
from the_loop.runtime.input_bound import LAUNCH_FULL
from the_loop.runtime.lease import clashes, host_id, owner_dead_here, owner_id, process_owner
from the_loop.runtime.stepactions import StepAction, UnknownStepAction, step_action
from the_loop.sqldb import SQLITE, Conn

ACTIVE = ("armed", "running", "waiting", "gate")


class Step:
    """One step as stored (a plain class, as the runtime's other records are: graph.py)."""

    __slots__ = ("action", "decisions", "detail", "key", "outcome", "payload", "ref", "seq",
                 "state")

    def __init__(self, seq: int, key: str, ref: str, action: StepAction,
                 payload: dict[str, Any], decisions: dict[str, Any], state: str, outcome: str,
                 detail: str) -> None:
        self.seq = seq
        self.key = key
        self.ref = ref
        self.action = action
        self.payload = payload
        self.decisions = decisions
        self.state = state
        self.outcome = outcome
        self.detail = detail

    @classmethod
    def of(cls, row: Any) -> Step:
        key = str(row["key"])
        return cls(int(row["seq"]), key, str(row["ref"]), step_action(str(row["kind"]), key),
                   json.loads(row["payload"]), json.loads(row["decisions"]),
                   str(row["state"]), str(row["outcome"]), str(row["detail"]))


_WORK = ("ref", "state", "arm_seq", "node", "session_id", "actor", "source", "respawns",
         "updated", "epoch", "claim", "claim_until", "fence", "host", "session_key",
         "session_lock")
#: A step to queue: its key, its item, its action and its payload (Store.add_steps).
Owed = tuple[str, str, StepAction, dict[str, Any]]
_STEP = ("seq", "key", "ref", "kind", "payload", "decisions", "state", "outcome", "detail")
#: A visit's pending steps and its item's work row, in one statement (one row per step, in
#: order; one row with NULL step columns: nothing pending; no work row: NULL work columns).
_NEXT_WITH_WORK = (
    "SELECT " + ", ".join(f"w.{c} AS {c}" for c in _WORK) + ", "
    + ", ".join(f"s.{c} AS s_{c}" for c in _STEP)
    + " FROM (SELECT 1 AS one) AS o LEFT JOIN (SELECT * FROM work WHERE ref=?{lock}) AS w ON 1=1 "
    "LEFT JOIN (SELECT * FROM steps WHERE state='pending' AND ref=?) AS s ON 1=1 ORDER BY s.seq")
#: The same, its work row locked (PostgreSQL): the read that opens a visit's transaction is
#: then its fence check too (Database.fence_due), one statement where there were two.
_NEXT_LOCKED = _NEXT_WITH_WORK.format(lock=" FOR UPDATE")
_NEXT_WITH_WORK = _NEXT_WITH_WORK.format(lock="")


def _pending_column() -> str:
    """For a visit's claim on SQLite (`Store.claim`): the claimed item's pending steps, as
    one JSON array column of the claim's RETURNING, so the visit starts from them with no
    read of its own. Only SQLite: there the claim runs under the database's one write lock,
    so it sees every step committed before it. On PostgreSQL a statement reads as of its
    start (READ COMMITTED), and an agent's `graph complete` that committed its step (taking
    no claim, Store.queue_unclaimed) between the claim's start and its taking the row would
    be missing from what it returned; there the visit's first read, after the claim,
    finds it."""
    fields = ", ".join(f"'{c}', s.{c}" for c in _STEP)
    return (f", (SELECT json_group_array(json_object({fields})) FROM steps s WHERE "
            "s.ref=work.ref AND s.state='pending') AS pending_steps")


def _steps_in(value: str) -> list[Step] | None:
    """The pending steps a claim returned (`_pending_column`), in order; None when one is of
    an action this version does not know (`next_step` reads them and says so)."""
    rows = json.loads(value)
    try:
        return [Step.of(r) for r in sorted(rows, key=lambda r: int(r["seq"]))]
    except UnknownStepAction:
        return None


#: A session's row (Store.register_session).
_REGISTER = ("INSERT INTO sessions(id, ref, endpoint, harness, pid, node, started, log, step, "
             "host, pid_start)")
#: A point's decisions on its step (Store.record).
_DECISIONS = "UPDATE steps SET decisions=?, updated=? WHERE key=?"


class Store:
    """The SQL for the loop's state; `Loop` keeps the orchestration."""

    def __init__(self, db: Database, redact: Callable[[str], str] = str, *,
                 expiry: float = 30.0) -> None:
        self.db = db
        self.redact = redact
        self.expiry = expiry
        self.now = db.dialect.now

    @property
    def me(self) -> str:
        return owner_id()

    @property
    def host(self) -> str:
        return host_id()

    # ------------------------------------------------------------------ work
    def work(self, ref: str) -> dict[str, Any] | None:
        """`ref`'s work row (in a visit, as its last `next_step` read it, with what the
        visit wrote since: db.memo)."""
        memo = self.db.memo()
        if memo is not None and ("work", ref) in memo:
            got = memo["work", ref]
            return dict(got) if got is not None else None
        row = self.db.conn.execute("SELECT * FROM work WHERE ref=?", (ref,)).fetchone()
        w = {**row, **self.db.deferred_work(ref)} if row else None
        if memo is not None:
            memo["work", ref] = dict(w) if w is not None else None
        return w

    def set_work(self, ref: str, conn: Conn | None = None, **fields: Any) -> None:
        fields["updated"] = time.time()
        if not self.db.defer_work(ref, fields):  # (the item a visit holds: written as the
            # visit's transaction commits, db._seal)
            sql = f"UPDATE work SET {', '.join(f'{k}=?' for k in fields)} WHERE ref=?"
            if conn is not None:
                conn.execute(sql, (*fields.values(), ref))
            else:
                with self.db.transaction() as c:
                    c.execute(sql, (*fields.values(), ref))
        memo = self.db.memo()
        if memo is not None and memo.get(("work", ref)) is not None:
            memo["work", ref].update(fields)

    def refs(self, *states: str) -> list[str]:
        marks = ",".join("?" * len(states))
        return [str(r["ref"]) for r in self.db.conn.execute(
            f"SELECT ref FROM work WHERE state IN ({marks}) ORDER BY updated, ref", states)]

    def arm(self, ref: str, *, actor: str, source: str, cursors: dict[str, int]) -> int:
        """Arm `ref` and queue its start step in one transaction; 0 when already active."""
        with self.db.transaction() as conn:
            self.db.lock(conn, f"arm {ref}")
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
                conn.execute("INSERT INTO cursors(ref, last) VALUES (?, ?) ON CONFLICT(ref) "
                             "DO UPDATE SET last=excluded.last", (endpoint, last))
            self.add_step(conn, StepAction.START.key(ref, seq), ref, StepAction.START,
                          {"actor": actor, "source": source, "arm_seq": seq})
        memo = self.db.memo()
        if memo is not None:
            memo.pop(("work", ref), None)
        return int(seq)

    # ------------------------------------------------------------------ claims
    def claim(self, ref: str) -> bool:
        """Take the right to run `ref`'s steps; False while another owner's lease lives
        (or another process is taking it at this very moment: SKIP LOCKED, no waiting).

        One statement when the claim is free, lapsed or already ours (the usual case); the
        longer path reads the holder first, to ask whether it is a dead process of this host.
        """
        me = self.me
        memo = self.db.memo()
        rows = self.db.conn.execute(
            f"UPDATE work SET claim=?, claim_until={self.now} + ?, "
            "fence=fence + CASE WHEN claim=? THEN 0 ELSE 1 END WHERE ref IN (SELECT ref FROM "
            f"work WHERE ref=? AND (claim=? OR claim='' OR claim_until <= {self.now})"
            f"{self.db.dialect.skip_locked}) RETURNING *"
            f"{_pending_column() if memo is not None and self.db.dialect is SQLITE else ''}",
            (me, self.expiry, me, ref, me)).fetchall()  # all: the statement ends, and commits
        if rows:
            # In a batch's open transaction (an agent's command: db.py), the row is locked
            # by this very statement: that transaction's fence is checked already.
            self.db.hold(ref, me, int(rows[0]["fence"]), locked=self.db.pending())
            if memo is not None:  # a visit (db.batched) starts from the row it claimed,
                w = dict(rows[0])  # and (SQLite) from the steps pending then
                queue = _steps_in(w.pop("pending_steps")) if "pending_steps" in w else None
                memo["work", ref] = w
                if queue is not None:
                    memo["queue", ref] = queue
            return True
        return self._claim_held(ref, me)

    def _claim_held(self, ref: str, me: str) -> bool:
        try:
            return self._take_held(ref, me)
        finally:
            self.db.settle()  # in a visit's batch too: decided and committed, never held

    def _take_held(self, ref: str, me: str) -> bool:
        with self.db.transaction() as conn:
            row = conn.execute(f"SELECT claim, claim_until, fence, {self.now} AS now FROM work "
                               f"WHERE ref=?{self.db.dialect.skip_locked}", (ref,)).fetchone()
            if row is None:
                return False
            held, fence = str(row["claim"]), int(row["fence"])
            if held != me:
                if held and float(row["claim_until"]) > float(row["now"]) and \
                        not owner_dead_here(held):
                    return False
                fence += 1  # a new owner: whatever the last one still writes is refused
            conn.execute(f"UPDATE work SET claim=?, claim_until={self.now} + ?, fence=? "
                         "WHERE ref=?", (me, self.expiry, fence, ref))
        self.db.hold(ref, me, fence, locked=self.db.pending())
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
        """Give the claim up (nothing is written when a newer owner has it). In a visit's
        batch (db.batched) it is the batch's last statement, committed with what the visit
        wrote; otherwise one statement of its own."""
        try:
            if not self.db.settle_released(ref):  # (the batch's last statement, fenced)
                self.db.conn.execute("UPDATE work SET claim='', claim_until=0 WHERE ref=? "
                                     "AND claim=?", (ref, self.me))  # it guards itself
                self.db.settle()
        finally:
            self.db.drop(ref)

    def beat(self, owner: str = "") -> dict[str, Any] | None:
        """Renew every claim this process holds, and say this host is alive -- unless its
        row is held by another instance (lease.host_owner) that beat within the lease:
        then that row (`owner`, `seen`, `ago`) comes back, a clash, and is left alone."""
        prefix = process_owner() + "#"
        with self.db.transaction() as conn:
            # A row a visit of this process holds locked is skipped, not waited for: a long
            # visit (a big checkout) would keep this host from beating past its lease.
            conn.execute(f"UPDATE work SET claim_until={self.now} + ? WHERE ref IN (SELECT ref "
                         f"FROM work WHERE substr(claim, 1, ?)=?{self.db.dialect.skip_locked})",
                         (self.expiry, len(prefix), prefix))
            row = conn.execute(f"SELECT owner, seen, {self.now} - seen AS ago FROM hosts "
                               f"WHERE id=?{self.db.dialect.for_update}", (self.host,)).fetchone()
            if row is not None and float(row["ago"]) < self.expiry and clashes(
                    str(row["owner"]), owner):
                return dict(row)
            conn.execute(f"INSERT INTO hosts(id, seen, owner) VALUES (?, {self.now}, ?) "
                         "ON CONFLICT(id) DO UPDATE SET seen=excluded.seen, owner=excluded.owner",
                         (self.host, owner or process_owner()))
        return None

    def host_alive(self, host: str) -> bool:
        """Whether `host` renewed its heartbeat within the lease expiry (this host: yes)."""
        if host in ("", self.host):
            return True
        row = self.db.conn.execute(f"SELECT seen, {self.now} AS now FROM hosts WHERE id=?",
                                   (host,)).fetchone()
        return row is not None and float(row["seen"]) > float(row["now"]) - self.expiry

    def hosts(self) -> list[dict[str, Any]]:
        """Every host that ever beat, with how long ago (`ago`, seconds by the db clock)."""
        return [dict(r) for r in self.db.conn.execute(
            f"SELECT id, seen, owner, {self.now} - seen AS ago FROM hosts ORDER BY id")]

    # ------------------------------------------------------------------ steps
    def add_step(self, conn: Conn, key: str, ref: str, action: StepAction,
                 payload: dict[str, Any]) -> None:
        """Queue a step (inside the caller's transaction); a key already queued is kept.
        A non-`StepAction` action, or a payload its action cannot run, is refused here."""
        self.add_steps(conn, [(key, ref, action, payload)])

    def add_steps(self, conn: Conn, steps: list[Owed],
                  done: dict[str, str] | None = None) -> int:
        """`add_step` for each of `steps` (key, ref, action, payload), in order, with one
        statement; how many were not queued already. `done`: keys written as finished
        already, with their outcome (an enter step that asks no hook, done in the transaction
        that queues it: Loop.enter_rows)."""
        if not steps:
            return 0
        done = done or {}
        now = time.time()
        rows = [(key, ref, action, self._stored(action, payload))
                for key, ref, action, payload in steps]
        values = ", ".join(["(?,?,?,?,?,?,?,?)"] * len(rows))
        got = {str(r["key"]): int(r["seq"]) for r in conn.execute(
            "INSERT INTO steps(key, ref, kind, payload, state, outcome, created, updated) "
            f"VALUES {values} ON CONFLICT(key) DO NOTHING RETURNING seq, key",
            tuple(v for key, ref, action, stored in rows
                  for v in (key, ref, action.value, stored,
                            "done" if key in done else "pending", done.get(key, ""), now,
                            now))).fetchall()}
        for key, ref, action, stored in rows:
            queue = self._queue(ref)
            if queue is not None and key in got and key not in done:  # the visit runs it
                queue.append(Step(got[key], key, ref, action, json.loads(stored), {},
                                  "pending", "", ""))
        return len(got)

    def _stored(self, action: StepAction, payload: dict[str, Any]) -> str:
        """A step's payload as its row stores it (secrets replaced); a non-`StepAction`
        action, or a payload its action cannot run, is refused here."""
        if not isinstance(action, StepAction):
            raise TypeError(f"a step's action is a StepAction, not {action!r}")
        action.check(payload)
        return self.redact(json.dumps(payload))

    def _queue(self, ref: str) -> list[Step] | None:
        """In a visit: `ref`'s pending steps as its claim (SQLite) or `next_step` read them,
        with the steps the visit queued since (None: read them again -- not read in this
        visit, changed other than by its `add_step` and `finish`, emptied by a rollback, or,
        on PostgreSQL, after a commit, where the read that opens the next transaction is its
        fence check, `Database.fence_due`; on SQLite they are kept across the visit's
        commits)."""
        memo = self.db.memo()
        if memo is None or self.db.fence_due(ref):
            return None
        return memo.get(("queue", ref))

    def forget_steps(self, ref: str) -> None:
        """A step of `ref` was changed other than by `add_step` or `finish`: the visit
        reads its pending steps again."""
        memo = self.db.memo()
        if memo is not None:
            memo.pop(("queue", ref), None)

    def queue(self, key: str, ref: str, action: StepAction, payload: dict[str, Any]) -> None:
        with self.db.transaction() as conn:
            self.add_step(conn, key, ref, action, payload)

    def queue_unclaimed(self, key: str, ref: str, action: StepAction, payload: dict[str, Any],
                        w: dict[str, Any]) -> bool:
        """Queue a step with one statement and no claim, while nobody holds `ref`'s claim
        and its work row is still `w` as read (state, node, epoch, session, fencing number):
        what taking the claim, reading the row again, queuing and giving the claim up does,
        with the row checked and the step written at one instant (SQLite's write lock;
        PostgreSQL's lock on the row, FOR UPDATE, which waits for a claim being taken and
        then sees it). False when the claim is held, anything differs or the key is queued
        already: the caller takes the claim and decides as before."""
        if w.get("claim"):
            return False
        stored = self._stored(action, payload)
        now = time.time()
        cur = self.db.conn.execute(
            "INSERT INTO steps(key, ref, kind, payload, created, updated) "
            "SELECT ?, ?, ?, ?, ?, ? FROM work WHERE ref=? AND claim='' AND state=? AND node=? "
            f"AND epoch=? AND arm_seq=? AND session_id=? AND fence=?{self.db.dialect.for_update}"
            " ON CONFLICT(key) DO NOTHING",
            (key, ref, action.value, stored, now, now, ref,
             w["state"], w["node"], w["epoch"], w["arm_seq"], w["session_id"], w["fence"]))
        return bool(cur.rowcount == 1)

    def extend_queued_launch(self, conn: Conn, ref: str, node: str, endpoint: str,
                             text: str, most: int) -> str:
        """Append `text` to the prompt of `ref`'s launch at `node` that is queued and not yet
        decided (inside the caller's transaction); its key, or '' when there is none. A
        second launch would end that session before it read its input. InputTooLong when
        the prompt would pass `most` characters (runtime/input_bound.py)."""
        for row in conn.execute("SELECT key, payload, decisions FROM steps WHERE ref=? AND "
                                "kind=? AND state='pending' ORDER BY seq",
                                (ref, StepAction.LAUNCH.value)).fetchall():
            payload = json.loads(row["payload"])
            if (json.loads(row["decisions"]) or payload["node"] != node
                    or payload["endpoint"] != endpoint):
                continue
            if len(payload["prompt"]) + len(text) > most:
                raise InputTooLong(LAUNCH_FULL)
            payload["prompt"] += text
            conn.execute("UPDATE steps SET payload=? WHERE key=?",
                         (json.dumps(payload), row["key"]))
            self.forget_steps(ref)
            return str(row["key"])
        return ""

    def queued_by(self, ref: str, sid: str, node: str, epoch: int) -> set[StepAction]:
        """What session `sid` of `ref` queued of what an agent can: a question it asked,
        input it wrote (as its `agent_login`; as `agent:<sid>` before), its `graph complete`
        of `node` at `epoch` (still pending). Any of them proves that the session ran."""
        actions: set[StepAction] = set()
        for row in self.db.conn.execute(
                "SELECT kind, payload, state FROM steps WHERE ref=? AND kind IN (?, ?, ?)",
                (ref, StepAction.QUESTION.value, StepAction.INPUT.value, StepAction.DONE.value)):
            p, action = json.loads(row["payload"]), StepAction(row["kind"])
            asked = action is StepAction.QUESTION and p.get("session_id") == sid
            wrote = action is StepAction.INPUT and p.get("actor") in (agent_login(sid),
                                                                    AGENT_PREFIX + sid)
            done = (action is StepAction.DONE and row["state"] == "pending"
                    and p.get("node") == node and int(p.get("epoch", -1)) == epoch)
            if asked or wrote or done:
                actions.add(action)
        return actions

    def next_step(self, ref: str) -> Step | None:
        """`ref`'s first pending step. In a visit (db.memo) its pending steps are read once,
        by the statement that reads the item's work row (one snapshot of both; on
        PostgreSQL, when it opens the visit's transaction, it locks that row and is the
        transaction's fence check); the visit's own `add_step`s join that queue and its
        `finish`es leave it for the rest of the visit (on PostgreSQL until the batch
        commits: the read after a commit is the next transaction's fence check). The claim
        the visit holds keeps every other loop process from running or queuing a step of
        the item meanwhile, but for a tracker's closure queued by the control plane, which
        the next visit takes (cycle.py reads it)."""
        memo = self.db.memo()
        self.db.flush_deferred()  # a step decided and not finished is read with its decisions
        if memo is None:
            row = self.db.conn.execute(
                "SELECT * FROM steps WHERE state='pending' AND ref=? ORDER BY seq LIMIT 1",
                (ref,)).fetchone()
            return Step.of(row) if row else None
        queue = self._queue(ref)
        if queue is None:
            fence = self.db.fence_due(ref)
            rows = self.db.conn.execute(_NEXT_LOCKED if fence else _NEXT_WITH_WORK,
                                        (ref, ref)).fetchall()
            w = {c: rows[0][c] for c in _WORK} if rows and rows[0]["ref"] is not None else None
            if fence:
                self.db.fenced_by(w)
            if w is not None:
                w.update(self.db.deferred_work(ref))
            memo["work", ref] = w
            queue = []
            for r in rows:
                if r["s_seq"] is None:
                    break
                try:
                    queue.append(Step.of({c: r[f"s_{c}"] for c in _STEP}))
                except UnknownStepAction:
                    if not queue:
                        raise
                    return queue[0]  # not kept: read again at each step (as it waits)
            memo["queue", ref] = queue
        while queue and queue[0].state != "pending":
            queue.pop(0)  # finished in this visit
        return queue[0] if queue else None

    def step(self, key: str) -> Step | None:
        self.db.flush_deferred()
        row = self.db.conn.execute("SELECT * FROM steps WHERE key=?", (key,)).fetchone()
        return Step.of(row) if row else None

    def pending_refs(self) -> list[str]:
        return [str(r["ref"]) for r in self.db.conn.execute(
            "SELECT ref, MIN(seq) AS first FROM steps WHERE state='pending' GROUP BY ref "
            "ORDER BY first")]

    def has_pending(self, ref: str) -> bool:
        """Whether `ref` has a pending step (in a visit, as its last `next_step` found,
        unless a step was queued or finished since)."""
        queue = self._queue(ref)
        if queue is not None:
            return any(step.state == "pending" for step in queue)
        return self.db.conn.execute("SELECT 1 FROM steps WHERE state='pending' AND ref=? "
                                    "LIMIT 1", (ref,)).fetchone() is not None

    def record(self, step: Step, point: str, decisions: dict[str, Any]) -> None:
        """Record what a point decided for a step, before its effect. In a visit's batch
        the row is written when the batch commits, or with the step's finish when that
        comes first (one statement, not two), and even if the batch is rolled back
        (db.defer): a redo asks no hook again."""
        step.decisions[point] = decisions
        args = (self.redact(json.dumps(step.decisions)), time.time(), step.key)
        if self.db.defer(step.key, _DECISIONS, args):
            return
        with self.db.transaction() as conn:
            conn.execute(_DECISIONS, args)

    def finish(self, step: Step, outcome: str, detail: str = "",
               conn: Conn | None = None) -> None:
        """Mark a step done (inside the caller's transaction when one is given), with the
        decisions its batch still holds for it (`record`)."""
        held = self.db.take_deferred(step.key)
        now = time.time()
        if held is None:
            sql = "UPDATE steps SET state='done', outcome=?, detail=?, updated=? WHERE key=?"
            args: tuple[Any, ...] = (outcome, self.redact(detail), now, step.key)
        else:
            sql = ("UPDATE steps SET state='done', outcome=?, detail=?, decisions=?, updated=? "
                   "WHERE key=?")
            args = (outcome, self.redact(detail), held[1][0], now, step.key)
        if conn is not None:
            self._finished(conn, sql, args, held)
        else:
            with self.db.transaction() as c:
                self._finished(c, sql, args, held)
        step.state, step.outcome, step.detail = "done", outcome, detail

    def _finished(self, conn: Conn, sql: str, args: tuple[Any, ...],
                  held: tuple[str, tuple[Any, ...]] | None) -> None:
        """A step's finish statement; the decisions it carries are kept first, so they
        outlive a rollback of the batch even when this very statement is refused."""
        if held is not None:
            self.db.keep(*held)
        conn.execute(sql, args)

    # ------------------------------------------------------------------ input
    def cursor(self, ref: str) -> int:
        row = self.db.conn.execute("SELECT last FROM cursors WHERE ref=?", (ref,)).fetchone()
        return int(row["last"]) if row else 0

    def take_input(self, target: str, endpoint: str, comments: list[Any], skip: str, *,
                   after: int | None = None) -> int:
        """Queue one input step per comment after the cursor and move the cursor, in one
        transaction: an input is durable before the cursor passes it. Returns how many.
        `after`: the cursor as the caller read it, when nothing else can have moved it back
        or forward past what it read but another `take_input` of the same comments (the
        visit holds the item's claim, so it cannot be armed again meanwhile; the same
        comment's input is one step, and the cursor only moves forward): not read again."""
        with self.db.transaction() as conn:
            if after is None:
                row = conn.execute("SELECT last FROM cursors WHERE ref=?",
                                   (endpoint,)).fetchone()
                after = int(row["last"]) if row else 0
            last, owed = after, []
            for c in comments:
                if c.id <= last:
                    continue
                last = c.id
                if c.author != skip:
                    owed.append((StepAction.INPUT.key(endpoint, c.id), target, StepAction.INPUT,
                                 {"endpoint": endpoint, "comment": c.id, "actor": c.author,
                                  "source": c.source}))
            n = self.add_steps(conn, owed)
            conn.execute("INSERT INTO cursors(ref, last) VALUES (?, ?) ON CONFLICT(ref) DO "
                         "UPDATE SET last=CASE WHEN excluded.last > cursors.last THEN "
                         "excluded.last ELSE cursors.last END", (endpoint, last))
        return n

    # ------------------------------------------------------------------ sessions
    def keyed_session(self, digest: str) -> tuple[str, str] | None:
        """(work item, session) whose current session's token has this digest."""
        row = self.db.conn.execute("SELECT ref, session_id FROM work WHERE session_key=? AND "
                                   "session_id<>''", (digest,)).fetchone()
        return (str(row["ref"]), str(row["session_id"])) if row else None

    def session(self, sid: str) -> dict[str, Any] | None:
        """The session's row; in a visit (db.memo) read once, and kept by what this store
        writes (a session's end recorded by another process is seen by the next visit)."""
        memo = self.db.memo()
        if memo is not None and ("session", sid) in memo:
            got = memo["session", sid]
            return dict(got) if got is not None else None
        row = self.db.conn.execute("SELECT * FROM sessions WHERE id=?", (sid,)).fetchone()
        found = dict(row) if row else None
        if memo is not None:
            memo["session", sid] = dict(found) if found is not None else None
        return found

    def _sessions_changed(self) -> None:
        """Sessions were written: the visit reads them again."""
        memo = self.db.memo()
        if memo is not None:
            for key in [k for k in memo if k[0] == "session"]:
                del memo[key]

    def unseen(self, sid: str) -> None:
        """Session `sid` is known not to exist (a launch that never reached its spawn): in
        a visit, `session(sid)` says so without a read."""
        memo = self.db.memo()
        if memo is not None:
            memo["session", sid] = None

    def session_of_step(self, key: str, sid: str = "") -> dict[str, Any] | None:
        """The session a launch step started (one its host did not lose, when there is).
        `sid`: the session id the step would give a new one, read in the same statement for
        the visit's `session` (db.memo)."""
        sql, args = (("SELECT * FROM sessions WHERE step=? OR id=?", (key, sid)) if sid
                     else ("SELECT * FROM sessions WHERE step=?", (key,)))
        rows = [dict(r) for r in self.db.conn.execute(sql, args).fetchall()]
        memo = self.db.memo()
        if memo is not None and sid:
            for row in rows:
                memo["session", row["id"]] = dict(row)
            memo.setdefault(("session", sid), None)
        started = sorted((r for r in rows if r["step"] == key),
                         key=lambda r: (int(r["lost"]), -float(r["started"])))
        return started[0] if started else None

    def register_session(self, sid: str, step_key: str, *, ref: str, endpoint: str,
                         harness: str, pid: int, node: str, log: str,
                         state: str = "running", pid_start: str = "") -> None:
        """A launched session, and its item running it (or `waiting` for the answer to a
        question the session already asked), in one transaction. `pid_start`: when the
        harness `pid` started (harness.process_start_time; '' when not known)."""
        self._sessions_changed()
        values = (sid, ref, endpoint, harness, pid, node, time.time(), log, step_key, self.host,
                  pid_start)
        row = self._registered_alone(values, sid, ref, node, state)
        if row is None:
            with self.db.transaction() as conn:
                row = conn.execute(f"{_REGISTER} VALUES (?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT(id) "
                                   "DO NOTHING RETURNING *", values).fetchone()
                self.set_work(ref, conn, state=state, node=node, session_id=sid,
                              host=self.host)
        memo = self.db.memo()
        if memo is not None and row is not None:  # the row as written (none: it was there)
            memo["session", sid] = dict(row)

    def _registered_alone(self, values: tuple[Any, ...], sid: str, ref: str, node: str,
                          state: str) -> Any:
        """A fresh launch's registration as one statement, outside any transaction: the
        session's row goes in only while this thread's claim on the item is still its own
        and the item's row already names the session as `state` at its node on this host
        (written before the harness existed: launching._start), which the statement checks
        under the row's lock. The row written, or None (anything differs, the session is
        recorded already, no claim is held, a transaction is open): the caller registers it
        the long way, which refuses a stale owner."""
        held = self.db.claim_of(ref)
        w = self.work(ref) if held is not None and not self.db.pending() else None
        if held is None or w is None or (w["state"], w["node"], w["session_id"], w["host"]) \
                != (state, node, sid, self.host):
            return None
        return self.db.conn.execute(
            f"{_REGISTER} SELECT ?,?,?,?,?,?,?,?,?,?,? FROM work WHERE ref=? AND claim=? AND "
            "fence=? AND state=? AND node=? AND session_id=? AND host=?"
            f"{self.db.dialect.for_update} ON CONFLICT(id) DO NOTHING RETURNING *",
            (*values, ref, *held, state, node, sid, self.host)).fetchone()

    def sessions_of(self, ref: str, limit: int = 200) -> list[dict[str, Any]]:
        """The last `limit` sessions launched for `ref`, oldest first (any host)."""
        return [dict(r) for r in self.db.conn.execute(
            "SELECT * FROM (SELECT id, node, harness, started, exited, code FROM sessions "
            "WHERE ref=? ORDER BY started DESC LIMIT ?) AS s ORDER BY started", (ref, limit))]

    def live_sessions(self) -> list[dict[str, Any]]:
        """The sessions of this host not known to have ended ('' is a session recorded
        before sessions had hosts: a local one)."""
        return [dict(r) for r in self.db.conn.execute(
            "SELECT * FROM sessions WHERE exited=0 AND host IN ('', ?) ORDER BY started",
            (self.host,))]

    def running_here(self, besides: str = "") -> int:
        """How many of this host's sessions run, not counting session `besides`. In a visit
        (db.memo) `besides`'s own row (the item's current session, which a launch ends
        next) is read by the same statement and kept for `session`."""
        count = "SELECT COUNT(*) FROM sessions WHERE exited=0 AND host IN ('', ?) AND id<>?"
        memo = self.db.memo()
        if memo is None or not besides or ("session", besides) in memo:
            row = self.db.conn.execute(f"SELECT ({count}) AS n", (self.host,
                                                                   besides)).fetchone()
            return int(row["n"])
        found = dict(self.db.conn.execute(
            f"SELECT ({count}) AS n_running, s.* FROM (SELECT 1 AS one) AS o LEFT JOIN "
            "sessions s ON s.id=?", (self.host, besides, besides)).fetchone())
        n = int(found.pop("n_running"))
        memo["session", besides] = found if found.get("id") is not None else None
        return n

    def take_over(self, ref: str, host: str) -> int:
        """`host` is lost: its sessions of `ref` are over (marked lost, not counted as
        the session's own failure) and the item no longer belongs to it. Returns how many
        sessions it ran."""
        self._sessions_changed()
        with self.db.transaction() as conn:
            cur = conn.execute("UPDATE sessions SET exited=1, lost=1 WHERE ref=? AND host=? "
                               "AND exited=0", (ref, host))
            self.set_work(ref, conn, host="")
        return int(cur.rowcount)

    def sweep_lost(self, lapsed: list[str] | None = None) -> list[str]:
        """Mark lost the sessions recorded as running on hosts whose heartbeat lapsed (an
        item that finished just before its host died is claimed by no one again).
        `lapsed`: those hosts, when the caller has read them (runtime/cycle.py)."""
        gone = lapsed if lapsed is not None else [str(r["host"]) for r in self.db.conn.execute(
            "SELECT DISTINCT s.host AS host FROM sessions s LEFT JOIN hosts h ON h.id=s.host "
            f"WHERE s.exited=0 AND s.host NOT IN ('', ?) AND (h.seen IS NULL OR "
            f"h.seen <= {self.now} - ?) ORDER BY s.host", (self.host, self.expiry))]
        for host in gone:  # lapsed by the same rule as host_alive
            self._sessions_changed()
            with self.db.transaction() as conn:
                conn.execute("UPDATE sessions SET exited=1, lost=1 WHERE host=? AND exited=0",
                             (host,))
        return gone

    def lost_here(self) -> list[dict[str, Any]]:
        """This host's sessions another host declared lost (it was away past its lease)."""
        return [dict(r) for r in self.db.conn.execute(
            "SELECT * FROM sessions WHERE lost=1 AND host=?", (self.host,))]

    def sessions_ended(self, codes: dict[str, int | None]) -> list[str]:
        """Record the ends of sessions (id → exit code, None when unknown) in one statement
        (it needs no transaction of its own); returns those this call recorded, in the
        order given (another process may have recorded the rest)."""
        if not codes:
            return []
        self._sessions_changed()
        whens = " ".join("WHEN ? THEN CAST(? AS INTEGER)" for _ in codes)
        marks = ",".join("?" * len(codes))
        done = {str(r["id"]) for r in self.db.conn.execute(
            f"UPDATE sessions SET exited=1, code=CASE id {whens} END WHERE id IN ({marks}) "
            "AND exited=0 RETURNING id",
            (*(v for pair in codes.items() for v in pair), *codes)).fetchall()}
        self.db.settle()
        return [sid for sid in codes if sid in done]
