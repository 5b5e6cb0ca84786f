"""Advice on rules that load: what `policy check` warns about without refusing the folder.

`lint(policy)` runs every lint and returns one sentence per finding, each ending with the lint's
name and how to silence it (`silence: [name]` on the rule, `LINTS` lists the names):

- `pattern-not-literal`: a `regex_match` or `glob_match` call whose pattern (the first
  argument) is not a string literal. That is legal — a field may hold a pattern on purpose —
  but it is mostly the arguments reversed, `regex_match(actor, '^bot-')`: the fact becomes the
  pattern and the literal the subject, so the rule never matches what was meant, and a long
  fact is compiled as a pattern at every evaluation (issue 20, item 7). With a literal
  subject the swapped call is named.
- `never-matches`: a condition the types prove false whatever the context once the policy data
  is read (`data.enabled` false, `contains(data.people, actor)` with no people), or true
  (the rule always applies). Without data such a condition is a load error instead. Also a
  condition no context satisfies at a point (`contradictions.py`): two values for one fact
  (`kind == 'pull-request' && kind == 'issue'`, `terminal && !terminal`), or a value the
  fact never takes (`work_item.kind == 'pr'`: the catalog's closed sets, `engine.values`).
- `conflicting-rules`: two enforce rules at the same point with the same condition that set
  the same decision to different values: only one of them can take effect.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from the_loop.errors import quote
from the_loop.hooks.policy.contradictions import contradiction
from the_loop.hooks.policy.data import reads_data
from the_loop.hooks.policy.expressions import is_text, pattern_calls
from the_loop.hooks.policy.exprtext import show
from the_loop.hooks.policy.rules import AFFIXES, LINTS, Policy, Rule, Template
from the_loop.hooks.policy.typecheck import Checker
from the_loop.hooks.policy.typemodel import root_type
from the_loop.jmes import CompiledExpression

__all__ = ["LINTS", "conflicts", "constant_truth", "lint", "pattern_warnings"]

def lint(policy: Policy) -> list[str]:
    """Every lint's findings, in rule order, each once; a rule's `silence:` drops its own."""
    out: list[str] = []
    for rule in policy.rules:
        for name, key, said in (*_pattern_findings(rule), *_truth_findings(rule)):
            _add(out, rule, name, f"{rule.file}: rule {quote(rule.name)} → {key}: {said}")
    for rule, other, said in conflicts(policy.rules):
        _add(out, rule, "conflicting-rules", f"{rule.file}: rule {quote(rule.name)}: {said}",
             also=other)
    return out


def _add(out: list[str], rule: Rule, name: str, line: str, also: Rule | None = None) -> None:
    if name in rule.silence or (also is not None and name in also.silence):
        return
    line += f" [{name}: silence it with `silence: [{name}]` on the rule]"
    if line not in out:
        out.append(line)


def pattern_warnings(policy: Policy) -> list[str]:
    """The `pattern-not-literal` findings only (file, rule, key, fix)."""
    return [line for line in lint(policy) if "[pattern-not-literal:" in line]


def _pattern_findings(rule: Rule) -> Iterator[tuple[str, str, str]]:
    for key, expression in _expressions(rule):
        for call in _pattern_calls(expression.ast):
            yield "pattern-not-literal", key, _advice(call)


def _truth_findings(rule: Rule) -> Iterator[tuple[str, str, str]]:
    """A condition whose truth the types decide once data is read (else a load error)."""
    for point in rule.points[:1]:
        expression = rule.when.get(point)
        if expression is None:
            continue
        truth, part = constant_truth(expression.ast, point)
        if truth is None:
            yield from _contradictions(rule)
            continue
        where = "" if part is expression.ast else f" because {show(part)} is always " \
            f"{'true' if truth else 'false'}"
        if truth:
            yield "never-matches", "when", (
                f"{show(expression.ast)} is always true with this data{where}: the rule "
                "applies to everything; remove `when` if that is meant")
        else:
            yield "never-matches", "when", (
                f"{show(expression.ast)} is always false with this data{where}: the rule can "
                "never match; check the data it reads, or remove the rule")


def _contradictions(rule: Rule) -> Iterator[tuple[str, str, str]]:
    """A condition no context satisfies, at the points where none does (one finding per
    reason, naming the points when the rule has several)."""
    found: dict[str, list[str]] = {}
    for point in rule.points:
        expression = rule.when.get(point)
        reason = "" if expression is None else contradiction(expression.ast, point)
        if reason:
            found.setdefault(reason, []).append(point)
    for reason, points in found.items():
        at = f" at {', '.join(points)}" if len(rule.points) > 1 else ""
        yield "never-matches", "when", (
            f"{rule.when_text} can never be true{at}: {reason}; fix the condition, or "
            "remove the rule")


def _expressions(rule: Rule) -> Iterator[tuple[str, CompiledExpression]]:
    """The rule's `when` and the expressions in its `set` templates, at its first point (the
    text is the same at every point)."""
    if not rule.points:
        return
    point = rule.points[0]
    if point in rule.when:
        yield "when", rule.when[point]
    for key, value in rule.values.get(point, {}).items():
        if isinstance(value, Template):
            for part in value.parts:
                if isinstance(part, CompiledExpression):
                    yield f"set → {key}", part


def _pattern_calls(ast: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """Each pattern function call in `ast` whose first argument is not a string literal."""
    for _function, call, pattern in pattern_calls(ast):
        if len(call.get("children") or []) == 2 and not is_text(pattern):
            yield call


def _advice(call: Mapping[str, Any]) -> str:
    name = str(call["value"])
    pattern, subject = call["children"]
    said = (f"{show(call)} takes its pattern from {show(pattern)}, not a literal: the pattern "
            "comes first")
    if is_text(subject):
        return (f"{said}; did you mean {name}({show(subject)}, {show(pattern)})? (leave it "
                "if the field holds a pattern on purpose)")
    return (f"{said}; leave it if {show(pattern)} holds a pattern on purpose (one that "
            f"{name} cannot use fails the rule at that point)")


def constant_truth(ast: Mapping[str, Any], point: str) -> tuple[bool | None, Mapping[str, Any]]:
    """(True/False when the types decide the condition, the part that decides it), for a
    condition that reads the policy data; (None, ast) otherwise."""
    if not reads_data(ast):
        return None, ast
    checker = Checker()
    t = checker.infer(ast, root_type(point))
    if checker.problems or t.truth is None:
        return None, ast
    return t.truth, _deciding(ast, point, t.truth)


def _deciding(node: Mapping[str, Any], point: str, truth: bool) -> Mapping[str, Any]:
    """The innermost operand of `&&` (for false) or `||` (for true) that decides `truth`."""
    node_type = node.get("type")
    if (node_type in ("and_expression", "or_expression")
            and (node_type == "and_expression") != truth):
        for child in node["children"]:
            if Checker().infer(child, root_type(point)).truth is truth:
                return _deciding(child, point, truth)
    return node


def conflicts(rules: list[Rule]) -> Iterator[tuple[Rule, Rule, str]]:
    """(later rule, earlier rule, sentence) for two enforce rules at one point with the same
    condition that set one decision to different values."""
    seen: dict[tuple[str, str], list[Rule]] = {}
    for rule in rules:
        if rule.audit:
            continue
        for point in rule.points:
            expression = rule.when.get(point)
            condition = "" if expression is None else show(expression.ast)
            for earlier in seen.setdefault((point, condition), []):
                clash = [k for k, v in rule.set_raw.items() if k not in AFFIXES
                         and k in earlier.set_raw and earlier.set_raw[k] != v]
                if clash:
                    when = f"when {condition}" if condition else "always (no `when`)"
                    yield rule, earlier, (
                        f"applies at {point} {when}, like rule {quote(earlier.name)} "
                        f"({earlier.file}), and sets {', '.join(clash)} to "
                        f"{_values(rule, clash)} where it sets {_values(earlier, clash)}: only "
                        f"one can take effect ({_which(clash)}); merge them or make their "
                        "conditions differ")
            seen[(point, condition)].append(rule)


def _values(rule: Rule, keys: list[str]) -> str:
    return ", ".join(json.dumps(rule.set_raw[k], ensure_ascii=False) for k in keys)


def _which(keys: list[str]) -> str:
    if set(keys) <= {"proceed", "reason"}:
        return "the first refusal's reason is kept"
    return "the later rule wins"
