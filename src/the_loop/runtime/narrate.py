"""One line on the terminal per thing a daemon does (start, launch, input, refusal, phase,
close), read off the events it records."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TextIO

from the_loop.errors import one_line

#: The longest a value may be on a terminal line (a ref, a reason, an error).
LINE_LIMIT = 300


#: The terminal line of each event a person watching a daemon needs, as a format string over
#: the event's fields (each one printable line, cut: see `_Fields`); `{ref}` is its work item.
#: An event not here, and not one of `_SPECIAL`, prints nothing.
LINES: dict[str, str] = {
    "loop.armed": "{ref}: armed by {armed_by}",
    "loop.started": "{ref}: started",
    "loop.start_refused": "{ref}: start REFUSED by hook `{hook}`: {reason}",
    "session.launched": "{ref}: session {session_id} launched{respawn}",
    "session.refused": "{ref}: launch REFUSED by hook `{hook}`: {reason}",
    "session.failed": "{ref}: session could not start: {error}",
    "session.exited": "session {session_id} ended (exit {code})",
    "input.delivered": "{ref}: input from {actor} ({kind}): {done}",
    "input.refused": "{ref}: input from {actor} REFUSED by hook `{hook}`: {reason}",
    "question.posted": "{ref}: the agent asked a question",
    "gate.entered": "{ref}: waiting at gate {node}",
    "phase.changed": "{ref}: {from_node} → {to_node} ({outcome})",
    "phase.published": "{ref}: the channels were told of phase {to_phase}",
    "item.completed": "{ref}: completed ({source})",
    "step.failed": "{ref_or_dash}: step.failed {what}: {error}",
    "poll.failed": "{ref_or_dash}: poll.failed {what}: {error}",
    "hooks.failed": "{ref_or_dash}: hooks.failed {what}: {error}",
    "hooks.audit": "{ref_or_dash}: audit at {point} (hook `{hook}`): {found}",
}


class _Fields(dict[str, str]):
    """An event's fields as a line shows them: one printable line each, cut (a ref, a reason
    or a hook's error may come from a caller, an agent or a hook); a missing field is ''."""

    def __init__(self, record: dict[str, Any]) -> None:
        super().__init__()
        self.record = record

    def __missing__(self, key: str) -> str:
        value = self.record.get(key, "")
        return one_line(value if isinstance(value, str) else str(value), LINE_LIMIT)


def _audit_found(record: dict[str, Any]) -> str:
    """What an audit rule would have set, per rule, then the errors it met."""
    would = record.get("would")
    would = would if isinstance(would, dict) else {}
    rules = record.get("rules")
    found = "; ".join(
        f"{one_line(str(rule), LINE_LIMIT)} would set "
        f"{', '.join(sorted(map(str, would.get(rule) or {}))) or 'nothing'}"
        for rule in (rules if isinstance(rules, list) else ()))
    errors = record.get("errors")
    if isinstance(errors, list) and errors:
        found = "; ".join([*([found] if found else []),
                           *(one_line(str(x), LINE_LIMIT) for x in errors)])
    return found


def line_of(record: dict[str, Any]) -> str:
    """The terminal line for an event, or '' for one a person watching does not need."""
    template = LINES.get(str(record.get("event")))
    if template is None:
        return ""
    fields = _Fields(record)
    fields["ref"] = fields["work_item"]
    fields["ref_or_dash"] = fields["ref"] or "-"
    fields["respawn"] = " (respawn)" if record.get("respawn") else ""
    fields["what"] = fields["step"] or fields["hook"] or "cycle"
    # a label arming has no login (the tracker records none): say how it was armed instead
    fields["armed_by"] = fields["actor"] or f"its {fields['source'] or 'label'}"
    if "{found}" in template:
        fields["found"] = _audit_found(record)
    return template.format_map(fields)


def narrator(out: TextIO) -> Callable[[dict[str, Any]], None]:
    def say(record: dict[str, Any]) -> None:
        text = line_of(record)
        if text:
            out.write(f"{time.strftime('%H:%M:%S')} {text}\n")
            out.flush()
    return say
