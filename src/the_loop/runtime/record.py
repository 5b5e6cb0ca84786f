"""How a fired point is recorded: the `lifecycle.point` event a reader of the log sees.

It names the point and the moment (a few facts), what each hook did — including how it
edited a text (what it put in front, what it added after) — and the final decisions.
"""

from __future__ import annotations

from typing import Any

from the_loop.hooks.engine.chain import Outcome
from the_loop.hooks.engine.points import SPECS, Context, WorkItem

_DECISIONS: dict[str, frozenset[str]] = {
    point: frozenset(d.name for d in spec.decisions) for point, spec in SPECS.items()
}

#: Facts a `lifecycle.point` event repeats, so a reader of the log sees which moment it was.
_BRIEF_FACTS = frozenset({
    "actor", "kind", "source", "control", "node", "phase", "respawn", "session_id",
    "from_node", "to_node", "from_phase", "to_phase", "outcome", "terminal", "state",
    "harness",
})


def _edit(before: str, after: str) -> dict[str, str]:
    """How a hook changed a text: what it put in front, what it added after, or a rewrite."""
    if before and after.endswith(before) and len(after) > len(before):
        return {"prefix": _short(after[: len(after) - len(before)])}
    if before and after.startswith(before) and len(after) > len(before):
        return {"suffix": _short(after[len(before):])}
    if before:
        at = after.find(before)
        if at > 0:
            return {"prefix": _short(after[:at]), "suffix": _short(after[at + len(before):])}
    return {"text": _short(after)}


def _short(value: Any, limit: int = 200) -> Any:
    if isinstance(value, str) and len(value) > limit:
        return value[:limit] + f"… ({len(value)} chars)"
    if isinstance(value, WorkItem):
        return value.ref
    return value


def point_record(ctx: Context, outcome: Outcome) -> dict[str, Any]:
    """The fields of the `lifecycle.point` event for one run of the chain."""
    names = _DECISIONS[ctx.POINT]
    current = {k: v for k, v in ctx.__dict__.items() if k in names}
    steps: list[dict[str, Any]] = []
    for s in outcome.steps:
        step: dict[str, Any] = {"hook": s.hook, "status": s.status, "error": s.error,
                                "changed": {k: _short(v) for k, v in s.changed.items()}}
        edits = {k: _edit(current[k], v) for k, v in s.changed.items()
                 if isinstance(v, str) and isinstance(current.get(k), str)}
        if edits:
            step["edits"] = edits
        if s.detail.get("rules"):
            step["rules"] = s.detail["rules"]
        current.update(s.changed)
        steps.append(step)
    return {
        "point": ctx.POINT, "work_item": ctx.work_item.ref,
        "facts": {k: _short(v) for k, v in ctx.__dict__.items()
                  if k in _BRIEF_FACTS and k not in names},
        "hooks": [s.hook for s in outcome.steps], "steps": steps,
        "decisions": {k: _short(v) for k, v in outcome.context.__dict__.items() if k in names},
    }
