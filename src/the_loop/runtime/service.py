"""The loop: arms work items, starts them, launches sessions, walks the graph, closes items.

Every lifecycle point is fired by one visible `.fire(<Context>(...))` call placed before the
thing it decides: here, and `input_received` in poller.py (`grep -rn "fire(" runtime/`
lists all eight call sites; waiting_for_input has two, a question and a gate).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from typing import Any

from the_loop.config import Config
from the_loop.errors import LoopError
from the_loop.events import EventLog
from the_loop.hooks.chain import Chain, Outcome
from the_loop.hooks.loading import chain_once
from the_loop.hooks.points import (
    Context,
    PhaseChanged,
    SessionSpawn,
    SessionSpawned,
    WaitingForInput,
    WorkItemComplete,
    WorkItemStart,
)
from the_loop.runtime import harness as harness_mod
from the_loop.runtime import workspace
from the_loop.runtime.channels import Channels
from the_loop.runtime.db import Database
from the_loop.runtime.decisionlog import DecisionLog
from the_loop.runtime.graph import Node, load_graph
from the_loop.runtime.record import point_record
from the_loop.runtime.settings import Settings, settings_of
from the_loop.runtime.tracker import LocalTracker

LOOP_AUTHOR = "the-loop"
ACTIVE = ("armed", "running", "waiting", "gate")
FAILPOINT_ENV = "THE_LOOP_FAILPOINT"


def marker(key: str) -> str:
    """The hidden marker that makes a loop comment idempotent."""
    return f"<!-- the-loop:{key} -->"


def failpoint(name: str) -> None:
    """Die here when $THE_LOOP_FAILPOINT names this step (crash-safety tests only)."""
    if os.environ.get(FAILPOINT_ENV) == name:
        os._exit(86)


def decided(outcome: Outcome, name: str) -> Any:
    """The final value of a decision after the chain ran."""
    return outcome.context.__dict__[name]


def render(template: str, **values: str) -> str:
    out = template
    for key, value in values.items():
        out = out.replace("{" + key + "}", value)
    return out


class Loop:
    """One process's view of the loop. Daemons pass strict_hooks=True (fail closed)."""

    def __init__(self, config: Config, *, strict_hooks: bool, source: str = "the-loop") -> None:
        self.config = config
        self.settings: Settings = settings_of(config)
        self.log = EventLog(self.settings.events_path, source=source)
        self.db = Database(self.settings.db_path)
        self.tracker = LocalTracker(self.db, self.settings.repository)
        self.graph = load_graph(self.settings.graph)
        self.channels = Channels(self.settings.channels, self.log)
        self.strict_hooks = strict_hooks
        self._chain: Chain | None = None
        self.decision_log = DecisionLog(self.settings.db_path,
                                        keep_days=self.settings.decision_keep_days, log=self.log)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    # ------------------------------------------------------------------ hooks
    @property
    def chain(self) -> Chain:
        """Loaded on first use, at most once per process."""
        if self._chain is None:
            self._chain = chain_once(self.config, strict=self.strict_hooks, log=self.log)
        return self._chain

    def fire(self, ctx: Context) -> Outcome:
        """Run the chain at ctx's point and record that the point fired."""
        outcome = self.chain.invoke(ctx)
        self.log.emit("lifecycle.point", **point_record(ctx, outcome))
        self.decision_log.record(ctx, outcome, self.chain)
        return outcome

    # ------------------------------------------------------------------ state
    def work(self, ref: str) -> dict[str, Any] | None:
        row = self.db.conn.execute("SELECT * FROM work WHERE ref=?", (ref,)).fetchone()
        return dict(row) if row else None

    def set_work(self, ref: str, **fields: Any) -> None:
        fields["updated"] = time.time()
        cols = ", ".join(f"{k}=?" for k in fields)
        with self.db.transaction() as conn:
            conn.execute(f"UPDATE work SET {cols} WHERE ref=?", (*fields.values(), ref))

    def settled(self, key: str) -> dict[str, Any] | None:
        row = self.db.conn.execute("SELECT * FROM settled WHERE key=?", (key,)).fetchone()
        return dict(row) if row else None

    def base(self, ref: str) -> dict[str, Any]:
        """The facts every context carries."""
        item = self.tracker.get(ref, comments=False)
        return {"work_item": self.tracker.work_item(ref), "loop": self.settings.loop,
                "labels": list(item.labels)}

    def post_once(self, ref: str, key: str, body: str) -> bool:
        """Post a marked loop comment unless one with this marker exists; True if posted."""
        mark = marker(key)
        if any(mark in c.body for c in self.tracker.get(ref).comments):
            return False
        self.tracker.comment(ref, f"{body}\n\n{mark}", author=LOOP_AUTHOR)
        return True

    def say(self, ref: str, body: str) -> None:
        """An ordinary loop comment (not idempotent)."""
        self.tracker.comment(ref, body, author=LOOP_AUTHOR)

    # ------------------------------------------------------------------ arming
    def arm(self, ref: str, *, actor: str, source: str) -> bool:
        """Arm a work item; False when it is already armed or active."""
        ref = self.tracker.resolve(ref)
        item = self.tracker.get(ref)
        if item.state != "open":
            raise LoopError(f"{ref} is closed; only an open ticket or pull request can start")
        # Input is what people write after the arming: on the ticket and on its pull requests.
        cursors = {ref: item.comments[-1].id if item.comments else 0}
        for pr in self.tracker.items(state="open"):
            if pr.parent == ref:
                comments = self.tracker.get(pr.ref).comments
                cursors[pr.ref] = comments[-1].id if comments else 0
        with self.db.transaction() as conn:
            row = conn.execute("SELECT state, arm_seq FROM work WHERE ref=?", (ref,)).fetchone()
            if row is not None and row["state"] in ACTIVE:
                return False
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
        self.log.emit("loop.armed", work_item=ref, actor=actor, source=source)
        return True

    def start(self, ref: str) -> str:
        """Start an armed item: work_item_start, then the first node. Returns the new state."""
        w = self.work(ref)
        if w is None or w["state"] != "armed":
            return w["state"] if w else "unknown"
        key = f"start:{ref}:{w['arm_seq']}"
        if self.settled(key):
            return self._finish_refusal(ref, key)
        first = self.graph.node(self.graph.start)
        outcome = self.fire(WorkItemStart(
            **self.base(ref), actor=w["actor"], source=w["source"], phase=first.phase,
        ))
        if outcome.refused:
            self.refuse(ref, key, "work_item_start", outcome, new_state="refused",
                        what="The start of this work item")
            self.log.emit("loop.start_refused", work_item=ref, hook=outcome.refused_by,
                          reason=decided(outcome, "reason"))
            return "refused"
        with self.db.transaction() as conn:
            conn.execute("INSERT INTO settled VALUES (?, 'started', '', 1, ?)", (key, time.time()))
            conn.execute("UPDATE work SET state='running', node=? WHERE ref=?",
                         (first.name, ref))
        self.log.emit("loop.started", work_item=ref)
        for label in self.tracker.get(ref, comments=False).labels:
            if label.startswith("loop:"):  # a re-armed item starts over: one phase label
                self.tracker.label(ref, label, remove=True)
        self.tracker.label(ref, f"loop:{first.phase}")
        self.enter(ref, first, actor=w["actor"])
        w = self.work(ref)
        return str(w["state"]) if w else "unknown"

    def refuse(self, ref: str, key: str, point: str, outcome: Outcome, *, new_state: str,
               what: str) -> None:
        """Settle a refusal, then post its one marked comment (crash-safe, never twice)."""
        hook = outcome.refused_by or "?"
        reason = str(decided(outcome, "reason")) or "no reason given"
        body = f"{what} was refused by hook `{hook}` at `{point}`: {reason}"
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO settled VALUES (?, 'refused', ?, 0, ?)",
                (key, json.dumps({"ref": ref, "body": body}), time.time()),
            )
            conn.execute("UPDATE work SET state=? WHERE ref=?", (new_state, ref))
        self._finish_refusal(ref, key)

    def _finish_refusal(self, ref: str, key: str) -> str:
        row = self.settled(key)
        if row and row["outcome"] == "refused" and not row["done"]:
            body = json.loads(row["detail"])["body"]
            self.post_once(ref, key, body)
            failpoint("after-refusal-comment")
            with self.db.transaction() as conn:
                conn.execute("UPDATE settled SET done=1 WHERE key=?", (key,))
        w = self.work(ref)
        if w and w["state"] == "armed" and row and row["outcome"] == "refused":
            self.set_work(ref, state="refused")
        w = self.work(ref)
        return str(w["state"]) if w else "unknown"

    def finish_pending(self) -> None:
        """Post refusal comments a crashed process settled but did not finish."""
        rows = self.db.conn.execute(
            "SELECT key, detail FROM settled WHERE outcome='refused' AND done=0").fetchall()
        for row in rows:
            self._finish_refusal(json.loads(row["detail"])["ref"], str(row["key"]))

    # ------------------------------------------------------------------ nodes
    def enter(self, ref: str, node: Node, *, actor: str, note: str = "") -> None:
        """Enter a node; `note` (a reviewer's feedback) is added to an agent node's prompt."""
        if node.terminal:
            self.complete(ref, source="graph", actor=actor or LOOP_AUTHOR)
        elif node.actor == "agent":
            item = self.tracker.get(ref, comments=False)
            prompt = render(node.prompt or "Work on {ref} ({title}) at node {node}.",
                            ref=ref, title=item.title, body=item.body, phase=node.phase,
                            node=node.name)
            if note:
                prompt += f"\n\nFeedback from @{actor}:\n\n{note}"
            self.spawn(ref, node, prompt=prompt, respawn=False, actor=actor)
        else:
            self.enter_gate(ref, node)

    def enter_gate(self, ref: str, node: Node) -> None:
        self.set_work(ref, state="gate", node=node.name, session_id="")
        outcome = self.fire(WaitingForInput(
            **self.base(ref), kind="gate", node=node.name, phase=node.phase,
        ))
        changed = sorted(k for k in ("question", "summary") if k in outcome.changed_by)
        if changed:
            self.log.emit("hooks.ignored", point="waiting_for_input", work_item=ref,
                          hook=", ".join(sorted({outcome.changed_by[k] for k in changed})),
                          fields=changed, why="a gate posts the graph's request text")
        request = node.request or f"Waiting for review at {node.name}: reply /approve or /reject."
        self.say(ref, request)
        self.log.emit("gate.entered", work_item=ref, node=node.name)

    def spawn(self, ref: str, node: Node, *, prompt: str, respawn: bool, actor: str,
              endpoint: str = "") -> bool:
        """session_spawn, then launch; False when a hook refused the launch."""
        h = self.settings.harnesses[self.settings.harness]
        target = self.tracker.work_item(endpoint or ref)
        wi = self.tracker.work_item(ref)
        try:
            path, is_git = workspace.prepare(self.settings.state_dir, wi,
                                             self.settings.git_repository)
        except LoopError as exc:
            self.launch_failed(ref, str(exc))
            return False
        self.log.emit("workspace.prepared", work_item=ref, path=str(path), git=is_git)
        outcome = self.fire(SessionSpawn(
            **self.base(ref), actor=actor, harness=h.name, model=h.model,
            command=list(h.command), cwd=str(path), respawn=respawn, endpoint=target,
            node=node.name, phase=node.phase, prompt=prompt,
        ))
        if outcome.refused:
            key = f"spawn:{ref}:{harness_mod.new_session_id()}"
            self.log.emit("session.refused", work_item=ref, endpoint=target.ref,
                          hook=outcome.refused_by, reason=decided(outcome, "reason"))
            if endpoint and endpoint != ref:
                # A pull request's own session was refused: deliver into the ticket's session.
                return self.spawn(ref, node, prompt=prompt, respawn=respawn, actor=actor)
            self.refuse(ref, key, "session_spawn", outcome, new_state="blocked",
                        what="A session launch for this work item")
            return False
        final_prompt = str(decided(outcome, "prompt"))
        sid = harness_mod.new_session_id()
        try:
            launched, proc = harness_mod.launch(
                h.command, prompt=final_prompt, cwd=path, config_path=self.config.path,
                work_item=ref, session_id=sid, log_dir=self.settings.state_dir / "sessions",
                extra_env={"THE_LOOP_NODE": node.name},
            )
        except LoopError as exc:
            self.launch_failed(ref, str(exc))
            return False
        self.procs[sid] = proc
        with self.db.transaction() as conn:
            conn.execute(
                "INSERT INTO sessions(id, ref, endpoint, harness, pid, node, started, log) "
                "VALUES (?,?,?,?,?,?,?,?)",
                (sid, ref, target.ref, h.name, launched.pid, node.name, time.time(),
                 str(launched.log)),
            )
            conn.execute("UPDATE work SET state='running', node=?, session_id=? WHERE ref=?",
                         (node.name, sid, ref))
        self.log.emit("session.launched", work_item=ref, session_id=sid,
                      session_pid=launched.pid, endpoint=target.ref, respawn=respawn)
        spawned = self.fire(SessionSpawned(
            **self.base(ref), session_id=sid, pid=launched.pid, harness=h.name, model=h.model,
            endpoint=target, respawn=respawn, node=node.name, phase=node.phase,
        ))
        if decided(spawned, "announce") is not False:
            model = f", model {h.model}" if h.model else ""
            self.say(ref, f"Session `{sid}` started at {node.name} (harness {h.name}{model}).")
            self.log.emit("session.announced", work_item=ref, session_id=sid)
        return True

    def launch_failed(self, ref: str, error: str) -> None:
        """A session could not start: block the item (never half-running), say why once."""
        self.set_work(ref, state="blocked", session_id="")
        self.say(ref, f"A session for this work item could not start: {error}. Fix it, then "
                      f"re-arm with `the-loop start {ref}`.")
        self.log.emit("session.failed", work_item=ref, error=error)

    # ------------------------------------------------------------------ agent side
    def ask(self, ref: str, question: str, *, summary: str = "", session_id: str = "") -> str:
        """An agent's question: waiting_for_input, then the final text is posted."""
        ref = self.tracker.resolve(ref)
        w = self._active(ref)
        node = self.graph.node(w["node"]) if w["node"] else self.graph.node(self.graph.start)
        if node.actor != "agent" or w["state"] == "gate":
            raise LoopError(f"{ref} is at {node.name}, a human gate, waiting for a person's "
                            "/approve or /reject; an agent asks only at an agent node")
        outcome = self.fire(WaitingForInput(
            **self.base(ref), kind="question", session_id=session_id or w["session_id"],
            node=node.name, phase=node.phase, question=question, summary=summary,
        ))
        final_q = str(decided(outcome, "question"))
        final_s = str(decided(outcome, "summary"))
        sid = session_id or w["session_id"]
        body = f"**Question from the agent** (session `{sid}`)\n\n{final_q}"
        if final_s:
            body += f"\n\n_Summary:_ {final_s}"
        self.say(ref, body)
        self.set_work(ref, state="waiting")
        self.log.emit("question.posted", work_item=ref, session_id=sid)
        return final_q

    def graph_complete(self, ref: str, *, summary: str = "", actor: str = "agent") -> str:
        """The agent finished its node: advance along `done`. Returns the new node."""
        ref = self.tracker.resolve(ref)
        w = self._active(ref)
        node = self.graph.node(w["node"])
        if node.actor != "agent":
            raise LoopError(f"{ref} is at {node.name}, a human gate; only a person's /approve "
                            "moves it on")
        if summary:
            self.say(ref, f"**{node.name} complete.** {summary}")
        return self.advance(ref, "done", actor=actor)

    def _active(self, ref: str) -> dict[str, Any]:
        w = self.work(ref)
        if w is None or w["state"] not in ACTIVE:
            state = w["state"] if w else "not armed"
            raise LoopError(f"{ref} is not an active work item ({state}); arm it with "
                            f"`the-loop start {ref}`")
        return w

    # ------------------------------------------------------------------ graph
    def advance(self, ref: str, outcome_name: str, *, actor: str, note: str = "") -> str:
        w = self._active(ref)
        here = self.graph.node(w["node"])
        there = self.graph.next(here.name, outcome_name)
        if there is None:
            raise LoopError(f"node {here.name} has no edge for outcome {outcome_name!r}; "
                            f"outcomes: {', '.join(self.graph.outcomes(here.name))}")
        self.set_work(ref, node=there.name)
        self.log.emit("phase.changed", work_item=ref, from_node=here.name, to_node=there.name,
                      outcome=outcome_name)
        if there.phase != here.phase or there.terminal:
            self.tracker.label(ref, f"loop:{here.phase}", remove=True)
            self.tracker.label(ref, f"loop:{there.phase}")
            outcome = self.fire(PhaseChanged(
                **self.base(ref), actor=actor, from_phase=here.phase, to_phase=there.phase,
                from_node=here.name, to_node=there.name, outcome=outcome_name,
                terminal=there.terminal,
            ))
            if decided(outcome, "notify") is not False:
                self.channels.publish({
                    "type": "phase.completed" if there.terminal else "phase.changed",
                    "work_item": ref, "from_phase": here.phase, "to_phase": there.phase,
                    "actor": actor,
                })
                self.log.emit("phase.published", work_item=ref, to_phase=there.phase)
        self.enter(ref, there, actor=actor, note=note)
        return there.name

    def complete(self, ref: str, *, source: str, actor: str) -> None:
        """work_item_complete, then the closure announcement."""
        w = self.work(ref)
        seq = w["arm_seq"] if w else 0
        key = f"complete:{ref}:{seq}"
        if self.settled(key):
            return
        if source == "graph":
            self.tracker.close(ref, actor=LOOP_AUTHOR)
        elif w and w["session_id"]:
            self.terminate(str(w["session_id"]))  # a person closed it: stop working on it
        node = self.graph.nodes.get(w["node"]) if w and w["node"] else None
        outcome = self.fire(WorkItemComplete(
            **self.base(ref), state="closed", source=source, actor=actor,
            phase=node.phase if node else "", node=node.name if node else "",
        ))
        with self.db.transaction() as conn:
            conn.execute("INSERT OR IGNORE INTO settled VALUES (?, 'completed', '', 1, ?)",
                         (key, time.time()))
            conn.execute("UPDATE work SET state='done' WHERE ref=?", (ref,))
        self.log.emit("item.completed", work_item=ref, source=source)
        if decided(outcome, "announce") is not False:
            self.channels.publish({"type": "item.closed", "work_item": ref, "source": source,
                                   "actor": actor})
            self.log.emit("item.announced", work_item=ref)

    def stop(self, ref: str, *, actor: str) -> None:
        w = self.work(ref)
        if w and w["session_id"]:
            self.terminate(str(w["session_id"]))
        self.set_work(ref, state="stopped")
        self.say(ref, f"Stopped by @{actor}; re-arm with `the-loop start {ref}`.")
        self.log.emit("loop.disarmed", work_item=ref, why=f"/stop by {actor}")

    def terminate(self, session_id: str) -> None:
        row = self.db.conn.execute("SELECT pid, exited FROM sessions WHERE id=?",
                                   (session_id,)).fetchone()
        if row and not row["exited"] and harness_mod.alive(int(row["pid"])):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(int(row["pid"]), signal.SIGTERM)

    def close(self, *, wait: float = 0.0) -> None:
        """Close the database; with `wait`, first let this process's sessions finish."""
        for proc in self.procs.values():
            if wait and proc.poll() is None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=wait)
        self.db.close()
