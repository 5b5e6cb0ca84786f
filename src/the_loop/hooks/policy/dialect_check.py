"""`policy check --dialect D`: a folder's rules against what one caller sends.

An error per rule and point where the rule reads a fact that caller never sends (served to
it, every call of that rule would fail: `reads.py`), and a warning where a `when` compares a
fact with a string that caller never sends for it (`source == 'reply'` while the other loop
sends `comment` or `verb`): such a comparison is always false (or, with `!=`, always true)
for that caller. The dialects and their facts and values are `hooks.engine.callers`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from typing import Any

from the_loop.hooks.engine.callers import sends, values_sent
from the_loop.hooks.engine.points import WORK_ITEM_FIELDS
from the_loop.hooks.policy.reads import rule_reads
from the_loop.hooks.policy.rules import Policy
from the_loop.jmes.paths import root_paths

__all__ = ["dialect_problems"]

_CALLER = {"the-loop": "this loop's runtime", "other-loop": "the open-source the-loop"}


def dialect_problems(policy: Policy, dialect: str) -> tuple[list[str], list[str]]:
    """(errors, warnings) of `policy`'s rules for a caller speaking `dialect`."""
    errors: list[str] = []
    warnings: list[str] = []
    caller = _CALLER[dialect]
    for rule in policy.rules:
        where = f"rule {rule.name!r} ({os.path.basename(rule.file)})"
        for point in rule.points:
            sent = sends(dialect, point)
            lacking = sorted(r for r in rule_reads(rule, point) if _unsent(r, sent))
            if lacking and rule.audit:  # it decides nothing: its records rest on defaults
                warnings.append(
                    f"{where} (audit) reads {', '.join(lacking)} at {point}, which {caller} "
                    "never sends: what it records for that caller rests on defaults")
            elif lacking:
                errors.append(
                    f"{where} reads {', '.join(lacking)} at {point}, which {caller} never "
                    f"sends: served to it, every call of this rule fails (a fact not sent is "
                    "never read as a guess); leave the rule out of the folder served to it")
            when = rule.when.get(point)
            if when is None:
                continue
            for fact, value, op in _compared(when.ast):
                known = values_sent(dialect, point, fact)
                if known and value not in known:
                    always = "false" if op == "eq" else "true"
                    warnings.append(
                        f"{where} compares {fact} with {value!r} at {point}, but {caller} "
                        f"sends {' or '.join(map(repr, known))}: always {always} for it")
    return errors, warnings


def _unsent(read: str, sent: frozenset[str]) -> bool:
    """Whether reading `read` needs a fact not in `sent` (a whole record: any of its fields)."""
    if read not in sent:
        return True
    if "." in read or not any(s.startswith(read + ".") for s in sent):
        return False  # a scalar fact, or one field of a record
    return not all(f"{read}.{f}" in sent for f in WORK_ITEM_FIELDS)


def _compared(node: Mapping[str, Any]) -> Iterator[tuple[str, str, str]]:
    """(fact, string, eq|ne) for each `fact == 'string'` (either side) in `node`."""
    if node.get("type") == "comparator" and node.get("value") in ("eq", "ne"):
        left, right = node["children"]
        for a, b in ((left, right), (right, left)):
            if b.get("type") == "literal" and isinstance(b.get("value"), str):
                paths = root_paths(a)
                if len(paths) == 1 and a.get("type") in ("field", "subexpression"):
                    yield ".".join(paths[0]), b["value"], str(node["value"])
    for child in node.get("children") or ():
        if isinstance(child, Mapping):
            yield from _compared(child)
