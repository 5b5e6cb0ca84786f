"""The catalog of lifecycle points: one typed context per point, the single source of truth.

Every other view of the lifecycle — the SDK base class, `the-loop hooks points`, the JSON
Schema, the docs table and the policy checker — is derived from the classes below or
parity-tested against them. A context is a mutable dataclass of *facts* (read-only: the
chain ignores a changed fact and records the drop) and *decisions* (typed fields the loop
reads back and applies). `WorkItem` is a frozen record shared by every context.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

from the_loop.configspec import Enum, ListOf
from the_loop.errors import quote
from the_loop.hooks.engine.compat import ContextMethods, WorkItemMethods
from the_loop.hooks.engine.specs import DECISION as DECISION  # the catalog's names, re-exported
from the_loop.hooks.engine.specs import FACT as FACT
from the_loop.hooks.engine.specs import FieldSpec as FieldSpec
from the_loop.hooks.engine.specs import PointSpec as PointSpec
from the_loop.hooks.engine.specs import point_doc as point_doc
from the_loop.hooks.engine.specs import spec_of
from the_loop.util import closest as closest  # re-exported: the policy modules import it here


@dataclass(frozen=True)
class WorkItem(WorkItemMethods):
    """A read-only record of the ticket or pull request being delivered."""

    ref: str = ""
    tracker: str = ""
    host: str = ""
    owner: str = ""
    repo: str = ""
    repository: str = ""
    number: int = 0
    kind: str = "issue"
    url: str = ""
    id: str = ""
    author: str = ""
    base: str = ""
    head: str = ""
    head_repository: str = ""
    fork: bool = False
    draft: bool = False

    def to_json(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in WORK_ITEM_FIELDS}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> WorkItem:
        """Build from a JSON object; raises `ValueError` naming a bad key or type."""
        if not isinstance(data, dict):
            raise ValueError(f"expected an object, got {type(data).__name__}")
        unknown = sorted(set(data) - set(WORK_ITEM_FIELDS))
        if unknown:
            raise ValueError(
                f"unknown field(s) {', '.join(unknown)}; valid: {', '.join(WORK_ITEM_FIELDS)}"
            )
        for key, value in data.items():
            want = _PY[WORK_ITEM_TYPES[key]]
            if type(value) is not want:
                raise ValueError(
                    f"{key} must be {want.__name__} (got {value!r} that is "
                    f"{type(value).__name__})"
                )
        return cls(**data)


WORK_ITEM_DOCS: dict[str, str] = {
    "ref": "the tracker reference, e.g. local:acme/app#12",
    "tracker": "the tracker kind, e.g. local",
    "host": "the tracker's host (empty for the local tracker)",
    "owner": "the repository owner, e.g. acme",
    "repo": "the repository name, e.g. app",
    "repository": "owner/repo, e.g. acme/app; host/owner/repo when the host is not the "
                  "tracker's default (e.g. ghe.corp.example/octo/app)",
    "number": "the ticket or pull request number",
    "kind": "issue or pull-request",
    "url": "a link a person can open",
    "id": "the tracker's own id for the item",
    "author": "who filed the ticket or opened the pull request (login; empty when the "
              "tracker does not say)",
    "base": "a pull request's base branch, e.g. main (empty for a ticket)",
    "head": "a pull request's head branch, e.g. fix-login (empty for a ticket)",
    "head_repository": "owner/repo the pull request's head branch lives in (empty for a "
                       "ticket)",
    "fork": "true when a pull request's head repository is not its base repository "
            "(derived by the tracker, never declared; false for a ticket)",
    "draft": "true for a draft pull request (false for a ticket)",
}
WORK_ITEM_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(WorkItem))
#: Each work-item field's type: str, int or bool.
WORK_ITEM_TYPES: dict[str, str] = {f.name: str(f.type) for f in dataclasses.fields(WorkItem)}
_PY: dict[str, type] = {"str": str, "bool": bool, "int": int}
#: The work-item fields only a pull request has a value for (a ticket's are empty or false).
PULL_REQUEST_FIELDS = ("base", "head", "head_repository", "fork", "draft")


# `fact()` and `decision()` return a `dataclasses.field`, so a list or WorkItem default is
# built per instance (ruff's RUF009 cannot see that; hence its noqa on such fields).
def fact(default: Any, doc: str, *, values: tuple[str, ...] = (), other_loop: bool = False
         ) -> Any:
    """A read-only field: what the loop tells the hook. `values`: the closed set this loop
    sends; `other_loop`: a fact only the open-source the-loop sends (never filled here)."""
    meta: dict[str, Any] = {"role": FACT, "doc": doc, "values": values,
                            "sent_by": "other-loop" if other_loop else "both"}
    if isinstance(default, list):
        items = tuple(default)
        return field(default_factory=lambda: list(items), metadata=meta)
    if isinstance(default, WorkItem):
        return field(default_factory=WorkItem, metadata=meta)
    return field(default=default, metadata=meta)


_UNKNOWN_DOC = ("the facts this context does not know (dotted, e.g. work_item.fork): the "
                "caller did not send them; a rule that reads one is not decided")


def unknown(*names: str) -> Any:
    """The `unknown_facts` of a point whose runtime here never fills `names`."""
    return fact(list(names), _UNKNOWN_DOC)


def decision(default: bool | str, doc: str, applied: str) -> Any:
    """A field the loop reads back after the chain and applies as `applied` says."""
    return field(default=default, metadata={"role": DECISION, "doc": doc, "applied": applied})


@dataclass
class Context(ContextMethods):
    """Fields every point carries. Subclasses add their own facts and decisions."""

    POINT: ClassVar[str] = ""
    WHEN: ClassVar[str] = ""

    work_item: WorkItem = fact(WorkItem(), "the work item (read-only record)")  # noqa: RUF009
    loop: str = fact("", "the loop's name (`loop:` in cli-config.yaml)")
    labels: list[str] = fact([], "the work item's labels")  # noqa: RUF009
    unknown_facts: list[str] = unknown()  # noqa: RUF009


_PROCEED = "false refuses the operation; the loop records hooks.refused and comments once"
_REASON = "the reason shown in the refusal comment and event"


@dataclass
class WorkItemStart(Context):
    POINT: ClassVar[str] = "work_item_start"
    WHEN: ClassVar[str] = (
        "once per arming, before the workspace is prepared or any session exists"
    )

    unknown_facts: list[str] = unknown("command", "harness", "instance")  # noqa: RUF009
    actor: str = fact("", "who armed the work item (login); empty when the armLabel armed it "
                          "(the tracker does not record who added a label)")
    source: str = fact("", "how it was armed: command or label", values=("command", "label"))
    phase: str = fact("", "the phase the work item starts in")
    command: str = fact("", "the loop command that armed it", other_loop=True)
    harness: str = fact("", "the harness the work item will run with", other_loop=True)
    instance: str = fact("", "the loop instance that handles it", other_loop=True)
    proceed: bool = decision(
        True, "whether the work item starts",
        "false: the item is disarmed, one marked comment names the hook and reason, "
        "the start is settled and never retried",
    )
    reason: str = decision("", "why the start was refused", _REASON)


@dataclass
class SessionSpawn(Context):
    POINT: ClassVar[str] = "session_spawn"
    WHEN: ClassVar[str] = (
        "before every harness process launch (first spawn, a pull request's own session, "
        "a resume or a respawn), with the prompt rendered"
    )

    actor: str = fact("", "who caused the launch (login), or the loop")
    harness: str = fact("", "the harness name from cli-config.yaml")
    model: str = fact("", "the harness's model, if declared")
    command: list[str] = fact([], "the harness argv that will be launched")  # noqa: RUF009
    cwd: str = fact("", "the workspace folder the process runs in")
    respawn: bool = fact(False, "true for a resume or respawn of an earlier session")
    endpoint: WorkItem = fact(  # noqa: RUF009
        WorkItem(), "the work item or pull request the session is for"
    )
    node: str = fact("", "the graph node the session works on")
    phase: str = fact("", "the phase of that node")
    effort: str = fact("", "the reasoning effort the harness is asked for", other_loop=True)
    harness_args: list[str] = fact(  # noqa: RUF009
        [], "the extra arguments the harness is launched with", other_loop=True)
    unknown_facts: list[str] = unknown("effort", "harness_args")  # noqa: RUF009
    prompt: str = decision(
        "", "the prompt the harness receives on stdin",
        "replaces the text handed to the harness on launch",
    )
    proceed: bool = decision(
        True, "whether the process is launched",
        "false: no process starts; recorded and commented like a refused start; a pull "
        "request's own session falls back to the ticket's session",
    )
    reason: str = decision("", "why the launch was refused", _REASON)


@dataclass
class SessionSpawned(Context):
    POINT: ClassVar[str] = "session_spawned"
    WHEN: ClassVar[str] = "after a new session is registered, before the loop announces it"

    session_id: str = fact("", "the new session's id")
    pid: int = fact(0, "the harness process id")
    harness: str = fact("", "the harness name")
    model: str = fact("", "the harness's model, if declared")
    endpoint: WorkItem = fact(  # noqa: RUF009
        WorkItem(), "the work item or pull request the session is for"
    )
    respawn: bool = fact(False, "true for a resume or respawn")
    node: str = fact("", "the graph node the session works on")
    phase: str = fact("", "the phase of that node")
    tmux_target: str = fact("", "the tmux pane the session runs in", other_loop=True)
    cwd: str = fact("", "the workspace folder the session runs in")
    effort: str = fact("", "the reasoning effort the harness is asked for", other_loop=True)
    harness_args: list[str] = fact(  # noqa: RUF009
        [], "the extra arguments the harness was launched with", other_loop=True)
    unknown_facts: list[str] = unknown(  # noqa: RUF009
        "tmux_target", "effort", "harness_args")
    announce: bool = decision(
        True, "whether the loop posts its 'session started' comment",
        "false skips the session-started comment and nothing else",
    )


@dataclass
class WaitingForInput(Context):
    POINT: ClassVar[str] = "waiting_for_input"
    WHEN: ClassVar[str] = (
        "before an agent's question is posted (kind question); when a human gate is "
        "entered (kind gate)"
    )

    kind: str = fact("question", "question (an agent asked) or gate (a human gate)",
                     values=("question", "gate"))
    session_id: str = fact("", "the asking session's id (empty at a gate)")
    node: str = fact("", "the graph node")
    phase: str = fact("", "the phase of that node")
    actor: str = fact("", "who is waiting (the agent, or the gate)", other_loop=True)
    unknown_facts: list[str] = unknown("actor")  # noqa: RUF009
    question: str = decision(
        "", "the question text to post",
        "replaces the posted question; empty and ignored at a gate",
    )
    summary: str = decision(
        "", "the summary posted with the question",
        "replaces the posted summary; empty and ignored at a gate",
    )


@dataclass
class InputReceived(Context):
    POINT: ClassVar[str] = "input_received"
    WHEN: ClassVar[str] = (
        "a person's input (answer, comment or review, control command) reaches the loop, "
        "before it is delivered, read by a gate or run (a /stop ends the session first: no "
        "hook delays it)"
    )

    kind: str = fact("comment", "answer, comment, review or command",
                     values=("answer", "comment", "review", "command"))
    actor: str = fact("", "who wrote it (login)")
    source: str = fact("", "where it came from: comment, reply or api",
                       values=("comment", "reply", "api"))
    control: str = fact("", "the control command without its slash (approve, reject, "
                            "stop), or empty")
    node: str = fact("", "the graph node the work item is at")
    phase: str = fact("", "the phase of that node")
    event: str = fact("", "the tracker event that carried it, e.g. issue_comment",
                      other_loop=True)
    endpoint: WorkItem = fact(  # noqa: RUF009
        WorkItem(), "the work item or pull request the input was written on",
        other_loop=True)
    unknown_facts: list[str] = unknown("event", "endpoint")  # noqa: RUF009
    text: str = decision(
        "", "the text that will be delivered",
        "replaces what is delivered to the session, read by the gate or run",
    )
    proceed: bool = decision(
        True, "whether the input is acted on",
        "false drops the input with one marked comment and hooks.refused",
    )
    reason: str = decision("", "why the input was dropped", _REASON)


@dataclass
class PhaseChanged(Context):
    POINT: ClassVar[str] = "phase_changed"
    WHEN: ClassVar[str] = (
        "the phase changes or a terminal node is reached, before the channels are told"
    )

    actor: str = fact("", "who caused the change (an approver's login, or the agent)")
    from_phase: str = fact("", "the phase before")
    to_phase: str = fact("", "the phase after")
    from_node: str = fact("", "the graph node before")
    to_node: str = fact("", "the graph node after")
    outcome: str = fact("", "the edge taken, e.g. done or approved")
    terminal: bool = fact(False, "true when to_node is a terminal node")
    notify: bool = decision(
        True, "whether the phase.* message is published to the channels",
        "false skips that publish only",
    )


@dataclass
class WorkItemComplete(Context):
    POINT: ClassVar[str] = "work_item_complete"
    WHEN: ClassVar[str] = (
        "the ticket or pull request that is the work item closes, before the closure is "
        "announced"
    )

    state: str = fact("closed", "the item's final state")
    source: str = fact("", "graph (a terminal node) or tracker (a person closed it)",
                       values=("graph", "tracker"))
    actor: str = fact("", "who closed it (login), or the loop")
    phase: str = fact("", "the last phase")
    node: str = fact("", "the last graph node")
    reason: str = fact("", "why it closed, e.g. pr-merged", other_loop=True)
    unknown_facts: list[str] = unknown("reason")  # noqa: RUF009
    announce: bool = decision(
        True, "whether the closure is announced on the channels",
        "false skips the closure announcement only",
    )


CONTEXT_CLASSES: tuple[type[Context], ...] = (
    WorkItemStart, SessionSpawn, SessionSpawned, WaitingForInput, InputReceived,
    PhaseChanged, WorkItemComplete,
)

#: point name → context class, in lifecycle order.
POINTS: dict[str, type[Context]] = {cls.POINT: cls for cls in CONTEXT_CLASSES}

#: point name → its catalog entry, in lifecycle order.
SPECS: dict[str, PointSpec] = {cls.POINT: spec_of(cls) for cls in CONTEXT_CLASSES}


# The SDK docstrings are the catalog table (R2.5): written once, here, from the specs.
for _cls in CONTEXT_CLASSES:
    _cls.__doc__ = point_doc(SPECS[_cls.POINT])


def unknown_point_message(name: object) -> str:
    """The message for a name outside the catalog, listing the valid points."""
    hint = closest(name, tuple(POINTS)) if isinstance(name, str) else None
    text = f"{quote(name)} is not a lifecycle point"
    if isinstance(name, str) and (name.startswith("hooks.") or "." in name):
        text += " (it looks like an event type; events are records, not hook points)"
    text += f"; did you mean {hint!r}?" if hint else "."
    return text + f" Valid points: {', '.join(POINTS)}"


def context_to_json(ctx: Context) -> dict[str, Any]:
    """Every field of a context as JSON values (no dataclasses.asdict on the hot path)."""
    out: dict[str, Any] = {}
    for key, value in ctx.__dict__.items():
        if isinstance(value, WorkItem):
            out[key] = value.to_json()
        elif isinstance(value, list):
            out[key] = list(value)
        else:
            out[key] = value
    return out


def context_from_json(point: str, data: Any) -> Context:
    """Build a point's context from a JSON object of its fields.

    Absent fields take their defaults (and a fact given is not in `unknown_facts`, unless
    that is given too). Raises `ValueError` naming an unknown field (with the
    valid ones) or a value of the wrong type; nothing is coerced.
    """
    spec = SPECS[point]
    if not isinstance(data, dict):
        raise ValueError(f"the context must be a JSON object, got {type(data).__name__}")
    names = [f.name for f in spec.fields]
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        fs = spec.field(key)
        if fs is None:
            hint = closest(key, names)
            raise ValueError(
                f"{point} has no field {key!r}"
                + (f" (did you mean {hint!r}?)" if hint else "")
                + f"; valid fields: {', '.join(names)}"
            )
        kwargs[key] = check_value(fs, value, where=f"{point}.{key}")
    ctx: Context = spec.context(**kwargs)
    if "unknown_facts" not in kwargs and ctx.unknown_facts:  # a fact given is known
        ctx.unknown_facts = [n for n in ctx.unknown_facts if n not in kwargs]
    return ctx


def check_value(fs: FieldSpec, value: Any, *, where: str) -> Any:
    """Return `value` as the field's type or raise `ValueError` (never coerces)."""
    t = fs.type
    if t == "WorkItem":
        if isinstance(value, WorkItem):
            return value
        try:
            return WorkItem.from_json(value)
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from None
    if t == "list[str]":
        if isinstance(value, list) and all(type(v) is str for v in value):
            return list(value)
        raise ValueError(f"{where} must be a list of strings (got {value!r})")
    want = {"str": str, "bool": bool, "int": int}[t]
    if type(value) is not want:
        raise ValueError(
            f"{where} must be {t} (got {value!r} that is {type(value).__name__})"
        )
    return value


def point_list(hint: str = "") -> ListOf:
    """The description of an `on:` value: a point, or a non-empty list of distinct points,
    returned in catalog order."""
    return ListOf(
        item=Enum(values=tuple(POINTS), message=unknown_point_message,
                  description="a lifecycle point (the-loop hooks points)"),
        single=True, min_items=1, unique=True, indexed=False, then=(_catalog_order,),
        expected="a point or a non-empty list of points", hint=hint,
    )


def _catalog_order(points: list[str], _ctx: object) -> tuple[str, ...]:
    return tuple(p for p in POINTS if p in points)
