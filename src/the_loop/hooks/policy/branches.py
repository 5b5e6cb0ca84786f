"""Branch coverage for `policy test --coverage`: which parts of each rule's condition were ever
true and ever false across the cases.

A condition's *parts* are each operand of `&&` and `||`, each comparison and each `contains()`
on its boolean skeleton (through `&&`, `||`, `!`; what is evaluated per element inside a
filter or projection is not a part). `BranchCounter.count` evaluates a rule's condition on a
case's context the way JMESPath does — `a && b` looks at `b` only when `a` is true — and
records each part it evaluated as true or false. Nothing of this runs, or is even built, unless
coverage was asked for: the executor's compiled code has no counters; this evaluator is a
separate walk (each part on the corrected reference interpreter), made for coverage runs only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from the_loop.hooks.engine.points import Context, context_to_json
from the_loop.hooks.policy.expressions import COMPILER
from the_loop.hooks.policy.exprtext import show
from the_loop.hooks.policy.rules import Policy, Rule
from the_loop.jmes.semantics import truthy

__all__ = ["BranchCounter", "Part"]

Path_ = tuple[int, ...]
_LOGIC = ("and_expression", "or_expression")


@dataclass
class Part:
    """One part of a condition: its text and how many evaluations found it true / false."""

    text: str
    true: int = 0
    false: int = 0

    def missing(self) -> str | None:
        """'was never false' (or true, or evaluated), or None when both were seen."""
        if self.true and self.false:
            return None
        if not self.true and not self.false:
            return "was never evaluated"
        return "was never false" if self.true else "was never true"


@dataclass
class BranchCounter:
    """Per rule (in rule order), the parts of its condition by their path in the AST."""

    rules: dict[str, dict[Path_, Part]] = field(default_factory=dict)
    _evaluators: dict[int, Callable[[Any], Any]] = field(default_factory=dict)

    @classmethod
    def of(cls, policy: Policy) -> BranchCounter:
        counter = cls()
        for rule in policy.rules:
            ast = _condition(rule)
            parts: dict[Path_, Part] = {}
            if ast is not None:
                _collect(ast, (), parts)
            counter.rules[rule.name] = parts
        return counter

    def count(self, policy: Policy, point: str, ctx: Context) -> None:
        """Evaluate the condition of every rule of `policy` at `point` on `ctx`, counting."""
        root = context_to_json(ctx)
        for rule in policy.rules_at(point):
            ast = rule.when.get(point)
            parts = self.rules.get(rule.name)
            if ast is None or not parts:
                continue
            try:
                self._eval(ast.ast, (), parts, root)
            except Exception:
                # Not named: any exception is this rule's failure at run time, which the
                # case's own run of the executor reports (it takes any: executors/policy.py,
                # `PointRule._value`); the reference interpreter raises no one class
                # (JMESPathError, a ValueError; OverflowError for ceil/floor of an infinite
                # number; RecursionError for deep data). Counting stops at the failing part.
                continue

    def _eval(self, node: Mapping[str, Any], path: Path_, parts: dict[Path_, Part],
              root: Any) -> Any:
        node_type = node.get("type")
        children = node.get("children") or []
        if node_type in _LOGIC:
            value = self._eval(children[0], (*path, 0), parts, root)
            if truthy(value) == (node_type == "and_expression"):
                value = self._eval(children[1], (*path, 1), parts, root)
        elif node_type == "not_expression":
            value = not truthy(self._eval(children[0], (*path, 0), parts, root))
        else:
            evaluate = self._evaluators.get(id(node))
            if evaluate is None:
                evaluate = COMPILER.library.reference.evaluator(node)
                self._evaluators[id(node)] = evaluate
            value = evaluate(root)
        part = parts.get(path)
        if part is not None:
            if truthy(value):
                part.true += 1
            else:
                part.false += 1
        return value

    def outcomes(self) -> tuple[int, int]:
        """(outcomes seen, outcomes possible): each part can be seen true and seen false."""
        seen = sum(bool(p.true) + bool(p.false) for ps in self.rules.values() for p in ps.values())
        return seen, 2 * sum(len(ps) for ps in self.rules.values())

    def shown_percent(self) -> float:
        """The share of outcomes seen, cut (never rounded up) to one decimal; 100 for none."""
        seen, total = self.outcomes()
        return (1000 * seen // total) / 10 if total else 100.0

    def percent(self) -> float:
        seen, total = self.outcomes()
        return 100.0 * seen / total if total else 100.0

    def gaps(self) -> list[tuple[str, str, str]]:
        """(rule, part, what was never seen) for each part not seen both ways, rule order. A
        part whose text the condition holds more than once says which use it is (`a ||
        (b && a)`: two lines read the same otherwise)."""
        out: list[tuple[str, str, str]] = []
        for name, parts in self.rules.items():
            texts = [part.text for part in parts.values()]
            for i, part in enumerate(parts.values()):
                said = part.missing()
                if said is None:
                    continue
                uses = texts.count(part.text)
                if uses > 1:
                    said = f"(use {texts[:i + 1].count(part.text)} of {uses} in the condition) " \
                        + said
                out.append((name, part.text, said))
        return out

    def to_json(self) -> dict[str, Any]:
        seen, total = self.outcomes()
        return {
            "percent": self.shown_percent(), "seen": seen, "outcomes": total,
            "rules": {name: [{"part": p.text, "true": p.true, "false": p.false}
                             for p in parts.values()]
                      for name, parts in self.rules.items() if parts},
        }


def _condition(rule: Rule) -> Mapping[str, Any] | None:
    for point in rule.points:
        expression = rule.when.get(point)
        if expression is not None:
            return expression.ast
    return None


def _collect(node: Mapping[str, Any], path: Path_, parts: dict[Path_, Part], *,
             operand: bool = False) -> None:
    """The parts on the boolean skeleton under `node`, by path, in source order: `&&`/`||`
    and `!` are not parts themselves (their operands are: `!contains(…)` counts the
    contains)."""
    node_type = node.get("type")
    children = node.get("children") or []
    if node_type in _LOGIC:
        for i, child in enumerate(children[:2]):
            _collect(child, (*path, i), parts, operand=True)
    elif node_type == "not_expression":
        _collect(children[0], (*path, 0), parts, operand=operand)
    elif operand or node_type == "comparator" or (
            node_type == "function_expression" and node.get("value") == "contains"):
        parts[path] = Part(show(node))
