"""Advice on rules that load: what `policy check` warns about without refusing the folder.

`pattern_warnings` names each `regex_match` or `glob_match` call whose pattern (the first
argument) is not a string literal. That is legal — a field may hold a pattern on purpose —
but it is mostly the arguments reversed, `regex_match(actor, '^bot-')`: the fact becomes the
pattern and the literal the subject, so the rule never matches what was meant, and a long
fact is compiled as a pattern at every evaluation (issue 20, item 7).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from the_loop.errors import quote
from the_loop.hooks.policy.exprtext import show
from the_loop.hooks.policy.rules import Policy, Rule, Template
from the_loop.jmes import CompiledExpression

#: The policy functions whose first argument is a pattern.
PATTERN_FUNCTIONS = ("regex_match", "glob_match")


def pattern_warnings(policy: Policy) -> list[str]:
    """One sentence per call with a pattern that is not a literal (file, rule, key, fix)."""
    out: list[str] = []
    for rule in policy.rules:
        for key, expression in _expressions(rule):
            for call in _pattern_calls(expression.ast):
                line = f"{rule.file}: rule {quote(rule.name)} → {key}: {_advice(call)}"
                if line not in out:
                    out.append(line)
    return out


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
    stack: list[Any] = [ast]
    while stack:
        node = stack.pop()
        if not isinstance(node, Mapping):
            continue
        children = node.get("children") or []
        if (node.get("type") == "function_expression" and node.get("value") in PATTERN_FUNCTIONS
                and len(children) == 2 and not _is_text(children[0])):
            yield node
        stack.extend(reversed([c for c in children if isinstance(c, Mapping)]))


def _is_text(node: Any) -> bool:
    return isinstance(node, Mapping) and node.get("type") == "literal" and isinstance(
        node.get("value"), str)


def _advice(call: Mapping[str, Any]) -> str:
    name = str(call["value"])
    pattern, subject = call["children"]
    said = (f"{show(call)} takes its pattern from {show(pattern)}, not a literal: the pattern "
            "comes first")
    if _is_text(subject):
        return (f"{said}; did you mean {name}({show(subject)}, {show(pattern)})? (leave it "
                "if the field holds a pattern on purpose)")
    return (f"{said}; leave it if {show(pattern)} holds a pattern on purpose (one that "
            f"{name} cannot use fails the rule at that point)")
