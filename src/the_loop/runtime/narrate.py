"""One line on the terminal per thing a daemon does (start, launch, input, refusal, phase,
close), read off the events it records."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TextIO

from the_loop.errors import one_line

#: The longest a value may be on a terminal line (a ref, a reason, an error).
LINE_LIMIT = 300


def line_of(record: dict[str, Any]) -> str:
    """The terminal line for an event, or '' for one a person watching does not need."""
    def v(key: str) -> str:
        """A field as the line shows it: one printable line, cut (a ref, a reason or a
        hook's error may come from a caller, an agent or a hook)."""
        value = record.get(key, "")
        return one_line(value if isinstance(value, str) else str(value), LINE_LIMIT)

    ref = v("work_item")
    e = str(record.get("event"))
    if e == "loop.armed":
        return f"{ref}: armed by {v('actor')}"
    if e == "loop.started":
        return f"{ref}: started"
    if e == "loop.start_refused":
        return f"{ref}: start REFUSED by hook `{v('hook')}`: {v('reason')}"
    if e == "session.launched":
        again = " (respawn)" if record.get("respawn") else ""
        return f"{ref}: session {v('session_id')} launched{again}"
    if e == "session.refused":
        return f"{ref}: launch REFUSED by hook `{v('hook')}`: {v('reason')}"
    if e == "session.failed":
        return f"{ref}: session could not start: {v('error')}"
    if e == "session.exited":
        return f"session {v('session_id')} ended (exit {v('code')})"
    if e == "input.delivered":
        return f"{ref}: input from {v('actor')} ({v('kind')}): {v('done')}"
    if e == "input.refused":
        return (f"{ref}: input from {v('actor')} REFUSED by hook `{v('hook')}`: "
                f"{v('reason')}")
    if e == "question.posted":
        return f"{ref}: the agent asked a question"
    if e == "gate.entered":
        return f"{ref}: waiting at gate {v('node')}"
    if e == "phase.changed":
        return f"{ref}: {v('from_node')} → {v('to_node')} ({v('outcome')})"
    if e == "phase.published":
        return f"{ref}: the channels were told of phase {v('to_phase')}"
    if e == "item.completed":
        return f"{ref}: completed ({v('source')})"
    if e == "hooks.audit":
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
        return f"{ref or '-'}: audit at {v('point')} (hook `{v('hook')}`): {found}"
    if e in ("step.failed", "poll.failed", "hooks.failed"):
        what = v("step") or v("hook") or "cycle"
        return f"{ref or '-'}: {e} {what}: {v('error')}"
    return ""


def narrator(out: TextIO) -> Callable[[dict[str, Any]], None]:
    def say(record: dict[str, Any]) -> None:
        text = line_of(record)
        if text:
            out.write(f"{time.strftime('%H:%M:%S')} {text}\n")
            out.flush()
    return say
