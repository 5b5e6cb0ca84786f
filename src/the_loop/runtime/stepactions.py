"""What a step the loop owes a work item does: one type, with each action's key, payload, event.

A step's action is a `StepAction`; `Store.add_step` takes nothing else and refuses a payload
that lacks a field its action's runner reads, so a step that could never run is refused when
it is queued, not found out three retries later. Each action names the event it records when
it has done its work (`events.EVENT_TYPES`) and says in a few words what it does (the comment
that blocks an item whose step kept failing). What each action runs is `steps.RUN`; a test
checks that every action has a runner, an event in the catalog and a narrated line.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, Final

from the_loop.errors import LoopError


class ActionSpec:
    """What a step's action is: the payload fields its runner reads, the event it records
    when done, and what it does (as the verb phrase of 'the loop could not …'). A plain
    class, as the runtime's other records are (graph.py says why)."""

    __slots__ = ("doing", "event", "fields")

    def __init__(self, fields: frozenset[str], event: str, doing: str) -> None:
        self.fields: Final = fields
        self.event: Final = event
        self.doing: Final = doing


class StepAction(enum.StrEnum):
    """What a step does (stored in the `steps.kind` column as its value)."""

    START = "start"
    ENTER = "enter"
    LAUNCH = "launch"
    QUESTION = "question"
    DONE = "done"
    INPUT = "input"
    PHASE = "phase"
    COMPLETE = "complete"

    @property
    def spec(self) -> ActionSpec:
        return SPECS[self]

    def key(self, *parts: object, name: str = "") -> str:
        """The key of a step of this action: `<name>:<part>:…`, `name` being the action unless
        given (a respawn is a launch keyed `respawn:…`). The same facts give the same key,
        so queueing a step twice queues it once."""
        return ":".join([name or self.value, *map(str, parts)])

    def check(self, payload: Mapping[str, Any]) -> None:
        """Refuse a payload without a field this action's runner reads."""
        missing = sorted(self.spec.fields - payload.keys())
        if missing:
            raise LoopError(f"a {self.value} step needs {', '.join(missing)} in its payload "
                            "(a bug in the loop: please report it)")


def _spec(fields: str, event: str, doing: str) -> ActionSpec:
    return ActionSpec(frozenset(fields.split()), event, doing)


SPECS: dict[StepAction, ActionSpec] = {
    StepAction.START: _spec("actor source arm_seq", "loop.started", "start"),
    StepAction.ENTER: _spec("node actor note epoch", "gate.entered", "enter a node of"),
    StepAction.LAUNCH: _spec("node prompt respawn actor endpoint", "session.launched",
                           "launch a session for"),
    StepAction.QUESTION: _spec("question summary session_id node", "question.posted",
                             "post the agent's question on"),
    StepAction.DONE: _spec("node epoch actor summary", "phase.changed",
                         "take in the agent's completion of"),
    StepAction.INPUT: _spec("endpoint comment actor source", "input.delivered",
                          "take in input on"),
    StepAction.PHASE: _spec("from_node to_node from_phase to_phase outcome terminal actor",
                          "phase.published", "tell the channels about the phase of"),
    StepAction.COMPLETE: _spec("source actor", "item.completed", "complete"),
}


class UnknownStepAction(LoopError):
    """A stored step names an action this version of the loop does not know."""

    def __init__(self, key: str, value: str) -> None:
        super().__init__(f"step {key} has action {value!r}, which this version of the loop does "
                         f"not know (actions: {', '.join(StepAction)}); it waits for a loop "
                         "version that does")
        self.key = key


def step_action(value: str, key: str) -> StepAction:
    """The action the stored step `key` names; `UnknownStepAction` for one this loop does not
    know (a row written by another version of the loop)."""
    try:
        return StepAction(value)
    except ValueError:
        raise UnknownStepAction(key, value) from None


def salted(payload: dict[str, Any]) -> dict[str, Any]:
    """A launch step's payload with a random salt for its session id (service.session_id_for):
    kept with the step, so a redo gets the same id, and unknown to anyone who knows only the
    item's ref and the step's key."""
    import secrets

    return {**payload, "salt": secrets.token_hex(16)}
