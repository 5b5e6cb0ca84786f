"""The events a run of the chain records: `hooks.decided`, `hooks.failed`, `hooks.dropped`,
`hooks.refused`, `hooks.slow`. A log that cannot be written is reported on stderr, never
raised into the chain's caller (R6.2)."""

from __future__ import annotations

import sys
from typing import Any

from the_loop.events import EventLog
from the_loop.hooks.engine.outcome import Outcome

#: The fields of a `hooks.decided` record an executor's detail cannot set: the event log's
#: own (`EventLog.emit`) and the chain's.
OWN_FIELDS = frozenset({"event", "ts", "source", "pid", "point", "hook", "changed",
                        "work_item"})


class Records:
    """Writes the chain's events to one event log."""

    __slots__ = ("log",)

    def __init__(self, log: EventLog) -> None:
        self.log = log

    def emit(self, event: str, **fields: Any) -> None:
        try:
            self.log.emit(event, **fields)
        except OSError as exc:
            self._unrecorded(event, exc)

    def _unrecorded(self, event: str, exc: OSError) -> None:
        print(f"the-loop: could not record {event} in {self.log.path}: {exc}", file=sys.stderr)

    def decided(self, point: str, hook: str, changes: dict[str, Any],
                detail: dict[str, Any], ref: str) -> None:
        """`hooks.decided`: the executor's detail adds fields, never one the record or the
        chain owns (an `event` in it made `emit` raise; a `source` forged the record)."""
        if not OWN_FIELDS.isdisjoint(detail):
            detail = {k: v for k, v in detail.items() if k not in OWN_FIELDS}
        try:  # (not through `emit`: one call less on the path every change takes)
            self.log.emit("hooks.decided", **detail, point=point, hook=hook,
                          changed=sorted(changes), work_item=ref)
        except OSError as exc:
            self._unrecorded("hooks.decided", exc)

    def failed(self, point: str, hook: str, error: str, ref: str, required: bool) -> None:
        self.emit("hooks.failed", point=point, hook=hook, error=error, work_item=ref,
                  required=required)

    def dropped(self, point: str, hook: str, keys: list[str], ref: str) -> None:
        self.emit("hooks.dropped", point=point, hook=hook, dropped=sorted(set(keys)),
                  work_item=ref)

    def refused(self, outcome: Outcome) -> None:
        """`hooks.refused`: the hook whose refusal stuck and the reason that stands, with
        `reason_by` when another hook gave that reason."""
        ctx = outcome.context
        fields: dict[str, Any] = {"point": outcome.point, "hook": outcome.refused_by,
                                  "reason": getattr(ctx, "reason", "")}
        if outcome.reason_by and outcome.reason_by != outcome.refused_by:
            fields["reason_by"] = outcome.reason_by  # another hook gave the reason (item 3)
        self.emit("hooks.refused", **fields, work_item=ctx.work_item.ref)


__all__ = ["OWN_FIELDS", "Records"]
