"""The values a fact can take, where both loops produce a closed set: part of the catalog.

`KNOWN_VALUES[point][field]` and `RECORD_VALUES[field]` (a field of every work-item record:
`work_item.kind`, `endpoint.kind`) list every value the loop — this one or the open-source
the-loop calling a hook server of ours — ever gives that string fact. A condition comparing
the fact with any other value can never be true; the policy lint `never-matches` says so.

A fact is listed only when the set is closed in both loops. Left out on purpose:
`input_received.control` (the other loop sends its own control words as `command`: start,
pause, execute …), `source` at `input_received` and `work_item_complete` and `state` (its
values there are `verb`, `webhook`, `poll`, `merged`), and every name, ref and text.
"""

from __future__ import annotations

__all__ = ["KNOWN_VALUES", "RECORD_VALUES", "known_values"]

#: Per point: fact → every value it takes.
KNOWN_VALUES: dict[str, dict[str, tuple[str, ...]]] = {
    "work_item_start": {"source": ("command", "label", "api")},
    "waiting_for_input": {"kind": ("question", "gate")},
    "input_received": {"kind": ("answer", "comment", "review", "command")},
}
#: A work-item record's field → every value it takes (at every point, in every record).
RECORD_VALUES: dict[str, tuple[str, ...]] = {"kind": ("issue", "pull-request")}


def known_values(point: str, path: tuple[str, ...], record: bool) -> tuple[str, ...] | None:
    """Every value the fact at `path` takes at `point` (`record`: `path[0]` is a work-item
    record), or None when the set is open."""
    if record:
        return RECORD_VALUES.get(path[1]) if len(path) == 2 else None
    return KNOWN_VALUES.get(point, {}).get(path[0]) if len(path) == 1 else None
