"""The `policy` executor: evaluates checked rules at a point and hands back a Decisions patch.

`load_policy(name, folder)` reads, compiles and checks a policy folder (`hooks.policy`) and
returns the `PolicyExecutor` the chain runs like any other executor.

Every `when` and template reads the context as it entered the executor, so no rule sees
another's changes. Matching enforce rules apply in order: a refusal sticks (the first refusing
rule's reason is kept), other decisions are last-wins, and `*_prefix`/`*_suffix` compose around
the final value in rule order. Audit rules change nothing; what they would have decided is
recorded as `hooks.audit`, and their names are the patch's `audit` detail (an empty patch when
only audit rules matched), so a traced run knows them. An expression that fails at run time
raises `HookError` naming file, rule and expression, so the chain records `hooks.failed` (and a
required policy refuses) — never a silent null. So does an enforce rule that reads a fact the
context lists in `unknown_facts` (the caller did not send it): it is never decided on the
default that fact reads as.

Rules are grouped by point at load; a point only looks at its own. Per point, the `when`
conditions of the enforce rules are compiled into one function, and those of the audit rules
into another (`fast.py`): each reads the context's fields once, straight from the context
object, and returns the matching rules; a rule without `when` is matched at no cost, and a rule
whose values need no context has them decided at load (`point_rules.py`). Each rule evaluated on a
JSON view of the context (`_match_json`) is what runs with `reference=True`, and whenever the
fast path declines (a context of another class, a field off its catalog type); both give the
same decisions.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from the_loop.events import EventLog
from the_loop.hooks.engine.executor import Decisions, HookError
from the_loop.hooks.engine.points import POINTS, Context, context_to_json
from the_loop.hooks.policy import idle_rules
from the_loop.hooks.policy.fast import FastPlan, Found, fast_plan
from the_loop.hooks.policy.gcpause import collector_paused
from the_loop.hooks.policy.point_rules import (
    Effects,
    PointRule,
    RuntimeFailure,
    effects_of,
    point_rules,
)
from the_loop.hooks.policy.reads import unknown_reads, unsent_message
from the_loop.hooks.policy.rules import Policy, PolicyError, read_policy

#: How many characters a policy may add to a decision string beyond what it held (a prefix
#: on a long prompt is fine; a template quoting a large fact twice cannot post megabytes).
MAX_DECISION_CHARS = 256 * 1024


class PolicyExecutor:
    """An `Executor` over a checked `Policy`: one handler per point its rules name.

    `log` is where `hooks.audit` goes: whoever builds the chain calls `bind_log(chain.log)`;
    until then audit events stay in an in-memory log of the executor's own.
    """

    #: A hook server may decide on its event loop: compiled rules never block on I/O.
    served_inline = True
    #: Its handlers only read the context they are given (they answer `Decisions`), so the
    #: chain hands them the current context without a copy.
    reads_only = True
    #: The folder's revision when a hook server loaded it (`hooks.policy.files.revision`).
    revision = ""

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
        self._undecidable: dict[tuple[str, tuple[str, ...]], str] = {}
        fast = not policy.reference  # a policy read with reference=True runs on the JSON view
        self._steps = {p: point_rules(policy.rules, p, fast=fast) for p in self._points}
        self._fast: dict[str, FastPlan | None] = {
            p: fast_plan(p, steps) if fast else None for p, steps in self._steps.items()
        }

    def bind_log(self, log: EventLog) -> None:
        """Record audit events in `log` (the chain's event log)."""
        self.log = log

    def points(self) -> tuple[str, ...]:
        return self._points

    def rules_at(self, point: str) -> list[str]:
        """The names of the rules looked at for `point`, in evaluation order."""
        return [s.name for s in self._steps.get(point, ())]

    def plan(self, point: str) -> FastPlan | None:
        """The compiled matchers of `point` (None: each rule runs on a JSON view)."""
        return self._fast.get(point)

    def handler(self, point: str) -> Callable[[Context], Decisions | None]:
        """The one evaluator of `point`: the compiled matchers when the context has the
        catalog's class and shape, else each rule on a JSON view of the context (the reference
        path, and the only one of a policy read with `reference=True`)."""
        steps = self._steps.get(point, ())
        if not steps:
            return _pass
        plan = self._fast.get(point)
        cls = POINTS[point]

        def handle(ctx: Context) -> Decisions | None:
            if ctx.unknown_facts:
                self._decidable(point, steps, ctx.unknown_facts)
            if plan is not None and ctx.__class__ is cls:
                found = plan.match(ctx)
                if found is not None:
                    return self._decide(point, ctx, found, ctx, True)
            data = context_to_json(ctx)
            return self._decide(point, ctx, _match_json(steps, data), data, False)

        return handle

    def undecided(self, point: str, unknown: list[str]) -> list[tuple[str, list[str]]]:
        """(rule, the facts of `unknown` it reads) for each enforce rule at `point` that a
        context lacking `unknown` does not decide."""
        out: list[tuple[str, list[str]]] = []
        for step in self._steps.get(point, ()):
            lacking = [] if step.audit else unknown_reads(step.reads, unknown)
            if lacking:
                out.append((step.name, lacking))
        return out

    def _decidable(self, point: str, steps: tuple[PointRule, ...], unknown: list[str]) -> None:
        """Raise `HookError` when an enforce rule at `point` reads a fact in `unknown`: the
        caller did not send it, and a rule is never decided on the default it reads as."""
        key = (point, tuple(unknown))
        said = self._undecidable.get(key)
        if said is None:
            said = ""
            for step in steps:
                lacking = unknown_reads(step.reads, unknown) if not step.audit else []
                if lacking:
                    said = unsent_message(step.name, os.path.basename(step.file), point,
                                          lacking)
                    break
            if len(self._undecidable) < 256:  # callers send few shapes; bounded all the same
                self._undecidable[key] = said
        if said:
            raise HookError(said)

    def _decide(
        self, point: str, ctx: Context, found: Found, root: Any, fast: bool
    ) -> Decisions | None:
        """What the matching rules decide, in rule order; audit rules are recorded.

        `found` is (enforce hits, audit hits, audit errors); templates render from `root`, the
        context itself when `fast`, else its JSON view.
        """
        enforce, audit, audit_errors = found
        values, applied = _enforced(enforce, ctx, root, fast)
        audited = self._audit(point, ctx, audit, audit_errors, root, fast) if (
            audit or audit_errors) else None
        if not applied:
            # Audit-only: an empty patch that names the matching audit rules in its detail.
            return None if not audited else Decisions(values={}, detail={"audit": audited})
        self._check_growth(ctx, values, applied)
        detail: dict[str, Any] = {"rules": applied}
        if audited:
            detail["audit"] = audited
        return Decisions(values=values, dropped=[], detail=detail)

    def _check_growth(self, ctx: Context, values: dict[str, Any], applied: list[str]) -> None:
        """What a point's policy may add to a text decision is bounded."""
        for key, value in values.items():
            if type(value) is not str:
                continue
            held = getattr(ctx, key, "")
            grown = len(value) - (len(held) if isinstance(held, str) else 0)
            if grown > MAX_DECISION_CHARS:
                raise HookError(
                    f"policy {self.name!r} would set {key} to {len(value)} characters, "
                    f"{grown} more than it held (rules {', '.join(applied)}); at most "
                    f"{MAX_DECISION_CHARS} more: quote less of the context in the rule's "
                    "template"
                )

    def _audit(
        self, point: str, ctx: Context, audit: Iterable[PointRule], errors: list[str], root: Any,
        fast: bool,
    ) -> list[str]:
        """Record what the matching audit rules would have decided (and their failures);
        returns the names of the audit rules that matched (the step's `audit` detail)."""
        audited: list[str] = []
        would: dict[str, dict[str, Any]] = {}
        for step in audit:
            try:
                would[step.name] = (
                    dict(step.static) if step.static is not None else step.render(root, fast)
                )
            except RuntimeFailure as exc:
                errors.append(str(exc))
                continue
            audited.append(step.name)
        fields: dict[str, Any] = {
            "point": point, "hook": self.name, "rules": audited, "would": would,
            "work_item": ctx.work_item.ref,
        }
        if errors:
            fields["errors"] = errors
        self.log.emit("hooks.audit", **fields)
        return audited


def _match_json(steps: tuple[PointRule, ...], data: dict[str, Any]) -> Found:
    """Each rule's `when` on the JSON view `data`, in rule order: (enforce hits, audit hits,
    audit errors)."""
    enforce: list[PointRule] = []
    audit: list[PointRule] = []
    errors: list[str] = []
    for step in steps:
        if step.when is not None:
            try:
                r = step.when.search(data)
            except Exception as exc:  # any failure inside an expression, never silent
                if step.audit:  # a rule on trial: record it, never change the outcome
                    errors.append(step.failure(exc))
                    continue
                raise HookError(step.failure(exc)) from None
            # JMESPath truth: false, null, "", [] and {} are false; all else is true.
            if r is not True and (r is False or r is None or r == "" or r == [] or r == {}):
                continue
        (audit if step.audit else enforce).append(step)
    return enforce, audit, errors


def _pass(ctx: Context) -> None:
    return None


@collector_paused()
def load_policy(
    name: str,
    folder: Path,
    *,
    points: tuple[str, ...] | None = None,
    reference: bool = False,
) -> PolicyExecutor:
    """Read, compile and check `folder`; raises `PolicyError` (a `LoopError`) on any error.

    `points` narrows the points handled to those listed (an entry's `on`); `reference` runs
    expressions with jmespath's reference interpreter instead of the compiler.
    """
    policy = read_policy(Path(folder), reference=reference, lazy=True)
    if points is not None:
        idle = idle_rules(policy, points)
        if idle:
            raise PolicyError(idle, folder=str(folder))
    return PolicyExecutor(name, policy, points=points)


def _effects_of(step: PointRule, root: Any, fast: bool) -> Effects:
    """A matching rule's effects: fixed at load, or rendered from its templates now."""
    if step.effects is not None:
        return step.effects
    try:
        return effects_of(step.render(root, fast))
    except RuntimeFailure as exc:
        raise HookError(str(exc)) from None


def _enforced(
    enforce: Iterable[PointRule], ctx: Context, root: Any, fast: bool
) -> tuple[dict[str, Any], list[str]]:
    """The decisions the matching enforce rules set, and their names, in rule order: a later
    rule's value wins, the first refusal sticks (with its reason), and prefixes and suffixes
    compose around the decision's value in rule order."""
    values: dict[str, Any] = {}
    applied: list[str] = []
    affixes: dict[str, tuple[list[Any], list[Any]]] = {}
    refused = False
    for step in enforce:
        fx = _effects_of(step, root, fast)
        applied.append(step.name)
        values.update(fx.sets)
        if not refused:
            values.update(fx.unless_refused)
            if fx.refuses:
                refused = True
                values["reason"] = fx.reason or f"refused by policy rule {step.name!r}"
        for target, side, value in fx.affixes:
            affixes.setdefault(target, ([], []))[side].append(value)
    for target, (pre, post) in affixes.items():
        base = values.get(target, getattr(ctx, target, ""))
        values[target] = "".join(pre) + base + "".join(post)
    return values, applied
