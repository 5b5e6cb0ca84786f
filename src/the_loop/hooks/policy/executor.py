"""The policy executor: evaluates checked rules at a point and hands back a Decisions patch.

Every `when` and template reads the context as it entered the executor (one JSON view per
invocation), so no rule sees another's changes. Matching enforce rules apply in order: a
refusal sticks (the first refusing rule's reason is kept), other decisions are last-wins,
and `*_prefix`/`*_suffix` compose around the final value in rule order. Audit rules change
nothing; what they would have decided is recorded as `hooks.audit`. An expression that fails
at run time raises `HookError` naming file, rule and expression, so the chain records
`hooks.failed` (and a required policy refuses) — never a silent null.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from the_loop.events import EventLog
from the_loop.hooks.executor import Decisions, HookError
from the_loop.hooks.points import POINTS, Context, context_to_json
from the_loop.hooks.policy.compiler import CompiledExpression
from the_loop.hooks.policy.rules import AFFIXES, Policy, Rule, Template, Value


class _RuntimeFailure(Exception):
    """An expression of one rule failed at run time (converted to HookError or an audit note)."""


@dataclass(frozen=True)
class _Step:
    """One rule as evaluated at one point: the hot path reads only these fields."""

    name: str
    file: str
    audit: bool
    when: CompiledExpression | None
    when_text: str
    constants: tuple[tuple[str, Any], ...]
    templates: tuple[tuple[str, Template], ...]

    def failure(self, exc: Exception) -> str:
        """The message for this rule's `when` failing at run time."""
        return self._where("when", self.when_text, exc)

    def values(self, data: dict[str, Any]) -> dict[str, Any]:
        if not self.templates:
            return dict(self.constants)
        out = dict(self.constants)
        for key, template in self.templates:
            out[key] = self._render(key, template, data)
        return out

    def _render(self, key: str, template: Template, data: dict[str, Any]) -> str:
        chunks: list[str] = []
        for part in template.parts:
            if isinstance(part, str):
                chunks.append(part)
                continue
            try:
                value = part.search(data)
            except Exception as exc:
                raise _RuntimeFailure(
                    self._where(f"set.{key}", "{{ " + part.text + " }}", exc)
                ) from None
            chunks.append(render_value(value))
        return "".join(chunks)

    def _where(self, key: str, expr: str, exc: Exception) -> str:
        return (
            f"policy rule {self.name!r} ({self.file}) → {key}: {expr!r} failed at run time: "
            f"{type(exc).__name__}: {exc}"
        )


def render_value(value: Any) -> str:
    """A template result as text: strings as they are, null as empty, others as JSON."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _steps(rules: list[Rule], point: str) -> tuple[_Step, ...]:
    out: list[_Step] = []
    for rule in rules:
        if point not in rule.points:
            continue
        values: dict[str, Value] = rule.values.get(point, {})
        out.append(_Step(
            name=rule.name, file=rule.file, audit=rule.audit, when=rule.when.get(point),
            when_text=rule.when_text or "",
            constants=tuple((k, v) for k, v in values.items() if not isinstance(v, Template)),
            templates=tuple((k, v) for k, v in values.items() if isinstance(v, Template)),
        ))
    return tuple(out)


class PolicyExecutor:
    """An `Executor` over a checked `Policy`: one handler per point its rules name.

    `log` is where `hooks.audit` goes: whoever builds the chain calls `bind_log(chain.log)`;
    until then audit events stay in an in-memory log of the executor's own.
    """

    def __init__(
        self, name: str, policy: Policy, *, points: tuple[str, ...] | None = None,
        log: EventLog | None = None,
    ) -> None:
        self.name = name
        self.policy = policy
        self.log = log if log is not None else EventLog()
        named = {p for r in policy.rules for p in r.points}
        allowed = set(points) if points is not None else set(POINTS)
        self._points = tuple(p for p in POINTS if p in named and p in allowed)
        self._steps = {p: _steps(policy.rules, p) for p in self._points}
        # The hot loop's view: (the condition's evaluator or None, the step), per point.
        self._plans: dict[str, tuple[tuple[Callable[[Any], Any] | None, _Step], ...]] = {
            p: tuple((s.when.search if s.when is not None else None, s) for s in steps)
            for p, steps in self._steps.items()
        }

    def bind_log(self, log: EventLog) -> None:
        """Record audit events in `log` (the chain's event log)."""
        self.log = log

    def points(self) -> tuple[str, ...]:
        return self._points

    def rules_at(self, point: str) -> list[str]:
        """The names of the rules looked at for `point`, in evaluation order."""
        return [s.name for s in self._steps.get(point, ())]

    def handler(self, point: str) -> Callable[[Context], Decisions | None]:
        steps = self._steps.get(point, ())
        if not steps:
            return _pass
        return lambda ctx: self.evaluate(point, ctx)

    def evaluate(self, point: str, ctx: Context) -> Decisions | None:
        """The decisions of the rules at `point` for `ctx`, or None when no enforce rule applied."""
        data = context_to_json(ctx)
        audit_errors: list[str] = []
        # Pass 1, the hot loop: which rules match. Every `when` reads the same `data`.
        hits: list[_Step] = []
        for search, step in self._plans[point]:
            if search is not None:
                try:
                    r = search(data)
                except Exception as exc:  # any failure inside an expression, never silent
                    if step.audit:  # a rule on trial: record it, never change the outcome
                        audit_errors.append(step.failure(exc))
                        continue
                    raise HookError(step.failure(exc)) from None
                # JMESPath truth: false, null, "", [] and {} are false; all else is true.
                if r is not True and (r is False or r is None or r == "" or r == [] or r == {}):
                    continue
            hits.append(step)
        # Pass 2: what the matching rules decide, in rule order.
        values: dict[str, Any] = {}
        applied: list[str] = []
        affixes: dict[str, tuple[list[str], list[str]]] = {}
        audited: list[str] = []
        would: dict[str, dict[str, Any]] = {}
        refused = False
        for step in hits:
            try:
                decided = step.values(data)
            except _RuntimeFailure as exc:
                if step.audit:
                    audit_errors.append(str(exc))
                    continue
                raise HookError(str(exc)) from None
            if step.audit:
                audited.append(step.name)
                would[step.name] = decided
                continue
            applied.append(step.name)
            for key, value in decided.items():
                affix = AFFIXES.get(key)
                if affix is not None:
                    target, side = affix
                    pre, post = affixes.setdefault(target, ([], []))
                    (pre if side == "prefix" else post).append(value)
                elif not refused or (key != "proceed" and key != "reason"):
                    values[key] = value
            if decided.get("proceed") is False and not refused:
                refused = True
                values["reason"] = decided.get("reason") or (
                    f"refused by policy rule {step.name!r}"
                )
        if audited or audit_errors:
            fields: dict[str, Any] = {
                "point": point, "hook": self.name, "rules": audited, "would": would,
                "work_item": ctx.work_item.ref,
            }
            if audit_errors:
                fields["errors"] = audit_errors
            self.log.emit("hooks.audit", **fields)
        if not applied:
            return None
        for target, (pre, post) in affixes.items():
            base = values.get(target, data.get(target, ""))
            values[target] = "".join(pre) + base + "".join(post)
        return Decisions(values=values, detail={"rules": applied})


def _pass(ctx: Context) -> None:
    return None
