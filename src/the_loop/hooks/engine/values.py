"""The values a fact can take from any caller, where that set is closed: what the policy lint
`never-matches` reads (a comparison with any other value can never be true).

For a point's own fact: the catalog's closed set (`FieldSpec.values`, what this loop sends)
with the values the open-source the-loop sends where its set differs (`callers.
OTHER_LOOP_VALUES`: `input_received.source` is `verb` there), so a rule written for either
caller is never called impossible. For a work-item record's field (`work_item.kind`,
`endpoint.kind`): `RECORD_VALUES`, the same in both loops. A fact with no closed set in the
catalog (a name, a ref, a text) has none here.
"""

from __future__ import annotations

from the_loop.hooks.engine.callers import OTHER_LOOP_VALUES
from the_loop.hooks.engine.points import SPECS

__all__ = ["RECORD_VALUES", "known_values"]

#: A work-item record's field → every value it takes (at every point, in every record).
RECORD_VALUES: dict[str, tuple[str, ...]] = {"kind": ("issue", "pull-request")}


def known_values(point: str, path: tuple[str, ...], record: bool) -> tuple[str, ...] | None:
    """Every value the fact at `path` takes at `point` from any caller (`record`: `path[0]`
    is a work-item record), or None when the set is open."""
    if record:
        return RECORD_VALUES.get(path[1]) if len(path) == 2 else None
    spec = SPECS[point].field(path[0])
    if len(path) != 1 or spec is None or not spec.values:
        return None
    return tuple(dict.fromkeys((*spec.values, *OTHER_LOOP_VALUES.get((point, path[0]), ()))))
