"""What a run of the chain produced: each executor's step and the final context."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from the_loop.hooks.engine.points import Context


@dataclass
class Step:
    """What one executor did at one point (one line of a trace)."""

    hook: str
    status: str  # unchanged | changed | failed
    changed: dict[str, Any] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)
    error: str = ""
    ms: float = 0.0
    detail: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            **self.detail,  # extra fields (e.g. a policy's rules); never hides the fields below
            "hook": self.hook, "status": self.status, "changed": self.changed,
            "dropped": self.dropped, "error": self.error, "ms": round(self.ms, 3),
        }


@dataclass
class Outcome:
    """The result of running a point: the final context and who changed what."""

    point: str
    context: Context
    given: Context | None = None  # the caller's context, never modified
    steps: list[Step] = field(default_factory=list)
    changed_by: dict[str, str] = field(default_factory=dict)  # decision → last hook to set it
    refused_by: str = ""  # the hook whose proceed: false stuck

    @property
    def refused(self) -> bool:
        return bool(getattr(self.context, "proceed", True) is False)

    @property
    def reason_by(self) -> str:
        """The hook whose `reason` stands ('' when none set one): not always the refuser,
        as hook A may give a reason and hook B refuse (both are named, issue 30 item 3)."""
        return self.changed_by.get("reason", "")


__all__ = ["Outcome", "Step"]
