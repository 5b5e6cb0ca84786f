"""The facts a written case needs: the fields the rules of a policy at one point read, from
their conditions and templates (`needed_facts`); the rest of a recorded context is left out."""

from __future__ import annotations

from typing import Any

from the_loop.hooks.policy.rules import Policy, Template
from the_loop.jmes import root_paths

Path = tuple[str, ...]


def read_paths(policy: Policy, point: str) -> list[Path]:
    """Every field chain a rule of `policy` at `point` reads in its `when` or a `set` template."""
    paths: list[Path] = []
    for rule in policy.rules:
        if point not in rule.points:
            continue
        when = rule.when.get(point)
        asts = [when.ast] if when is not None else []
        for value in rule.values.get(point, {}).values():
            if isinstance(value, Template):
                asts += [part.ast for part in value.parts if not isinstance(part, str)]
        for ast in asts:
            paths += root_paths(ast)
    return paths


def needed_facts(policy: Policy, point: str, facts: dict[str, Any]) -> dict[str, Any]:
    """`facts` with only the fields (and a work item's keys) the rules at `point` read."""
    cut = _kept(facts, read_paths(policy, point))
    return cut if isinstance(cut, dict) else facts


def _kept(value: Any, paths: list[Path]) -> Any:
    if not isinstance(value, dict) or any(not p for p in paths):
        return value
    out: dict[str, Any] = {}
    for key, inner in value.items():
        below = [p[1:] for p in paths if p and p[0] == key]
        if below:
            out[key] = _kept(inner, below)
    return out


__all__ = ["needed_facts", "read_paths"]
