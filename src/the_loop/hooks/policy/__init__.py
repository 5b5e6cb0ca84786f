"""The policy language: YAML rules with JMESPath conditions, read, compiled and checked at load.

`read_policy(folder)` reads every rule file of a folder, compiles and checks every rule
against the catalog (raising `PolicyError` listing every problem). The executor that runs a
policy in a chain, and `load_policy` that builds it, are in `hooks.executors.policy`.
"""

from __future__ import annotations

from the_loop.hooks.policy.rules import Policy, PolicyError, Rule, read_policy


def idle_rules(policy: Policy, points: tuple[str, ...]) -> list[str]:
    """One error per rule of `policy` that an entry's `on: points` leaves with nowhere to run."""
    return [
        f"{r.file}: rule {r.name!r} runs at {', '.join(r.points)}, which this entry's on: "
        f"[{', '.join(points)}] leaves out, so it would never run; add its point to on:, "
        "or move the rule to another policy folder"
        for r in policy.rules if not set(r.points) & set(points)
    ]


__all__ = ["Policy", "PolicyError", "Rule", "idle_rules", "read_policy"]
