"""The fast path of one point: its enforce and audit conditions, each compiled into one function.

`fast_plan(point, steps)` compiles the `when` of every enforce step into one function and those
of the audit steps into another (`jmes.batch.compile_matcher`): each reads the context's fields
once, straight from the context object, and returns the matching steps in rule order. A rule
with no `when` is a plain append. `FastPlan.match` returns what the executor needs to decide,
or None when the context does not have the catalog's shape (the JSON path then runs).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from the_loop.hooks.engine.executor import HookError
from the_loop.hooks.policy.expressions import COMPILER
from the_loop.hooks.policy.point_rules import PointRule, root_type_of
from the_loop.jmes.api import COMPILE_ERRORS
from the_loop.jmes.batch import Condition, ConditionFailed
from the_loop.jmes.ir import Unsupported

__all__ = ["FastPlan", "Found", "fast_plan"]

#: What matched: (enforce steps, audit steps, audit failures), each in rule order.
Found = tuple[Sequence[PointRule], Sequence[PointRule], list[str]]


class FastPlan:
    """The compiled matchers of one point (None where the point has no such rules)."""

    def __init__(
        self, enforce: Callable[[Any], Any] | None, audit: Callable[[Any], Any] | None
    ) -> None:
        self.enforce = enforce
        self.audit = audit

    def match(self, ctx: Any) -> Found | None:
        """(enforce hits, audit hits, audit errors), or None.

        An enforce condition that fails raises `HookError` naming the rule.
        """
        enforce: Sequence[PointRule] = ()
        if self.enforce is not None:
            try:
                found = self.enforce(ctx)
            except ConditionFailed as failed:
                raise HookError(failed.tag.failure(failed.error)) from None
            if found is None:
                return None
            enforce = found
        audit: Sequence[PointRule] = ()
        errors: list[str] = []
        if self.audit is not None:
            both = self.audit(ctx)
            if both is None:
                return None
            audit = both[0]
            errors = [step.failure(error) for step, error in both[1]]
        return enforce, audit, errors


def fast_plan(point: str, steps: Sequence[PointRule]) -> FastPlan | None:
    """The fast path for `steps` at `point`, or None if CPython cannot compile it."""
    try:
        enforce = _matcher(point, [s for s in steps if not s.audit], collect_errors=False)
        audit = _matcher(point, [s for s in steps if s.audit], collect_errors=True)
    except (Unsupported, *COMPILE_ERRORS):
        return None
    return FastPlan(enforce, audit)


def _matcher(
    point: str, steps: list[PointRule], *, collect_errors: bool
) -> Callable[[Any], Any] | None:
    if not steps:
        return None
    conditions = [
        Condition(step.when.ast, step, step.when.search) if step.when is not None
        else Condition(None, step)
        for step in steps
    ]
    return COMPILER.compile_matcher(
        conditions, root_type_of(point), collect_errors=collect_errors
    )
