"""Replay: run a declaration over recorded points and report every decision it would change.

`replay_chain(config)` builds the declared chain with its events kept in memory (nothing goes
to the loop's event log) and, unless `call_all`, each hook whose kind replay must not call
(the registry's `RECORDED`: `url:` and `command:` hooks, which may have side effects)
replaced by a `RecordedAnswer`: the answer that hook gave when the point fired stands in for
it (a text it edited is edited the same way — the same
prefix and suffix around today's incoming text —, a failure fails again).
`Replayer.run(recorded)` rebuilds each context exactly as it entered the chain, runs the chain,
and compares the final decisions with the recorded ones; each difference names, on each side,
the hook and the policy rules responsible. `Report` sums them up by rule ("freeze-all would
have refused 41 launches on 12 items").
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from the_loop.config import Config
from the_loop.decisions.build import applied
from the_loop.decisions.layout import Recorded
from the_loop.decisions.masking import mask_value
from the_loop.errors import LoopError
from the_loop.events import EventLog
from the_loop.hooks.declaring.declaration import parse_hooks
from the_loop.hooks.declaring.loading import build_chain
from the_loop.hooks.engine.chain import Chain, Link, Outcome
from the_loop.hooks.engine.dialect import unsent
from the_loop.hooks.engine.executor import Decisions, HookError
from the_loop.hooks.engine.points import SPECS, Context
from the_loop.hooks.executors import registry
from the_loop.hooks.executors.kind import CALL, RECORDED, REPLAY_DOES
from the_loop.hooks.executors.policy import PolicyExecutor, load_policy
from the_loop.hooks.policy.rules import AFFIXES
from the_loop.runtime.rebuild import rebuild

__all__ = ["RecordedAnswer", "Replayer", "Report", "policy_chain", "rebuild", "replay_chain"]

_DECISIONS = {point: tuple(d.name for d in spec.decisions) for point, spec in SPECS.items()}

#: What one firing of a point is called in a summary line.
NOUNS = {
    "work_item_start": ("start", "starts"), "session_spawn": ("launch", "launches"),
    "session_spawned": ("session announcement", "session announcements"),
    "waiting_for_input": ("wait for input", "waits for input"),
    "input_received": ("input", "inputs"), "phase_changed": ("phase change", "phase changes"),
    "work_item_complete": ("completion", "completions"),
}


def reapply(before: str, after: str, now: str) -> str:
    """A recorded text edit (`before` → `after`) applied to today's incoming text `now`."""
    if before == now or not before:
        return after
    at = after.find(before)
    if at < 0:
        return after  # a rewrite: the recorded text stands
    return after[:at] + now + after[at + len(before):]


class RecordedAnswer:
    """Stands in for a hook of a `RECORDED` kind during replay: it answers what it answered
    then."""

    def __init__(self, name: str, points: Iterable[str]) -> None:
        self.name = name
        self._points = tuple(points)
        self.step: dict[str, Any] | None = None  # this hook's recorded step at the point
        self.incoming: dict[str, Any] = {}  # the decisions as they reached it then
        self.unrecorded = 0  # points where it runs now but has no recorded answer

    def points(self) -> tuple[str, ...]:
        return self._points

    def handler(self, point: str) -> Callable[[Context], Decisions | None]:
        return self.answer

    def answer(self, ctx: Context) -> Decisions | None:
        step = self.step
        if step is None:
            self.unrecorded += 1
            return None
        if step.get("status") == "failed":
            raise HookError(str(step.get("error") or "failed"))
        changed: dict[str, Any] = step.get("changed") or {}
        if not changed:
            return None
        values: dict[str, Any] = {}
        for key, value in changed.items():
            before, now = self.incoming.get(key), getattr(ctx, key, None)
            if isinstance(value, str) and isinstance(before, str) and isinstance(now, str):
                value = reapply(before, value, now)
            values[key] = value
        return Decisions(values=values)


def replay_chain(config: Config, *, call_all: bool = False,
                 log: EventLog | None = None) -> tuple[Chain, dict[str, RecordedAnswer]]:
    """The declared chain for replay (events in memory) and its stand-ins by name.

    Each hook's kind says whether replay may call it (`CALL`) or must answer it from the
    record (`RECORDED`; called anyway with `call_all`). Raises `HooksConfigError` on a bad
    declaration, like any load, and `LoopError` for a hook whose kind, or whose kind's replay
    mode, replay does not know: it never calls what it cannot tell is safe to call.
    """
    log = log if log is not None else EventLog()
    chain = build_chain(parse_hooks(config.hooks, config.folder), log=log)
    stand_ins: dict[str, RecordedAnswer] = {}
    links: list[Link] = []
    for link in chain.links:
        if replay_mode(link) == RECORDED and not call_all:
            stand_ins[link.name] = RecordedAnswer(link.name, link.points)
            link = Link(link.name, stand_ins[link.name], link.points, link.required)
        links.append(link)
    if not stand_ins:
        return chain, {}
    return Chain(links, log=log), stand_ins


def policy_chain(folder: Path, *, name: str = "policy") -> Chain:
    """One policy folder as a chain, named as `hooks serve --policy` names it in its log
    (so a replay over a served log compares rule for rule); `PolicyError` if it does not
    load."""
    executor = load_policy(name, folder)
    log = EventLog()
    executor.bind_log(log)
    return Chain([Link(name, executor, frozenset(executor.points()))], log=log)


def replay_mode(link: Link) -> str:
    """`CALL` or `RECORDED`, as the registry says for the link's kind; `LoopError` otherwise."""
    kind = registry.registered_kind(link.executor)
    if kind is None:
        raise LoopError(
            f"policy replay: hook {link.name!r} is a {type(link.executor).__name__}, which is "
            "no registered executor kind, so replay cannot tell whether calling it is safe; "
            "register its kind (the_loop.hooks.executors.registry) saying its replay mode")
    if kind.replay not in (CALL, RECORDED):
        raise LoopError(
            f"policy replay: hook {link.name!r} is of kind {kind.name!r}, whose replay mode "
            f"{kind.replay!r} replay does not know (it knows "
            + ", and ".join(f"{mode!r}: {does}" for mode, does in REPLAY_DOES.items())
            + "); nothing was replayed")
    return kind.replay


def rule_targets(executor: object) -> dict[str, frozenset[str]]:
    """rule name → the decisions its `set` touches (a refusal touches `reason` too)."""
    if not isinstance(executor, PolicyExecutor):
        return {}
    out: dict[str, frozenset[str]] = {}
    for rule in executor.policy.rules:
        keys = {AFFIXES.get(k, (k,))[0] for k in rule.set_raw}
        if "proceed" in keys:
            keys.add("reason")
        out[rule.name] = frozenset(keys)
    return out


@dataclass
class Report:
    """What a replay found: counts, each difference, and the differences by rule."""

    replayed: int = 0
    changed: int = 0
    differences: list[dict[str, Any]] = field(default_factory=list)
    by_rule: dict[str, dict[str, Any]] = field(default_factory=dict)
    unreadable: list[str] = field(default_factory=list)
    #: the hooks of a kind replay answers from the record (`RECORDED`): `hooks` (their names,
    #: in chain order), `called` (true under `call_all`: they ran), `unrecorded` (name →
    #: points where one had no recorded answer and passed through)
    stand_ins: dict[str, Any] = field(default_factory=dict)
    #: value the log masked → how many replayed points lacked it (a served log's masking)
    masked: dict[str, int] = field(default_factory=dict)
    #: rule → {hook, facts, points}: rules that read facts a recorded point lacks (one
    #: recorded before the fact existed, or from a caller that did not send it)
    lacking: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"replayed": self.replayed, "changed": self.changed,
                "differences": self.differences, "by_rule": self.by_rule,
                "stand_ins": self.stand_ins, "unreadable": self.unreadable,
                "masked": self.masked, "lacking": self.lacking}

    def add_to_rule(self, who: dict[str, Any] | None, point: str, decision: str, value: Any,
                    ref: str, side: str, point_id: int) -> None:
        """Count one changed decision against the rule (or rule-less hook) behind it."""
        if who is None:
            return
        names = who["rules"] or [f"(hook {who['hook']})"]
        value = value if isinstance(value, bool) else None  # texts differ point by point
        for name in names:
            # work_items are dicts (ordered, O(1) to test) until `summaries` makes them lists
            entry = self.by_rule.setdefault(name, {"hook": who["hook"], "points": 0,
                                                   "work_items": {}, "effects": []})
            if entry.get("_last") != point_id:  # points: differences, not decisions
                entry["_last"] = point_id
                entry["points"] += 1
            entry["work_items"][ref] = None
            for effect in entry["effects"]:
                if (effect["side"], effect["point"], effect["decision"], effect["value"]) == (
                        side, point, decision, value):
                    break
            else:
                effect = {"side": side, "point": point, "decision": decision, "value": value,
                          "points": 0, "work_items": {}}
                entry["effects"].append(effect)
            effect["points"] += 1
            effect["work_items"][ref] = None

    def summaries(self) -> list[str]:
        """One line per rule and effect: 'freeze-all would have refused 41 launches on 12
        items'. Also stored as each effect's `summary`."""
        lines: list[str] = []
        for name, entry in self.by_rule.items():
            entry.pop("_last", None)
            entry["work_items"] = list(entry["work_items"])
            for effect in entry["effects"]:
                effect["work_items"] = list(effect["work_items"])
            refusals = {(e["side"], e["point"]) for e in entry["effects"]
                        if e["decision"] == "proceed" and e["value"] is False}
            for effect in entry["effects"]:
                if effect["decision"] == "reason" and (effect["side"], effect["point"]) in refusals:
                    continue  # the reason that goes with a refusal is not a line of its own
                who = (f"hook {entry['hook']}" if name.startswith("(hook ")
                       else f"{name} ({entry['hook']})")
                effect["summary"] = line = f"{who} {_phrase(effect)}"
                lines.append(line)
        return lines


def _phrase(effect: dict[str, Any]) -> str:
    n, items = effect["points"], len(effect["work_items"])
    one, many = NOUNS.get(effect["point"], ("point", "points"))
    what = f"{n} {one if n == 1 else many} on {items} item{'' if items == 1 else 's'}"
    decision, value = effect["decision"], effect["value"]
    to = "" if value is None else f" to {json.dumps(value)}"
    if effect["side"] == "after":
        if decision == "proceed" and value is False:
            return f"would have refused {what}"
        return f"would have set {decision}{to} on {what}"
    if decision == "proceed" and value is False:
        return f"would no longer refuse {what}"
    return f"would no longer set {decision}{to} on {what}"


def _as_logged(rec: Recorded, after: dict[str, Any]) -> dict[str, Any]:
    """The replayed decisions masked where the log masked the recorded ones (`--mask
    session_spawn.prompt`): a masked decision cannot be compared, and `[masked]` against
    the prompt a replay built around `[masked]` is no change (the report counts the path as
    masked, not seen by the replay)."""
    paths = {m.partition(".")[2] for m in rec.masked if m.startswith(f"{rec.point}.")}
    if not paths:
        return after
    return {name: mask_value(value) if name in paths else value
            for name, value in after.items()}


class Replayer:
    """Runs one chain over recorded points and collects a `Report`."""

    def __init__(self, chain: Chain, stand_ins: dict[str, RecordedAnswer]) -> None:
        self.chain = chain
        self.stand_ins = stand_ins
        self.targets = {link.name: rule_targets(link.executor) for link in chain.links}
        recorded = [link.name for link in chain.links
                    if link.name in stand_ins
                    or getattr(registry.registered_kind(link.executor), "replay", None) == RECORDED]
        self.report = Report(stand_ins={"hooks": recorded,
                                        "called": bool(recorded) and not stand_ins})
        self.on_outcome: Callable[[Recorded, Context, Outcome], None] | None = None

    def run(self, points: Iterable[Recorded]) -> Report:
        for rec in points:
            self.one(rec)
        self.report.summaries()
        self.report.stand_ins["unrecorded"] = {
            name: s.unrecorded for name, s in self.stand_ins.items() if s.unrecorded}
        return self.report

    def one(self, rec: Recorded) -> Outcome | None:
        """Replay one recorded point; None when its context cannot be rebuilt."""
        try:
            ctx = rebuild(rec.point, rec.context)
        except (ValueError, KeyError) as exc:
            self.report.unreadable.append(
                f"decision log row {rec.id} ({rec.point}, {rec.work_item}): its context cannot "
                f"be rebuilt: {exc}")
            return None
        if isinstance(rec.context, dict) and "unknown_facts" not in rec.context:
            ctx.unknown_facts = unsent(rec.point, rec.context)  # what an old record lacks
        self._lacking(rec, ctx)
        if self.stand_ins:
            self._stand_in(rec)
        outcome = self.chain.invoke(ctx)
        self.report.replayed += 1
        for what in rec.masked:
            self.report.masked[what] = self.report.masked.get(what, 0) + 1
        after = _as_logged(rec, applied(rec.point, rec.context, outcome.context.__dict__))
        before = rec.decisions
        names = _DECISIONS[rec.point]
        for name in names:
            if after[name] != before.get(name):
                self._differ(rec, outcome, names)
                break
        if self.on_outcome is not None:
            self.on_outcome(rec, ctx, outcome)
        return outcome

    def _lacking(self, rec: Recorded, ctx: Context) -> None:
        """Count the policy rules that read a fact this recorded point lacks (issue 36)."""
        if not ctx.unknown_facts:
            return
        for link in self.chain.links:
            if not isinstance(link.executor, PolicyExecutor):
                continue
            for rule, facts in link.executor.undecided(rec.point, ctx.unknown_facts):
                entry = self.report.lacking.setdefault(
                    rule, {"hook": link.name, "facts": [], "points": 0})
                entry["facts"] = sorted({*entry["facts"], *facts})
                entry["points"] += 1

    def _stand_in(self, rec: Recorded) -> None:
        """Give each stand-in its recorded step and the decisions as they reached it."""
        for stand_in in self.stand_ins.values():
            stand_in.step = None
        current = {name: rec.context.get(name) for name in _DECISIONS[rec.point]}
        for step in rec.steps:
            s = self.stand_ins.get(step.get("hook", ""))
            if s is not None:
                s.step, s.incoming = step, dict(current)
            current.update(step.get("changed") or {})

    def _differ(self, rec: Recorded, outcome: Outcome, names: tuple[str, ...]) -> None:
        after = _as_logged(rec, applied(rec.point, rec.context, outcome.context.__dict__))
        changes: list[dict[str, Any]] = []
        for name in names:
            was, now = rec.decisions.get(name), after[name]
            if was == now:
                continue
            by_before = self._before_side(rec, name)
            by_after = self._after_side(outcome, name)
            changes.append({"decision": name, "before": was, "after": now,
                            "before_by": by_before, "after_by": by_after})
            self.report.add_to_rule(by_after, rec.point, name, now, rec.work_item, "after",
                                    rec.id)
            if by_before is not None and (by_after is None or by_before["rules"] !=
                                          by_after["rules"] or by_before["hook"] !=
                                          by_after["hook"]):
                self.report.add_to_rule(by_before, rec.point, name, was, rec.work_item,
                                        "before", rec.id)
        self.report.changed += 1
        self.report.differences.append({
            "id": rec.id, "point": rec.point, "work_item": rec.work_item, "at": rec.at,
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(rec.at)),
            "changes": changes, "masked": rec.masked,
        })

    def _rules_for(self, hook: str, rules: list[str], decision: str, refused: bool,
                   ) -> list[str]:
        targets = self.targets.get(hook, {})
        touching = [r for r in rules if r not in targets or decision in targets[r]]
        if refused and decision in ("proceed", "reason"):
            return touching[:1]  # a refusal sticks: the first refusing rule is responsible
        return touching

    def _before_side(self, rec: Recorded, name: str) -> dict[str, Any] | None:
        refused = rec.decisions.get("proceed") is False
        found: dict[str, Any] | None = None
        for step in rec.steps:
            if name in (step.get("changed") or {}):
                found = step
        if found is None and refused and name in ("proceed", "reason") and rec.refused_by:
            found = next((s for s in rec.steps if s.get("hook") == rec.refused_by), None)
        if found is None:
            return None
        hook = str(found.get("hook", ""))
        return {"hook": hook, "rules": self._rules_for(hook, list(found.get("rules", [])),
                                                       name, refused),
                "error": str(found.get("error", ""))}

    def _after_side(self, outcome: Outcome, name: str) -> dict[str, Any] | None:
        hook = outcome.changed_by.get(name)
        if hook is None:
            return None
        step = next((s for s in reversed(outcome.steps) if s.hook == hook), None)
        rules = list(step.detail.get("rules", [])) if step is not None else []
        return {"hook": hook, "rules": self._rules_for(hook, rules, name, outcome.refused),
                "error": step.error if step is not None else ""}
