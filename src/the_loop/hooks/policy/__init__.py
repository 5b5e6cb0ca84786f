"""The built-in `policy` executor: YAML rules with JMESPath conditions, checked at load.

`load_policy(name, folder)` reads every rule file of a folder, compiles and checks every
rule against the catalog (raising `PolicyError` listing every problem), and returns a
`PolicyExecutor` the chain runs like any other executor.
"""

from __future__ import annotations

from pathlib import Path

from the_loop.hooks.policy.executor import PolicyExecutor
from the_loop.hooks.policy.rules import Policy, PolicyError, Rule, read_policy


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


def idle_rules(policy: Policy, points: tuple[str, ...]) -> list[str]:
    """One error per rule of `policy` that an entry's `on: points` leaves with nowhere to run."""
    return [
        f"{r.file}: rule {r.name!r} runs at {', '.join(r.points)}, which this entry's on: "
        f"[{', '.join(points)}] leaves out, so it would never run; add its point to on:, "
        "or move the rule to another policy folder"
        for r in policy.rules if not set(r.points) & set(points)
    ]


__all__ = [
    "Policy", "PolicyError", "PolicyExecutor", "Rule", "idle_rules", "load_policy", "read_policy",
]
