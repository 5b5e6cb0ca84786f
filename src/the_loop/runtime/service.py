r"""The loop: arms work items and runs what each one is owed as durable steps.

Every lifecycle point is fired by one visible `.fire(<Context>(...))` call placed before the
thing it decides, in steps.py (start, enter, question, input, phase, complete) and
launching.py (launch):
`grep -rn "fire\|decide(" runtime/` finds the eight call sites (waiting_for_input has two,
a question and a gate). Only a process that holds a loaded chain runs steps; a one-shot
command (`reply`, `ask`, `graph complete`) writes what it asks for and leaves the rest to
the daemon. The SQL lives in store.py; this module keeps the orchestration.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from the_loop.config import Config
from the_loop.errors import LoopError
from the_loop.events import EventLog
from the_loop.runtime import harness as harness_mod
from the_loop.runtime.db import Fenced, open_database, settle_batch
from the_loop.runtime.graph import Node, load_graph
from the_loop.runtime.identity import AGENT_PREFIX, SESSION_TOKEN_ENV
from the_loop.runtime.lease import Heartbeat, check_host_id, host_id, host_owner
from the_loop.runtime.settings import Settings, settings_of
from the_loop.runtime.stepactions import StepAction, salted
from the_loop.runtime.store import ACTIVE, Owed, Step, Store
from the_loop.runtime.tracker import LocalTracker
from the_loop.sqldb import WritesLost, read_only_sqlite
from the_loop.util import say

if TYPE_CHECKING:  # the hooks, the channels and the decision log load when first used: a
    # one-shot command (`graph complete`, `ask`) runs none of them (issue 34)
    import subprocess

    from the_loop.decisions.looplog import DecisionLog
    from the_loop.hooks.engine.chain import Chain, Outcome
    from the_loop.hooks.engine.points import Context
    from the_loop.runtime.channels import Channels

LOOP_AUTHOR = "the-loop"
#: The prompt of an agent node that names none (its `prompt:` in the graph).
NODE_PROMPT = "Work on {ref} ({title}) at node {node}."


def _holds_an_unmoved_log(local: Path) -> bool:
    """Whether a host's own loop.db still holds the decision log an earlier version kept
    beside a shared database (moved into the shared store when the log is first built; a
    reader of the shared store would miss it until then). A look at one table name."""
    if not local.is_file():
        return False
    try:
        conn = read_only_sqlite(local, timeout=5.0)
        try:
            return conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND "
                                "name='decision_log'").fetchone() is not None
        finally:
            conn.close()
    except sqlite3.Error:
        return False  # the log's own move says what is wrong with the file
FAILPOINT_ENV = "THE_LOOP_FAILPOINT"
_REDACTED = "[redacted]"

__all__ = ["ACTIVE", "AGENT_PREFIX", "LOOP_AUTHOR", "Decided", "Loop", "failpoint", "marker"]


def marker(key: str) -> str:
    """The hidden marker that makes a loop comment idempotent."""
    return f"<!-- the-loop:{key} -->"


def failpoint(name: str) -> None:
    """Die here when $THE_LOOP_FAILPOINT names this step (crash-safety tests only). In a
    process a crash test arms, every failpoint is also where a visit's batch commits, so a
    crash there leaves what was written before it. Elsewhere a failpoint costs nothing: a
    visit commits at its own points (db.batched), and a crash between two of them leaves
    the earlier one's state, one of the states the crash tests leave too."""
    armed = os.environ.get(FAILPOINT_ENV)
    if armed:
        settle_batch()
        if armed == name:
            os._exit(86)


PAUSEPOINT_ENV = "THE_LOOP_PAUSEPOINT"


def pausepoint(name: str) -> None:
    """Wait here when $THE_LOOP_PAUSEPOINT is `name=SECONDS` (race tests only: it holds a
    process inside a window another process must not slip into)."""
    point, _, seconds = os.environ.get(PAUSEPOINT_ENV, "").partition("=")
    if point == name:
        time.sleep(float(seconds or 1))


def render(template: str, **values: str) -> str:
    out = template
    for key, value in values.items():
        out = out.replace("{" + key + "}", value)
    return out


def session_id_for(step_key: str, salt: str = "") -> str:
    """A launch step's session id: the same on every redo of the step, and not to be worked
    out from the item's ref (the step's payload holds a random `salt`: stepactions.salted), as
    an agent's token acts with the id of the session it names."""
    import hashlib

    return "s-" + hashlib.sha256((salt + step_key).encode()).hexdigest()[:12]


class Decided:
    """What a point decided for a step: fired now, or read back from the step's record."""

    def __init__(self, record: dict[str, Any]) -> None:
        self.record = record

    @classmethod
    def of(cls, outcome: Outcome) -> Decided:
        from the_loop.hooks.engine.points import SPECS

        names = [d.name for d in SPECS[outcome.context.POINT].decisions]
        return cls({
            "decisions": {n: outcome.context.__dict__[n] for n in names},
            "refused": outcome.refused, "refused_by": outcome.refused_by or "",
            "changed_by": dict(outcome.changed_by),
        })

    def __getitem__(self, name: str) -> Any:
        return self.record["decisions"][name]

    @property
    def refused(self) -> bool:
        return bool(self.record["refused"])

    @property
    def refused_by(self) -> str:
        return str(self.record["refused_by"]) or "?"

    @property
    def reason(self) -> str:
        return str(self.record["decisions"].get("reason") or "") or "no reason given"

    @property
    def changed_by(self) -> dict[str, str]:
        return dict(self.record["changed_by"])

    @property
    def whose_reason(self) -> str:
        """` (the reason is hook `a`'s)` when a hook other than the refusing one gave the
        reason (both are named, as `hooks.refused` names them), else ''."""
        by = self.record["changed_by"].get("reason", "")
        return f" (the reason is hook `{by}`'s)" if by and by != self.refused_by else ""


class Loop:
    """One process's view of the loop. Daemons pass strict_hooks=True (fail closed)."""

    def __init__(self, config: Config, *, strict_hooks: bool, source: str = "the-loop") -> None:
        self.config = config
        check_host_id()
        self.settings: Settings = settings_of(config)
        # A transaction idle past the lease (this process stopped inside a visit) is ended
        # by the server: the item's row it locked is another host's to take over.
        self.db = open_database(self.settings.db_target, idle=self.settings.lease_expiry)
        self.log = EventLog(self.settings.events_path, source=source, secrets=self.secrets)
        self.store = Store(self.db, redact=self.redact, expiry=self.settings.lease_expiry)
        self.tracker = LocalTracker(self.db, self.settings.repository)
        self.graph = load_graph(self.settings.graph)
        self.strict_hooks = strict_hooks
        self.source = source
        self._chain: Chain | None = None
        self._log_alone = False  # the last decision-log row took its visit's writes with it
        if self.settings.database and _holds_an_unmoved_log(self.settings.db_path):
            self.decision_log  # noqa: B018 -- built now, so its move happens at once
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.door = ""  # the agent door's socket, named to each session (cli/door.py)
        self.proc_refs: dict[str, str] = {}  # session id → work item, launched here
        self.heartbeat: Heartbeat | None = None

    @functools.cached_property
    def channels(self) -> Channels:
        from the_loop.runtime.channels import Channels

        return Channels(self.settings.channels, self.log)

    @functools.cached_property
    def decision_log(self) -> DecisionLog:
        """One write per point, to the store the config names (every host's points meet in
        a shared database); a host's own copy from an earlier version moves there. Built on
        first use: a one-shot command that fires no point opens no log (issue 34). Its table
        is made (or brought up to date) on its own connection while this thread's visit has
        no transaction open: what the visit wrote so far is committed first, as before a
        hook is asked (SQLite's DDL would wait for the write lock the visit holds)."""
        from the_loop.decisions.looplog import DecisionLog
        from the_loop.runtime.pointmetrics import count_lost_record

        self.db.settle()
        log = DecisionLog(self.settings.db_target, keep_days=self.settings.decision_keep_days,
                          log=self.log, host=host_id, on_failed=count_lost_record,
                          write=self._log_row)
        with contextlib.suppress(LoopError, OSError):  # tried again by its first row, whose
            log.prepare()  # failure is then a lost record (DecisionLog.record)
        if self.settings.database:
            self._adopt_local_log(log)
        return log

    def _log_row(self, sql: str, row: tuple[Any, ...]) -> bool:
        """A point's decision-log row goes in with the visit's writes (one transaction, not
        one of its own per point: db.batched), and is kept when the batch is rolled back, as
        the decision it records is. True when it is committed already (no batch was open).
        When the row fails, the batch is rolled back (db.transaction): if it held the
        visit's earlier writes, `WritesLost` ends the visit (DecisionLog.record raises its
        error), as a crash would, and the next visit redoes it; from then on what the visit
        wrote is committed before a row goes in, until one lands, so a row refused for good
        is a lost record, never a visit that cannot finish."""
        if self._log_alone:
            self.db.settle()
        held = self.db.pending()
        try:
            with self.db.transaction() as conn:
                conn.execute(sql, row)
        except Exception as exc:
            if held or isinstance(exc, Fenced):  # the visit's writes went with it
                self._log_alone = True
                raise WritesLost(exc) from exc
            raise
        self._log_alone = False
        self.db.keep(sql, row)
        return not self.db.pending()

    def prune_decisions(self) -> None:
        """Prune the decision log when due (hourly per process), outside any visit."""
        if "decision_log" in self.__dict__:  # built: this process fired a point
            self.decision_log.prune_due()

    def _adopt_local_log(self, log: DecisionLog) -> None:
        try:
            moved = log.adopt(self.settings.db_path)
        except LoopError as exc:  # tried again by the next process; the loop goes on
            say(f"the-loop: the decision log in {self.settings.db_path} could not be moved "
                f"to the shared database yet ({exc})")
            return
        if moved:
            say(f"the-loop: moved {moved} recorded point(s) from {self.settings.db_path} to "
                "the shared database's decision log")

    def start_heartbeat(self, on_clash: Callable[[], None] | None = None) -> None:
        """A daemon's: renew this process's claims and its host's `seen` time in the
        background (its own connection), every `lease.heartbeatSeconds`. Raises HostClash
        when another live instance holds this host id (lease.py); `on_clash`: called when
        one is found later."""
        if self.heartbeat is None:
            store = Store(open_database(self.settings.db_target),
                          expiry=self.settings.lease_expiry)
            self.heartbeat = Heartbeat(store, self.settings.heartbeat,
                                       host_owner(self.settings.state_dir), on_clash).start()

    def stop_heartbeat(self) -> None:
        if self.heartbeat is not None:
            self.heartbeat.close()
            self.heartbeat = None

    # ------------------------------------------------------------------ secrets
    def secrets(self) -> list[str]:
        """Current values of every variable a tokenEnv names, and (inside a session) the
        session's own token (never logged)."""
        return [v for n in (*self.settings.secret_names, SESSION_TOKEN_ENV)
                if len(v := os.environ.get(n, "")) >= 4]

    def redact(self, text: str) -> str:
        """`text` with every secret value replaced: before it is cut, stored or posted."""
        for secret in self.secrets():
            text = text.replace(secret, _REDACTED)
        return text

    # ------------------------------------------------------------------ hooks
    @property
    def chain(self) -> Chain:
        """Loaded on first use, at most once per process."""
        if self._chain is None:
            from the_loop.hooks.declaring.loading import chain_once

            self._chain = chain_once(self.config, strict=self.strict_hooks, log=self.log)
        return self._chain

    def fire(self, ctx: Context, *, input_id: int = 0) -> Outcome:
        """Run the chain at ctx's point and record that the point fired (`input_id`: the
        input's own id, at input_received)."""
        from the_loop.runtime.pointmetrics import observe
        from the_loop.runtime.record import point_record

        started = time.perf_counter()
        outcome = self.chain.invoke(ctx)
        observe(outcome, self.chain, time.perf_counter() - started)
        self.log.emit("lifecycle.point", **point_record(ctx, outcome))
        self.decision_log.record(ctx, outcome, self.chain, input_id=input_id)
        return outcome

    def decide(self, step: Step, make: Callable[[], Context]) -> Decided:
        """A point's decisions for a step: asked once, recorded on the step before its
        effect; a redo of the step reads them back and asks no hook again."""
        ctx = make()
        if ctx.POINT in step.decisions:
            return Decided(step.decisions[ctx.POINT])
        comment = step.payload.get("comment") if ctx.POINT == "input_received" else None
        # No lock of the visit is held while a hook runs. With no hook at the point the
        # visit's writes stay open: the point's record goes in with them (_log_row), and
        # whatever waits on another process after it settles first (a launch, launching.py).
        if self.chain.names(ctx.POINT):
            self.db.settle()
        got = Decided.of(self.fire(ctx, input_id=comment if type(comment) is int else 0))
        # Committed with the step's effect (the visit's batch, db.batched: the next commit
        # comes before anything outside the database acts, and at each failpoint), and
        # kept if that batch is rolled back: a redo asks no hook again.
        self.store.record(step, ctx.POINT, got.record)
        return got

    # ------------------------------------------------------------------ state
    def work(self, ref: str) -> dict[str, Any] | None:
        return self.store.work(ref)

    def set_work(self, ref: str, **fields: Any) -> None:
        self.store.set_work(ref, **fields)

    def base(self, ref: str) -> dict[str, Any]:
        """The facts every context carries."""
        item = self.tracker.get(ref, comments=False)
        return {"work_item": self.tracker.work_item(ref), "loop": self.settings.loop,
                "labels": list(item.labels)}

    def post_once(self, ref: str, key: str, body: str) -> bool:
        """Post a marked loop comment unless one with this marker exists; True if posted."""
        mark = marker(key)  # a marker someone else wrote suppresses nothing
        return self.tracker.comment_once(ref, f"{self.redact(body)}\n\n{mark}", mark,
                                         author=LOOP_AUTHOR)

    def say(self, ref: str, body: str) -> None:
        """An ordinary loop comment (not idempotent)."""
        self.tracker.comment(ref, self.redact(body), author=LOOP_AUTHOR)

    # ------------------------------------------------------------------ arming
    def arm(self, ref: str, *, actor: str, source: str) -> bool:
        """Arm a work item (its start is queued); False when it is already armed or active."""
        ref = self.tracker.resolve(ref)
        item = self.tracker.get(ref)
        if item.state != "open":
            raise LoopError(f"{ref} is closed; only an open ticket or pull request can start")
        # Input is what people write after the arming: on the ticket and on its pull requests.
        cursors = {ref: item.comments[-1].id if item.comments else 0}
        for pr in self.tracker.items(state="open", parent=ref):
            comments = self.tracker.get(pr.ref).comments
            cursors[pr.ref] = comments[-1].id if comments else 0
        if not self.store.arm(ref, actor=actor, source=source, cursors=cursors):
            return False
        failpoint("arm")
        self.log.emit("loop.armed", work_item=ref, actor=actor, source=source)
        return True

    # ------------------------------------------------------------------ agent side
    def _claimed(self, ref: str) -> None:
        if not self.store.claim_wait(ref, 30.0):
            raise LoopError(f"{ref} is busy (another loop process is working on it); try "
                            "again in a moment")

    def ask(self, ref: str, question: str, *, summary: str = "", session_id: str = "") -> str:
        """An agent's question, queued for the daemon, which fires waiting_for_input and
        posts the final text (a one-shot command runs no hook). Returns the step's key."""
        ref = self.tracker.resolve(ref)
        with self.db.batched():  # the check, the claim, its writes and the release: one
            self.agent_turn(ref, session_id)  # transaction (db.py); refused before a claim
            self._claimed(ref)
            try:
                w = self.agent_turn(ref, session_id)
                sid = session_id or str(w["session_id"])
                with self.db.transaction() as conn:
                    n = conn.execute("SELECT COUNT(*) AS n FROM steps WHERE ref=? AND kind=?",
                                     (ref, StepAction.QUESTION.value)).fetchone()["n"]
                    key = StepAction.QUESTION.key(ref, w["arm_seq"], int(n) + 1)
                    self.store.add_step(conn, key, ref, StepAction.QUESTION, {
                        "question": question, "summary": summary, "session_id": sid,
                        "node": str(w["node"])})
                    self.store.set_work(ref, conn, state="waiting")
                return key
            finally:
                self.store.release(ref)

    def graph_complete(self, ref: str, *, summary: str = "", actor: str = "agent",
                       session_id: str = "") -> str:
        """The agent finished its node: queued for the daemon, which follows the `done`
        edge of its own graph. Returns the node that finished."""
        ref = self.tracker.resolve(ref)
        with self.db.batched():  # the check, the claim, the step and the release: one
            w = self.agent_turn(ref, session_id)  # transaction (db.py); refused before a claim
            if self.store.queue_unclaimed(*self._done_step(ref, w, actor, summary), w):
                return str(w["node"])  # (nobody held the claim: one statement, no claim)
            self._claimed(ref)
            try:
                w = self.agent_turn(ref, session_id)
                self.store.queue(*self._done_step(ref, w, actor, summary))
                return str(w["node"])
            finally:
                self.store.release(ref)

    @staticmethod
    def _done_step(ref: str, w: dict[str, Any], actor: str, summary: str) -> Owed:
        """The step an agent's `graph complete` queues at its item's work row `w`."""
        return (StepAction.DONE.key(ref, w["arm_seq"], w["epoch"]), ref, StepAction.DONE,
                {"node": str(w["node"]), "epoch": int(w["epoch"]), "actor": actor,
                 "summary": summary})

    def agent_turn(self, ref: str, session_id: str) -> dict[str, Any]:
        """The item, when it is at an agent node and (from inside a session) that session
        is the item's current one; a LoopError saying why not, otherwise."""
        w = self.work(ref)
        if w is not None and w["state"] == "gate":
            raise LoopError(f"{ref} is at {w['node']}, a human gate, waiting for a person's "
                            "/approve or /reject; an agent asks or completes only at an agent "
                            "node")
        if w is None or w["state"] not in ("running", "waiting") or not w["node"]:
            state = w["state"] if w else "not armed"
            raise LoopError(f"{ref} is not at an agent node ({state}); an agent asks or "
                            "completes only while its node runs")
        node = self.graph.nodes.get(str(w["node"]))
        if node is None or node.actor != "agent":
            raise LoopError(f"{ref} is at {w['node']}, a human gate, waiting for a person's "
                            "/approve or /reject; an agent asks or completes only at an agent "
                            "node")
        if session_id and session_id != w["session_id"]:
            raise LoopError(f"session {session_id} is not {ref}'s current session; an agent "
                            "acts only on its own work item")
        return w

    # ------------------------------------------------------------------ graph
    def advance(self, ref: str, outcome_name: str, *, actor: str, note: str = "",
                step: Step | None = None) -> str:
        """Move to the next node and queue what that owes (a phase message, entering the
        node), in one transaction with finishing `step`. Returns the new node."""
        with self.db.transaction() as conn:
            w = self.work(ref)  # read in the transaction (in a visit: the row it holds)
            if w is None:
                raise LoopError(f"{ref} has no work row; start it with `the-loop start {ref}`")
            here = self.graph.node(str(w["node"]))
            there = self.graph.next(here.name, outcome_name)
            if there is None:
                raise LoopError(f"node {here.name} has no edge for outcome {outcome_name!r}; "
                                f"outcomes: {', '.join(self.graph.outcomes(here.name))}")
            epoch, arm = int(w["epoch"]), int(w["arm_seq"])
            # "running" while the loop moves it: the enter step sets gate or launches.
            self.store.set_work(ref, conn, node=there.name, epoch=epoch + 1, state="running")
            owed, done = self.enter_rows(ref, arm, epoch + 1, there, actor, note)
            if there.phase != here.phase or there.terminal:
                owed.insert(0, (StepAction.PHASE.key(ref, arm, epoch), ref, StepAction.PHASE, {
                    "from_node": here.name, "to_node": there.name, "from_phase": here.phase,
                    "to_phase": there.phase, "outcome": outcome_name,
                    "terminal": there.terminal, "actor": actor}))
            self.store.add_steps(conn, owed, done)  # one statement
            if step is not None:
                self.store.finish(step, {"approve": "approved", "reject": "rejected"}.get(
                    outcome_name, outcome_name), conn=conn)
        self.log.emit("phase.changed", work_item=ref, from_node=here.name, to_node=there.name,
                      outcome=outcome_name)
        failpoint("advance")
        return there.name

    def enter_rows(self, ref: str, arm: int, epoch: int, node: Node, actor: str,
                   note: str) -> tuple[list[Owed], dict[str, str]]:
        """The steps that enter `node` at `epoch`, for the transaction that moves the item
        there, and which of them are done already: entering a terminal or an agent node
        asks no hook, so its enter step is written done, with what it owes, in that same
        transaction (one statement, where a step of its own run next took three); a human
        gate's enter step is queued, to ask waiting_for_input."""
        key = StepAction.ENTER.key(ref, arm, epoch)
        enter: Owed = (key, ref, StepAction.ENTER,
                       {"node": node.name, "actor": actor, "note": note, "epoch": epoch})
        owed = self.owed_on_entering(ref, arm, key, node, actor, note)
        if owed is None:
            return [enter], {}
        outcome, rows = owed
        return [enter, *rows], {key: outcome}

    def owed_on_entering(self, ref: str, arm: int, enter_key: str, node: Node, actor: str,
                         note: str) -> tuple[str, list[Owed]] | None:
        """What entering `node` owes when it asks no hook: the enter step's outcome and the
        steps it queues (a terminal: the item's completion; an agent node: its session's
        launch, `note` a person's feedback for it). None for a human gate."""
        if node.terminal:
            return "terminal", [(StepAction.COMPLETE.key(ref, arm), ref, StepAction.COMPLETE,
                                 {"source": "graph", "actor": actor or LOOP_AUTHOR})]
        if node.actor != "agent":
            return None
        prompt = self.node_prompt(ref, node)
        if note:
            prompt += f"\n\nFeedback from @{actor}:\n\n{note}"
        return "agent", [(StepAction.LAUNCH.key(enter_key), ref, StepAction.LAUNCH, salted(
            {"node": node.name, "prompt": prompt, "respawn": False, "actor": actor,
             "endpoint": ""}))]

    def node_prompt(self, ref: str, node: Node) -> str:
        """The prompt a session at agent node `node` starts with."""
        item = self.tracker.get(ref, comments=False)
        return render(node.prompt or NODE_PROMPT, ref=ref, title=item.title, body=item.body,
                      phase=node.phase, node=node.name)

    # ------------------------------------------------------------------ sessions
    def session_id(self, step_key: str, salt: str = "") -> str:
        """A launch step's session id (`salt`: its payload's, stepactions.salted). On a shared
        database it names the host too: a host that takes a launch over from a lost one
        starts a session of its own."""
        if self.settings.database:
            return session_id_for(f"{step_key}@{self.store.host}", salt)
        return session_id_for(step_key, salt)

    def session_alive(self, sid: str, row: dict[str, Any] | None = None,
                      held: set[bytes] | None = None) -> bool:
        """Asked of the session's lock on its own host; another host's session lives while
        it is not known to have ended and its host's heartbeat does. (`row`: the session's
        row, when the caller has just read it; `held`: harness.held_files, when it asks of
        several sessions at once.)"""
        row = row if row is not None else self.store.session(sid)
        if row is not None and row.get("host") not in ("", self.store.host):
            return not row["exited"] and self.store.host_alive(str(row["host"]))
        pid = int(row["pid"]) if row else 0
        return harness_mod.session_alive(self.sessions_dir, sid, pid, held)

    @property
    def sessions_dir(self) -> Any:
        return self.settings.state_dir / "sessions"

    def end_session(self, sid: str, *, grace: float = 0.0, pid: int | None = None) -> None:
        """Stop a session of this host — its process session and every process still holding
        its lock — waiting up to `grace` s for it to end on its own first. Writes nothing.
        (`pid`: a session this process launched and never recorded.)"""
        here = pid or 0
        if pid is None:
            row = self.store.session(sid)
            if row is None or row.get("host") not in ("", self.store.host):
                return
            here = int(row["pid"])
            # Its process group and session are the recorded harness's while that pid is
            # not another's: a pid is used again only once no group or session has it, by
            # a process that starts after the session was recorded.
            same = harness_mod.recorded_process(here, str(row.get("pid_start") or ""),
                                                float(row["started"]))
            pid = 0 if same is False else here

        def alive() -> bool:
            return harness_mod.session_alive(self.sessions_dir, sid, here)

        if not alive():
            return
        self.db.settle()  # a visit's writes are not held while the session is waited for
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and alive():
            time.sleep(0.05)
        import signal

        for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
            if not alive():
                return
            if pid > 0:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, sig)
            # Its process session's members in groups of their own (a shell's jobs), and
            # those that left it keeping the lock descriptor.
            members = harness_mod.session_members(pid) if pid > 0 else []
            for holder in {*members, *harness_mod.lock_holders(self.sessions_dir, sid)}:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(holder, sig)
            until = time.monotonic() + wait
            while time.monotonic() < until and alive():
                proc = self.procs.get(sid)
                if proc is not None:
                    proc.poll()
                time.sleep(0.05)

    def close(self, *, wait: float = 0.0) -> None:
        """Close the database; with `wait`, first let this process's sessions finish."""
        for proc in self.procs.values():  # none in a one-shot command: no subprocess import
            import subprocess

            if wait and proc.poll() is None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=wait)
        self.stop_heartbeat()
        self.db.close()
