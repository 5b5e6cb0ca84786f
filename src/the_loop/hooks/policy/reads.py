"""Which facts a rule reads at a point, and which of them a context does not know.

`rule_reads(rule, point)` is every fact the rule's `when` and `set` templates read, dotted to
at most a record's field (`work_item.fork`, `labels`, `endpoint` for the whole record);
`unknown_reads(reads, unknown)` is the part of it a context's `unknown_facts` names — a rule
with any is never decided on the defaults those facts read as (see docs/policy-guide.md).
"""

from __future__ import annotations

from collections.abc import Iterable

from the_loop.hooks.policy.rules import Rule, Template
from the_loop.jmes.paths import root_paths

__all__ = ["rule_reads", "unknown_reads", "unsent_message"]


def rule_reads(rule: Rule, point: str) -> frozenset[str]:
    """The facts `rule` reads at `point` (dotted: `work_item.fork`, `labels`)."""
    asts = []
    when = rule.when.get(point)
    if when is not None:
        asts.append(when.ast)
    for value in rule.values.get(point, {}).values():
        if isinstance(value, Template):
            asts.extend(p.ast for p in value.parts if not isinstance(p, str))
    return frozenset(".".join(path[:2]) for ast in asts for path in root_paths(ast))


def unknown_reads(reads: Iterable[str], unknown: Iterable[str]) -> list[str]:
    """The facts of `unknown` that reading `reads` depends on, sorted: the same fact, a field
    of an unknown record, or a whole record one of whose fields is unknown."""
    out: set[str] = set()
    for u in unknown:
        for r in reads:
            if u == r or u.startswith(r + ".") or r.startswith(u + "."):
                out.add(u)
    return sorted(out)


def unsent_message(rule: str, file: str, point: str, facts: list[str]) -> str:
    """Why a rule is not decided at a call that lacks `facts`."""
    return (
        f"policy rule {rule!r} ({file}) reads {', '.join(facts)} at {point}, which the caller "
        "did not send (unknown_facts); a rule is never decided on a fact the caller did not "
        "send: send it, or serve the rule only to callers that do (`the-loop policy check "
        "--dialect other-loop` lists what that caller cannot decide)"
    )
