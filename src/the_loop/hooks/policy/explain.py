"""Why each rule of a policy did or did not apply to one context (`--explain`).

For every rule at the point, in evaluation order: matched (with what it sets, or for an audit
rule what it would have set), not matched (the parts of `when` that were false, re-printed,
with the values of the fields and the policy data they read), or failed (the run-time
error). Evaluation is the reference interpreter on the context's JSON view: the same
answers the executor gives, at a cost only an explaining person pays.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from the_loop.hooks.engine.chain import Chain, Outcome
from the_loop.hooks.engine.points import Context, context_to_json
from the_loop.hooks.policy.data import MARK
from the_loop.hooks.policy.expressions import COMPILER
from the_loop.hooks.policy.exprtext import show
from the_loop.hooks.policy.point_rules import RuntimeFailure, point_rules
from the_loop.hooks.policy.rules import Policy
from the_loop.jmes import root_paths
from the_loop.jmes.semantics import truthy
from the_loop.util import shown_value

MATCHED, NOT_MATCHED, FAILED = "matched", "not matched", "failed"


@dataclass
class FalsePart:
    """A part of a `when` that was false: as written, its value, the fields it read."""

    condition: str
    value: Any
    fields: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"condition": self.condition, "value": self.value, "fields": self.fields}

    def text(self, full: bool = False) -> str:
        shown = shown_value(self.value, full=full)
        reads = "; ".join(f"{k} = {shown_value(v, full=full)}" for k, v in self.fields.items()
                          if k != self.condition)
        return f"{self.condition} is {shown}" + (f" ({reads})" if reads else "")


@dataclass
class RuleTrace:
    """One rule's outcome for one context."""

    rule: str
    file: str
    mode: str
    outcome: str
    sets: dict[str, Any] = field(default_factory=dict)
    because: list[FalsePart] = field(default_factory=list)
    error: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rule": self.rule, "file": self.file, "mode": self.mode,
                               "outcome": self.outcome}
        if self.outcome == MATCHED:
            out["would_set" if self.mode == "audit" else "sets"] = self.sets
        elif self.outcome == NOT_MATCHED:
            out["false"] = [p.to_json() for p in self.because]
        else:
            out["error"] = self.error
        return out

    def text(self, full: bool = False) -> str:
        """One line; long values cut (`shown_value`) unless `full`."""
        name = self.rule + (" (audit)" if self.mode == "audit" else "")
        if self.outcome == MATCHED:
            verb = "would set" if self.mode == "audit" else "sets"
            what = ", ".join(f"{k}={shown_value(v, full=full)}" for k, v in self.sets.items())
            return f"{name}: matched; {verb} {what}"
        if self.outcome == NOT_MATCHED:
            return f"{name}: not matched: " + " and ".join(p.text(full) for p in self.because)
        return f"{name}: failed: {self.error}"


def explain_chain(chain: Chain, outcome: Outcome) -> dict[str, list[RuleTrace]]:
    """Per policy hook of a chain run, its rules explained on the context as it entered that
    hook (the caller's context with the decisions of the hooks before it applied)."""
    from the_loop.hooks.executors.policy import PolicyExecutor

    ctx = outcome.given if outcome.given is not None else outcome.context
    links = {link.name: link for link in chain.links}
    out: dict[str, list[RuleTrace]] = {}
    for step in outcome.steps:
        link = links.get(step.hook)
        if link is not None and isinstance(link.executor, PolicyExecutor):
            executor = link.executor
            out[step.hook] = explain(executor.policy, outcome.point, ctx, executor.points())
        if step.changed:
            ctx = dataclasses.replace(ctx, **step.changed)
    return out


def explain(
    policy: Policy, point: str, ctx: Context, points: tuple[str, ...] | None = None
) -> list[RuleTrace]:
    """Each rule of `policy` at `point` (if `points` lets it run there) on `ctx`."""
    if points is not None and point not in points:
        return []
    data = context_to_json(ctx)
    out: list[RuleTrace] = []
    for step in point_rules(policy.rules, point, fast=False):
        trace = RuleTrace(step.name, Path(step.file).name, "audit" if step.audit else
                          "enforce", MATCHED)
        out.append(trace)
        if step.when is not None:
            try:
                result = step.when.search(data)
            except Exception as exc:  # shown as the rule's failure, as the executor would
                trace.outcome, trace.error = FAILED, step.failure(exc)
                continue
            if not truthy(result):
                trace.outcome = NOT_MATCHED
                trace.because = false_parts(step.when.ast, data)
                continue
        try:
            trace.sets = step.render(data, False)
        except RuntimeFailure as exc:
            trace.outcome, trace.error = FAILED, str(exc)
    return out


def false_parts(node: Mapping[str, Any], data: Any) -> list[FalsePart]:
    """The smallest parts of a false condition that made it false.

    `a && b`: whichever of a, b was false (a first, as evaluated); `a || b`: both.
    """
    node_type = node.get("type")
    if node_type == "and_expression":
        left, right = node["children"]
        return false_parts(left if not truthy(_eval(left, data)) else right, data)
    if node_type == "or_expression":
        left, right = node["children"]
        return false_parts(left, data) + false_parts(right, data)
    fields: dict[str, Any] = {}
    for path in root_paths(node):
        value: Any = data
        for name in path:
            value = value.get(name) if isinstance(value, dict) else None
        fields[".".join(path)] = value
    fields.update(data_reads(node))
    return [FalsePart(show(node), _eval(node, data), fields)]


def data_reads(node: Mapping[str, Any]) -> dict[str, Any]:
    """The policy data a condition reads, by name (`data.maintainers`) with its value: the
    load replaced each read with the literal it reads (`data.PolicyData.rewrite`)."""
    found: dict[str, Any] = {}
    stack: list[Any] = [node]
    while stack:
        part = stack.pop()
        if not isinstance(part, Mapping):
            continue
        if part.get("type") == "literal" and isinstance(part.get(MARK), list):
            found[show(part)] = part.get("value")
        stack.extend(part.get("children", ()))
    return dict(sorted(found.items()))


def _eval(node: Mapping[str, Any], data: Any) -> Any:
    try:
        return COMPILER.library.reference.evaluator(node)(data)
    except Exception:
        # Not named: the reference interpreter's run-time failures are no one class
        # (JMESPathError, a ValueError, for a wrong type or arity; OverflowError for
        # ceil/floor of an infinite number; RecursionError for deep data), and the executor
        # takes any exception as the rule's failure (executors/policy.py,
        # `PointRule._value`; `explain` above too): a part shown here must not end
        # `policy explain` with a traceback where the whole condition evaluated.
        return None
