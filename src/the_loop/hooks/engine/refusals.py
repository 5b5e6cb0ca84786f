"""The chain's refusal rules, each tested by name in tests/hooks/test_chain.py:

- a `required` executor that fails at a point with `proceed` refuses, naming the hook and
  what it raised (R6.3);
- a refusal sticks: once `proceed` is false, a later answer's `proceed` and `reason` are
  taken out (and listed as dropped, unless that executor failed) (R2.6).
"""

from __future__ import annotations

from typing import Any

from the_loop.hooks.engine.answers import Reading, Shape
from the_loop.hooks.engine.points import Context


def refused_already(shape: Shape, state: Context) -> bool:
    """Whether an earlier executor's refusal stands in `state`."""
    return shape.proceed and state.__dict__["proceed"] is False


def for_failure(shape: Shape, state: Context, name: str, required: bool,
                error: str) -> dict[str, Any]:
    """The decisions a failure sets: a refusal naming the hook when it is required at a
    point with `proceed` (and nothing refused it yet), else none."""
    if required and shape.proceed and not refused_already(shape, state):
        return {"proceed": False, "reason": f"required hook {name!r} failed: {error}"}
    return {}


def keep_first(reading: Reading) -> None:
    """A refusal sticks: `proceed` and `reason` leave this reading's changes."""
    for key in ("proceed", "reason"):
        if key in reading.changes:
            del reading.changes[key]
            if not reading.error:
                reading.dropped.append(key)


__all__ = ["for_failure", "keep_first", "refused_already"]
