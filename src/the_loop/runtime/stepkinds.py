"""The kinds of step the loop can owe a work item: one type, with each kind's key, payload, event.

A step kind is a `StepKind`; `Store.add_step` takes nothing else and refuses a payload that
lacks a field its kind's runner reads, so a step that could never run is refused when it is
queued, not found out three retries later. Each kind names the event it records when it has
done its work (`events.EVENT_TYPES`) and says in a few words what it does (the comment that
blocks an item whose step kept failing). What each kind runs is `steps.RUN`; a test checks
that every kind has a runner, an event in the catalog and a narrated line.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from the_loop.errors import LoopError


@dataclass(frozen=True)
class KindSpec:
    """What a kind of step is: the payload fields its runner reads, the event it records
    when done, and what it does (as the verb phrase of 'the loop could not …')."""

    fields: frozenset[str]
    event: str
    doing: str


class StepKind(enum.StrEnum):
    """A kind of step (stored in `steps.kind` as its value)."""

    START = "start"
    ENTER = "enter"
    LAUNCH = "launch"
    QUESTION = "question"
    DONE = "done"
    INPUT = "input"
    PHASE = "phase"
    COMPLETE = "complete"

    @property
    def spec(self) -> KindSpec:
        return SPECS[self]

    def key(self, *parts: object, name: str = "") -> str:
        """The key of a step of this kind: `<name>:<part>:…`, `name` being the kind unless
        given (a respawn is a launch keyed `respawn:…`). The same facts give the same key,
        so queueing a step twice queues it once."""
        return ":".join([name or self.value, *map(str, parts)])

    def check(self, payload: Mapping[str, Any]) -> None:
        """Refuse a payload without a field this kind's runner reads."""
        missing = sorted(self.spec.fields - payload.keys())
        if missing:
            raise LoopError(f"a {self.value} step needs {', '.join(missing)} in its payload "
                            "(a bug in the loop: please report it)")


def _spec(fields: str, event: str, doing: str) -> KindSpec:
    return KindSpec(frozenset(fields.split()), event, doing)


SPECS: dict[StepKind, KindSpec] = {
    StepKind.START: _spec("actor source arm_seq", "loop.started", "start"),
    StepKind.ENTER: _spec("node actor note epoch", "gate.entered", "enter a node of"),
    StepKind.LAUNCH: _spec("node prompt respawn actor endpoint", "session.launched",
                           "launch a session for"),
    StepKind.QUESTION: _spec("question summary session_id node", "question.posted",
                             "post the agent's question on"),
    StepKind.DONE: _spec("node epoch actor summary", "phase.changed",
                         "take in the agent's completion of"),
    StepKind.INPUT: _spec("endpoint comment actor source", "input.delivered",
                          "take in input on"),
    StepKind.PHASE: _spec("from_node to_node from_phase to_phase outcome terminal actor",
                          "phase.published", "tell the channels about the phase of"),
    StepKind.COMPLETE: _spec("source actor", "item.completed", "complete"),
}


class UnknownStepKind(LoopError):
    """A stored step names a kind this version of the loop does not know."""

    def __init__(self, key: str, value: str) -> None:
        super().__init__(f"step {key} has kind {value!r}, which this version of the loop does "
                         f"not know (kinds: {', '.join(StepKind)}); it waits for a loop "
                         "version that does")
        self.key = key


def step_kind(value: str, key: str) -> StepKind:
    """The kind the stored step `key` names; `UnknownStepKind` for one this loop does not
    know (a row written by another version of the loop)."""
    try:
        return StepKind(value)
    except ValueError:
        raise UnknownStepKind(key, value) from None


def salted(payload: dict[str, Any]) -> dict[str, Any]:
    """A launch step's payload with a random salt for its session id (service.session_id_for):
    kept with the step, so a redo gets the same id, and unknown to anyone who knows only the
    item's ref and the step's key."""
    import secrets

    return {**payload, "salt": secrets.token_hex(16)}
