"""Building a decision record: from a chain's outcome (the loop's points, a served chain) or
from one served executor's answer, with one step builder for both.

`step_of` (`layout.step_of`, kept where the record's layout is, so a reader rebuilds a
served call's one step with it too) is the one shape a hook's step takes in a record: its
hook, kind (the executor registry's word: local, remote, policy; `unknown` for an executor
of no registered kind), status, the decisions it changed, its error, the fields it tried
to change and could not, and the policy rules that applied and the audit rules that
matched. `loop_record` stores a
chain's outcome compactly (`layout.expand` undoes it); `applied` is what the loop applies of
a chain's final decisions, the record's and replay's alike.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from the_loop.decisions.encoding import context_json
from the_loop.decisions.layout import DECISIONS, VERSION, step_of
from the_loop.hooks.engine.chain import Outcome, Step
from the_loop.hooks.engine.points import Context
from the_loop.hooks.executors import registry

#: The kind a step records for a hook whose executor is of no registered kind.
UNKNOWN = registry.UNKNOWN
#: Decisions a point carries that the loop does not apply in some cases: at a human gate
#: the request text is the graph's, so a question or summary a hook set there is ignored.
_IGNORED_AT_GATE = ("question", "summary")




def chain_step(step: Step, kinds: Mapping[str, str]) -> dict[str, Any]:
    """A chain's step (`hooks.engine.chain.Step`) as a record holds it."""
    return step_of(step.hook, kinds.get(step.hook, UNKNOWN), step.status, step.changed,
                   step.error, step.dropped, step.detail)


def applied(point: str, given: Mapping[str, Any], final: Mapping[str, Any]) -> dict[str, Any]:
    """The decisions the loop applies of a chain's `final` ones at a point whose context
    entered as `given`: all of them, except a question or summary at a human gate (the
    graph's request text is posted there), which keep their incoming values."""
    out = {name: final[name] for name in DECISIONS[point]}
    if point == "waiting_for_input" and given.get("kind") == "gate":
        for name in _IGNORED_AT_GATE:
            out[name] = given.get(name)
    return out


def _compact(steps: list[dict[str, Any]], current: dict[str, Any]) -> None:
    """Store each text a step edited around its incoming value as that edit (`edits`:
    [before, after]), not as a second copy; `replaced` names a text it replaced whole (what
    a redaction does, so `--write-cases` never copies the original). Walks `current` (the
    decisions as they entered) through each step's changes."""
    for step in steps:
        changed = step.pop("changed", None)
        if not changed:
            continue
        kept: dict[str, Any] = {}
        edits: dict[str, list[str]] = {}
        replaced: list[str] = []
        for key, value in changed.items():
            was = current.get(key)
            if isinstance(value, str) and isinstance(was, str) and was and (
                    at := value.find(was)) >= 0:
                edits[key] = [value[:at], value[at + len(was):]]
            else:
                kept[key] = value
                if isinstance(value, str) and isinstance(was, str) and was:
                    replaced.append(key)  # the text it held is gone: maybe a redaction
            current[key] = value
        if kept:
            step["changed"] = kept
        if replaced:
            step["replaced"] = replaced
        if edits:
            step["edits"] = edits


def loop_record(ctx: Context, outcome: Outcome, kinds: Mapping[str, str], *,
                input_id: int = 0) -> dict[str, Any]:
    """The record of one fired point (before redaction). `decisions` holds only the applied
    values that the walk from the context through each step's changes does not already give
    (a required hook's failure-refusal, a question a gate ignored); `input` is the input's
    own id at input_received (a comment's), so a reader matches the two by id."""
    given = ctx.__dict__
    current = {name: given[name] for name in DECISIONS[ctx.POINT]}
    steps = [chain_step(s, kinds) for s in outcome.steps]
    _compact(steps, current)
    final = applied(ctx.POINT, given, outcome.context.__dict__)
    rec: dict[str, Any] = {
        "v": VERSION, "context": context_json(ctx), "steps": steps,
        "decisions": {name: value for name, value in final.items() if value != current[name]},
        "refused_by": outcome.refused_by,
    }
    if input_id:
        rec["input"] = input_id
    return rec


def refusing_rule(executor: Any, rules: list[str]) -> str:
    """The rule that refused among `rules` (a policy's first rule setting proceed: false)."""
    # A policy executor exists only once its module is imported: the loop that runs no
    # policy does not import the policy compiler to write its records (issue 34.3).
    policy = sys.modules.get("the_loop.hooks.executors.policy")
    if policy is not None and isinstance(executor, policy.PolicyExecutor):
        refusers = {r.name for r in executor.policy.rules if r.set_raw.get("proceed") is False}
        for rule in rules:
            if rule in refusers:
                return rule
    name = str(getattr(executor, "name", "") or type(executor).__name__)
    return rules[0] if rules else f"(hook {name})"


__all__ = ["UNKNOWN", "applied", "chain_step", "loop_record", "refusing_rule",
           "step_of"]
