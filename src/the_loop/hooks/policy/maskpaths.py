"""Mask paths: which values of a recorded call a decision log must not keep.

A path is `point.field` (`input_received.text`), `*.field` (that field at every point that
has it), or either with a work-item field (`*.work_item.url`). Only text can be masked
(a `str` field, each string of a `list[str]` field, a work-item text field): a masked value
becomes `[masked]`, so a replayed context keeps its types. `check(path)` returns the points
and field the path names, or raises `ValueError` saying why it names nothing.
"""

from __future__ import annotations

from the_loop.hooks.engine.points import POINTS, SPECS, WORK_ITEM_TYPES, closest

MASKED = "[masked]"
_TEXT = ("str", "list[str]")


def _points_named(path: str, head: str) -> tuple[str, ...]:
    """The points `head` names: every point for `*`, else the one point it must be."""
    if head == "*":
        return tuple(POINTS)
    if head not in POINTS:
        hint = closest(head, list(POINTS))
        raise ValueError(f"mask path {path!r}: {head!r} is no point"
                         f"{f'; did you mean {hint!r}?' if hint else ''} (or * for every point)")
    return (head,)


def _check_work_item_field(path: str, parts: tuple[str, ...]) -> None:
    """`parts` (`work_item`, field) must name one text field of the work item."""
    if len(parts) != 2 or WORK_ITEM_TYPES.get(parts[1]) != "str":
        raise ValueError(f"mask path {path!r}: name one text field of the work item "
                         f"({', '.join(f for f, t in WORK_ITEM_TYPES.items() if t == 'str')})")


def _points_having(path: str, head: str, rest: str, points: tuple[str, ...],
                   parts: tuple[str, ...]) -> tuple[str, ...]:
    """Those of `points` with a text field `parts[0]`; none (or a nested field) is an error."""
    having = tuple(p for p in points if any(
        f.name == parts[0] and f.type in _TEXT for f in SPECS[p].fields))
    if len(parts) != 1 or not having:
        fields = sorted({f.name for p in points for f in SPECS[p].fields if f.type in _TEXT})
        hint = closest(parts[0], fields)
        raise ValueError(f"mask path {path!r}: no text field {rest!r} at "
                         f"{head if head != '*' else 'any point'}"
                         f"{f'; did you mean {hint!r}?' if hint else ''}")
    return having


def check(path: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(points, field path) that `path` names; `ValueError` when it names no text value."""
    head, _, rest = str(path).partition(".")
    if not rest:
        raise ValueError(f"mask path {path!r}: expected point.field (e.g. input_received.text) "
                         "or *.field")
    points = _points_named(path, head)
    parts = tuple(rest.split("."))
    if parts[0] == "work_item":
        _check_work_item_field(path, parts)
        return points, parts
    return _points_having(path, head, rest, points, parts), parts
