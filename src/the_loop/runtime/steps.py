"""What each kind of step does: start, enter, question, done, input, phase, complete (and
launch, from launching.py).

A step runs under its work item's claim. It checks it is still due only until its point
has decided; from then on its effects are idempotent (marked comments, keyed sessions,
set-like labels), so a redo after a crash finishes the same work without asking a hook
twice or doing anything twice — except a channel message, which is at-least-once and
carries the step's key as its `id` so a receiver can drop a repeat.
"""

from __future__ import annotations

from collections.abc import Callable

from the_loop.errors import InputTooLong
from the_loop.hooks.engine.points import (
    InputReceived,
    PhaseChanged,
    WaitingForInput,
    WorkItemComplete,
    WorkItemStart,
)
from the_loop.runtime.input_bound import MAX_LAUNCH_CHARS, input_refusal
from the_loop.runtime.launching import launch
from the_loop.runtime.service import (
    ACTIVE,
    AGENT_PREFIX,
    LOOP_AUTHOR,
    Decided,
    Loop,
    failpoint,
    render,
)
from the_loop.runtime.stepactions import StepAction, salted
from the_loop.runtime.store import Step

CONTROLS = ("approve", "reject", "stop")
#: Commands a hook cannot refuse at input_received (issue 30 item 1): a person can always
#: stop an agent, and a rejection only keeps the work where it is. Their refusal (a hook's
#: proceed: false, or a required hook's failure) is recorded and said, never obeyed.
#: `/approve` is not here: it passes a gate, so a refusal drops it (fail-closed).
UNREFUSABLE = {
    "stop": "a /stop is never refused",
    "reject": "a rejection always goes through",
}
RESUME_PROMPT = (
    "Resuming {ref} ({title}) at node {node}.\n\nInput from @{actor}:\n\n{text}\n\n"
    "Continue the {phase} work; finish with `the-loop graph complete`."
)


def classify(text: str) -> str:
    """The control command a text carries ('' when it is not one)."""
    words = text.strip().split(maxsplit=1)
    if words and words[0].startswith("/") and words[0][1:].lower() in CONTROLS:
        return words[0][1:].lower()
    return ""


def feedback(text: str) -> str:
    """What a person wrote after a control command (`/reject add tests` → `add tests`)."""
    words = text.strip().split(maxsplit=1)
    if words and classify(words[0]):
        return words[1] if len(words) > 1 else ""
    return text.strip()


def is_agent(actor: str) -> bool:
    """Input written from inside an agent session is the agent's, whoever it claims to be."""
    return actor.startswith(AGENT_PREFIX)


# ---------------------------------------------------------------------------- start
def start(loop: Loop, step: Step) -> None:
    ref = step.ref
    w = loop.work(ref)
    if "work_item_start" not in step.decisions and (
            w is None or w["state"] != "armed" or w["arm_seq"] != step.payload["arm_seq"]):
        loop.store.finish(step, "stale")
        return
    first = loop.graph.node(loop.graph.start)
    d = loop.decide(step, lambda: WorkItemStart(
        **loop.base(ref), actor=step.payload["actor"], source=step.payload["source"],
        phase=first.phase))
    if d.refused:
        loop.set_work(ref, state="refused")
        loop.post_once(ref, step.key, f"The start of this work item was refused by hook "
                                      f"`{d.refused_by}` at `work_item_start`{d.whose_reason}: "
                                      f"{d.reason}")
        failpoint("after-refusal-comment")
        loop.store.finish(step, "refused", f"{d.refused_by}: {d.reason}")
        loop.log.emit("loop.start_refused", work_item=ref, hook=d.refused_by, reason=d.reason)
        return
    for label in loop.tracker.get(ref, comments=False).labels:
        if label.startswith("loop:") and label != f"loop:{first.phase}":
            loop.tracker.label(ref, label, remove=True)  # a re-armed item starts over
    loop.tracker.label(ref, f"loop:{first.phase}")
    with loop.db.transaction() as conn:
        w = loop.work(ref)  # read in the transaction (in a visit: the row it holds)
        assert w is not None  # the start step ran on it
        epoch = int(w["epoch"]) + 1
        loop.store.set_work(ref, conn, state="running", node=first.name, epoch=epoch,
                            session_id="")
        loop.store.add_steps(conn, *loop.enter_rows(ref, int(w["arm_seq"]), epoch, first,
                                                    str(step.payload["actor"]), ""))
        loop.store.finish(step, "started", conn=conn)
    loop.log.emit("loop.started", work_item=ref)


# ---------------------------------------------------------------------------- enter
def enter(loop: Loop, step: Step) -> None:
    """Enter a node: a terminal completes, an agent node queues a launch, a gate asks."""
    ref, node = step.ref, loop.graph.node(step.payload["node"])
    w = loop.work(ref)
    if not step.decisions and (w is None or w["state"] not in ACTIVE
                               or int(w["epoch"]) != step.payload["epoch"]):
        loop.store.finish(step, "stale")
        return
    assert w is not None
    actor = step.payload["actor"]
    owed = loop.owed_on_entering(ref, int(w["arm_seq"]), step.key, node, str(actor),
                                 str(step.payload["note"]))
    if owed is not None:  # (queued done by the step that moved the item here, enter_rows,
        outcome, rows = owed  # but for one queued by an earlier version of the-loop)
        with loop.db.transaction() as conn:
            if outcome == "agent":
                loop.store.set_work(ref, conn, state="running", node=node.name)
            loop.store.add_steps(conn, rows)
            loop.store.finish(step, outcome, conn=conn)
        return
    loop.set_work(ref, state="gate", node=node.name)
    d = loop.decide(step, lambda: WaitingForInput(
        **loop.base(ref), kind="gate", node=node.name, phase=node.phase))
    changed = sorted(k for k in ("question", "summary") if k in d.changed_by)
    if changed:
        loop.log.emit("hooks.ignored", point="waiting_for_input", work_item=ref,
                      hook=", ".join(sorted({d.changed_by[k] for k in changed})),
                      fields=changed, why="a gate posts the graph's request text")
    request = node.request or f"Waiting for review at {node.name}: reply /approve or /reject."
    loop.post_once(ref, step.key, request)
    loop.store.finish(step, "gate")
    loop.log.emit("gate.entered", work_item=ref, node=node.name)


# ---------------------------------------------------------------------------- question
def question(loop: Loop, step: Step) -> None:
    """An agent's question: waiting_for_input, then the final text is posted."""
    ref, p = step.ref, step.payload
    w = loop.work(ref)
    if "waiting_for_input" not in step.decisions and (w is None or w["state"] not in ACTIVE):
        loop.store.finish(step, "stale")
        return
    node = loop.graph.node(str(w["node"] if w else p["node"]))
    d = loop.decide(step, lambda: WaitingForInput(
        **loop.base(ref), kind="question", session_id=p["session_id"], node=node.name,
        phase=node.phase, question=p["question"], summary=p["summary"]))
    # No session id: anyone who reads the tracker reads this (docs/security.md).
    body = f"**Question from the agent** at {node.name}\n\n{d['question']}"
    if d["summary"]:
        body += f"\n\n_Summary:_ {d['summary']}"
    loop.post_once(ref, step.key, body)
    failpoint("question")
    loop.store.finish(step, "posted", str(d["question"]))
    loop.log.emit("question.posted", work_item=ref, session_id=p["session_id"])


# ---------------------------------------------------------------------------- done
def node_done(loop: Loop, step: Step) -> None:
    """An agent's `graph complete`: the node it finished, moved on along this daemon's own
    graph (the one-shot that asked names only the node and the moment)."""
    ref, p = step.ref, step.payload
    w = loop.work(ref)
    node = loop.graph.nodes.get(str(p["node"]))
    if (w is None or w["state"] not in ("running", "waiting") or w["node"] != p["node"]
            or int(w["epoch"]) != int(p["epoch"]) or node is None or node.actor != "agent"):
        loop.store.finish(step, "stale", "the item moved on before the daemon took it in")
        return
    if p["summary"]:
        loop.post_once(ref, step.key, f"**{node.name} complete.** {p['summary']}")
    loop.advance(ref, "done", actor=str(p["actor"]), step=step)


# ---------------------------------------------------------------------------- input
def take_input(loop: Loop, step: Step) -> None:
    """input_received, then deliver, read by the gate, or run."""
    ref, p = step.ref, step.payload
    actor, endpoint = str(p["actor"]), str(p["endpoint"])
    source = str(p.get("source") or "comment")  # a step queued before sources were kept
    w = loop.work(ref)
    if "input_received" not in step.decisions and (w is None or w["state"] not in ACTIVE):
        loop.store.finish(step, "ignored", "the work item is not active")
        return
    assert w is not None
    text = loop.tracker.comment_body(int(p["comment"]))
    too_long = "" if "input_received" in step.decisions else input_refusal(text)
    if too_long:  # refused alone: the item goes on as if it had not been sent
        loop.post_once(ref, step.key, f"Input from @{actor} was not taken: {too_long}.")
        loop.store.finish(step, "refused", f"too long: {too_long}")
        loop.log.emit("input.refused", work_item=ref, hook="", reason=too_long, actor=actor)
        return
    node = loop.graph.node(w["node"]) if w["node"] else loop.graph.node(loop.graph.start)
    control = classify(text)
    if control == "stop" and w["session_id"]:
        loop.end_session(str(w["session_id"]))  # before any hook: nothing delays a stop
    if control:  # the input's type, input_received's fact `kind` (a policy reads it so)
        input_type = "command"
    elif w["state"] == "waiting":
        input_type = "answer"
    elif endpoint and endpoint != ref:
        input_type = "review"
    else:
        input_type = "comment"
    d = loop.decide(step, lambda: InputReceived(
        **loop.base(ref), kind=input_type, actor=actor, source=source, control=control,
        node=node.name, phase=node.phase, text=text))
    failpoint("input")
    if d.refused and control not in UNREFUSABLE:
        loop.post_once(ref, step.key, f"Input from @{actor} was dropped by hook "
                                      f"`{d.refused_by}` at `input_received`{d.whose_reason}: "
                                      f"{d.reason}")
        loop.store.finish(step, "refused", f"{d.refused_by}: {d.reason}")
        loop.log.emit("input.refused", work_item=ref, hook=d.refused_by, reason=d.reason,
                      actor=actor)
        return
    # `text` replaces what is delivered. The command stays the one the person wrote: a
    # hook may drop it (proceed: false) but never turn a comment into an approval or an
    # approval into a rejection -- a decision cannot pass a gate or choose an edge.
    final = str(d["text"])
    said = _overridden(loop, step, d, control) if d.refused else ""
    done = _act(loop, step, w, node, control, final, said)
    loop.log.emit("input.delivered", work_item=ref, kind=input_type, actor=actor, done=done,
                  source=source)


def _overridden(loop: Loop, step: Step, d: Decided, control: str) -> str:
    """A refusal of a command no hook may refuse: recorded, and the sentence saying so."""
    loop.log.emit("input.refusal_overridden", work_item=step.ref, control=control,
                  hook=d.refused_by, reason=d.reason, actor=str(step.payload["actor"]))
    return (f"Hook `{d.refused_by}` refused this /{control} at `input_received`"
            f"{d.whose_reason} ({d.reason}); {UNREFUSABLE[control]}: the refusal is "
            "recorded only.")


def _act(loop: Loop, step: Step, w: dict[str, object], node: object, control: str,
         final: str, said: str = "") -> str:
    from the_loop.runtime.graph import Node

    assert isinstance(node, Node)
    ref, actor = step.ref, str(step.payload["actor"])
    gate_outcome = {"approve": "approved", "reject": "rejected"}.get(control, "")
    ignore: Callable[[str], str] = lambda why: _ignored(loop, step, why)  # noqa: E731
    if control == "stop":
        sid = str(w["session_id"])
        if sid:
            loop.end_session(sid)
        loop.set_work(ref, state="stopped")
        loop.post_once(ref, step.key, f"Stopped by @{actor}; re-arm with "
                                      f"`the-loop start {ref}`." + (f"\n\n{said}" if said else ""))
        loop.store.finish(step, "stopped")
        loop.log.emit("loop.disarmed", work_item=ref, why=f"/stop by {actor}")
        return "stopped"
    if gate_outcome and is_agent(actor):
        return ignore(f"`/{control}` from {actor} ignored: an agent cannot answer a gate.")
    if gate_outcome and w["state"] == "gate" and loop.graph.next(node.name, gate_outcome):
        if said:
            loop.post_once(ref, step.key, said)
        loop.advance(ref, gate_outcome, actor=actor, note=feedback(final), step=step)
        return gate_outcome
    if gate_outcome and w["state"] == "gate":
        return ignore(f"`/{control}` from @{actor} ignored: gate {node.name} has no "
                      f"{gate_outcome!r} edge (its outcomes: "
                      f"{', '.join(loop.graph.outcomes(node.name))}).")
    if control:
        return ignore(f"`/{control}` from @{actor} ignored: {ref} is not at a human gate "
                      f"({w['state']} at {node.name}).")
    if not is_agent(actor) and w["state"] in ("running", "waiting") and node.actor == "agent":
        item = loop.tracker.get(ref, comments=False)
        prompt = render(RESUME_PROMPT, ref=ref, title=item.title, node=node.name,
                        actor=actor, text=final, phase=node.phase)
        endpoint = str(step.payload["endpoint"])
        try:
            _resume(loop, step, node.name, endpoint, prompt, f"\n\nInput from @{actor}:"
                                                             f"\n\n{final}")
        except InputTooLong as exc:  # refused alone: the queued launch goes on without it
            loop.post_once(ref, step.key, f"Input from @{actor} was not taken: {exc}.")
            loop.store.finish(step, "refused", f"too long: {exc}")
            loop.log.emit("input.refused", work_item=ref, hook="", reason=str(exc),
                          actor=actor)
            return "refused"
        return "resumed"
    loop.store.finish(step, "recorded")
    return "recorded"


def _resume(loop: Loop, step: Step, node: str, endpoint: str, prompt: str,
            joined: str) -> None:
    """Queue a launch resuming `node` with this input, or join the one already queued."""
    ref, actor = step.ref, str(step.payload["actor"])
    full: InputTooLong | None = None
    with loop.db.transaction() as conn:
        # A launch queued and not started yet (an earlier input, the node's own) takes this
        # input too: one session gets both, none is ended before it reads its own.
        try:
            joined_to = loop.store.extend_queued_launch(conn, ref, node, endpoint, joined,
                                                        MAX_LAUNCH_CHARS)
        except InputTooLong as exc:  # said by the caller; not raised in the block, which
            full = exc  # would roll the visit's batch back (the earlier inputs with it)
        else:
            if not joined_to:
                loop.store.add_step(conn, StepAction.LAUNCH.key(step.key), ref,
                                    StepAction.LAUNCH,
                                    salted({"node": node, "prompt": prompt, "respawn": True,
                                            "actor": actor, "endpoint": endpoint}))
            loop.store.finish(step, "resumed", conn=conn)
    if full is not None:
        raise full


def _ignored(loop: Loop, step: Step, why: str) -> str:
    loop.post_once(step.ref, step.key, why)
    loop.store.finish(step, "ignored", why)
    return "ignored"


def ingest(loop: Loop, ref: str, pulls: list[str] | None = None) -> int:
    """Queue new comments on an active item (and its pull requests) as input steps.
    `pulls`: the open pull requests naming `ref` (read here when not given)."""
    if pulls is None:
        pulls = [i.ref for i in loop.tracker.items(state="open", parent=ref)]
    endpoints = [ref] + [pr for pr in pulls if loop.work(pr) is None]
    held = loop.db.claim_of(ref) is not None  # (a visit's: nobody re-arms it meanwhile)
    n = 0
    for endpoint in endpoints:
        after = loop.store.cursor(endpoint)
        comments = loop.tracker.comments_after(endpoint, after)
        if comments:
            n += loop.store.take_input(ref, endpoint, comments, skip=LOOP_AUTHOR,
                                       after=after if held else None)
    return n


# ---------------------------------------------------------------------------- phase
def phase(loop: Loop, step: Step) -> None:
    """phase_changed, then the phase labels and the channels (unless notify is false)."""
    ref, p = step.ref, step.payload
    d = loop.decide(step, lambda: PhaseChanged(
        **loop.base(ref), actor=p["actor"], from_phase=p["from_phase"],
        to_phase=p["to_phase"], from_node=p["from_node"], to_node=p["to_node"],
        outcome=p["outcome"], terminal=p["terminal"]))
    loop.tracker.relabel(ref, f"loop:{p['from_phase']}", f"loop:{p['to_phase']}")
    if d["notify"] is not False:
        if loop.channels.calls_out:  # a visit's writes are not held while one is called
            loop.db.settle()
        loop.channels.publish({
            "type": "phase.completed" if p["terminal"] else "phase.changed", "id": step.key,
            "work_item": ref, "from_phase": p["from_phase"], "to_phase": p["to_phase"],
            "actor": p["actor"]})
        loop.log.emit("phase.published", work_item=ref, to_phase=p["to_phase"])
    loop.store.finish(step, "published" if d["notify"] is not False else "quiet")


# ---------------------------------------------------------------------------- complete
def complete(loop: Loop, step: Step) -> None:
    """work_item_complete, then the closure announcement."""
    ref, p = step.ref, step.payload
    w = loop.work(ref) or {}
    if "work_item_complete" not in step.decisions and w.get("state") not in ACTIVE:
        loop.store.finish(step, "stale")
        return
    if p["source"] == "graph":
        loop.tracker.close(ref, actor=LOOP_AUTHOR)
    elif w.get("session_id"):
        loop.end_session(str(w["session_id"]))  # a person closed it: stop working on it
    node = loop.graph.nodes.get(str(w.get("node") or ""))
    d = loop.decide(step, lambda: WorkItemComplete(
        **loop.base(ref), state="closed", source=p["source"], actor=p["actor"],
        phase=node.phase if node else "", node=node.name if node else ""))
    failpoint("complete")
    # A comment written before the closure that no poll has read yet becomes an input step
    # now (ignored: the item is done), so no person's input is left unrecorded by the race.
    ingest(loop, ref)
    loop.set_work(ref, state="done")
    loop.log.emit("item.completed", work_item=ref, source=p["source"])
    if d["announce"] is not False:
        if loop.channels.calls_out:  # a visit's writes are not held while one is called
            loop.db.settle()
        loop.channels.publish({"type": "item.closed", "id": step.key, "work_item": ref,
                               "source": p["source"], "actor": p["actor"]})
        loop.log.emit("item.announced", work_item=ref)
    loop.store.finish(step, "completed")


#: What each action of a step runs (a test checks that every `StepAction` has one).
RUN: dict[StepAction, Callable[[Loop, Step], None]] = {
    StepAction.START: start, StepAction.ENTER: enter, StepAction.LAUNCH: launch,
    StepAction.QUESTION: question, StepAction.DONE: node_done, StepAction.INPUT: take_input,
    StepAction.PHASE: phase, StepAction.COMPLETE: complete,
}
