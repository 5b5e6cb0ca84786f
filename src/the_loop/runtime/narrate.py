"""One line on the terminal per thing a daemon does (start, launch, input, refusal, phase,
close), read off the events it records."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TextIO


def line_of(r: dict[str, Any]) -> str:
    """The terminal line for an event, or '' for one a person watching does not need."""
    ref = r.get("work_item", "")
    e = r["event"]
    if e == "loop.armed":
        return f"{ref}: armed by {r.get('actor')}"
    if e == "loop.started":
        return f"{ref}: started"
    if e == "loop.start_refused":
        return f"{ref}: start REFUSED by hook `{r.get('hook')}`: {r.get('reason')}"
    if e == "session.launched":
        again = " (respawn)" if r.get("respawn") else ""
        return f"{ref}: session {r.get('session_id')} launched{again}"
    if e == "session.refused":
        return f"{ref}: launch REFUSED by hook `{r.get('hook')}`: {r.get('reason')}"
    if e == "session.failed":
        return f"{ref}: session could not start: {r.get('error')}"
    if e == "session.exited":
        return f"session {r.get('session_id')} ended (exit {r.get('code')})"
    if e == "input.delivered":
        return f"{ref}: input from {r.get('actor')} ({r.get('kind')}): {r.get('done')}"
    if e == "input.refused":
        return (f"{ref}: input from {r.get('actor')} REFUSED by hook `{r.get('hook')}`: "
                f"{r.get('reason')}")
    if e == "question.posted":
        return f"{ref}: the agent asked a question"
    if e == "gate.entered":
        return f"{ref}: waiting at gate {r.get('node')}"
    if e == "phase.changed":
        return f"{ref}: {r.get('from_node')} → {r.get('to_node')} ({r.get('outcome')})"
    if e == "item.completed":
        return f"{ref}: completed ({r.get('source')})"
    if e == "hooks.audit":
        would = r.get("would") or {}
        found = "; ".join(
            f"{rule} would set {', '.join(sorted(would.get(rule) or {})) or 'nothing'}"
            for rule in r.get("rules") or ())
        errors = r.get("errors") or []
        if errors:
            found = "; ".join([*([found] if found else []), *map(str, errors)])
        return f"{ref or '-'}: audit at {r.get('point')} (hook `{r.get('hook')}`): {found}"
    if e in ("step.failed", "poll.failed", "hooks.failed"):
        what = r.get("step") or r.get("hook") or "cycle"
        return f"{ref or '-'}: {e} {what}: {r.get('error')}"
    return ""


def narrator(out: TextIO) -> Callable[[dict[str, Any]], None]:
    def say(record: dict[str, Any]) -> None:
        text = line_of(record)
        if text:
            out.write(f"{time.strftime('%H:%M:%S')} {text}\n")
            out.flush()
    return say
