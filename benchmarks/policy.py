"""Policy rules vs the same rules as plain Python, through the same Chain: call and load time.

One point (session_spawn) is run against policies of 10, 100 and 1,000 rules, one in ten
matching (each match adds a prompt prefix), three ways: the policy executor with compiled
expressions, the policy executor on jmespath's reference interpreter, and a LifecycleHooks
class whose method runs the same conditions written as Python functions. Load time is
reading + checking the YAML folder for a policy, importing the generated .py file for Python.
Prints a markdown table; ratios are against the plain-Python baseline measured in this run.

    /work/venv/bin/python benchmarks/policy.py
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from the_loop.events import EventLog
from the_loop.hooks.chain import Chain, Link
from the_loop.hooks.points import SessionSpawn, WorkItem
from the_loop.hooks.policy import load_policy

SIZES = (10, 100, 1000)
CTX = SessionSpawn(
    work_item=WorkItem(ref="local:acme/app#1", tracker="local", owner="acme", repo="app",
                       repository="acme/app", number=1, kind="issue"),
    labels=["loop", "backend"], actor="alice", harness="scripted", prompt="Write the design.",
)


def matches(i: int) -> bool:
    return i % 10 == 0


def rules_yaml(n: int) -> str:
    lines = ["rules:"]
    for i in range(n):
        label = "loop" if matches(i) else f"team-{i}"
        lines += [
            f"  - name: rule-{i}",
            "    on: session_spawn",
            f"    when: \"work_item.repository == 'acme/app' && contains(labels, '{label}')\"",
            f"    set: {{prompt_prefix: \"[{i}] \"}}",
        ]
    return "\n".join(lines) + "\n"


def rules_python(n: int) -> str:
    out = [
        "from the_loop.hooks.executor import LifecycleHooks",
        "",
    ]
    for i in range(n):
        label = "loop" if matches(i) else f"team-{i}"
        out += [
            f"def rule_{i}(ctx):",
            f"    return ctx.work_item.repository == 'acme/app' and {label!r} in ctx.labels",
            "",
        ]
    pairs = ", ".join(f"(rule_{i}, {f'[{i}] '!r})" for i in range(n))
    out += [
        f"RULES = [{pairs}]",
        "",
        "class Rules(LifecycleHooks):",
        "    def session_spawn(self, ctx):",
        "        prefix = ''.join(p for rule, p in RULES if rule(ctx))",
        "        if not prefix:",
        "            return None",
        "        ctx.prompt = prefix + ctx.prompt",
        "        return ctx",
    ]
    return "\n".join(out) + "\n"


def import_path(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"bench_rules_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    started = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - started


def per_call(chains: dict[str, Chain], budget: float = 0.05, rounds: int = 7) -> dict[str, float]:
    """Seconds per chain.run(CTX) for each chain: best of `rounds`, measured round-robin.

    Interleaving the chains within each round lets them share whatever else the machine is
    doing, so the ratios hold even when the absolute numbers wander.
    """
    def spend(chain: Chain, n: int) -> float:
        run = chain.run
        started = time.perf_counter()
        for _ in range(n):
            run(CTX)
        return time.perf_counter() - started

    calls: dict[str, int] = {}
    for key, chain in chains.items():  # calibrate: enough calls to fill `budget`
        n = 1
        while spend(chain, n) < budget and n < 1_000_000:
            n *= 2
        calls[key] = n
    best = dict.fromkeys(chains, float("inf"))
    for _ in range(rounds):
        for key, chain in chains.items():
            best[key] = min(best[key], spend(chain, calls[key]) / calls[key])
    return best


def main() -> int:
    sys.dont_write_bytecode = True  # every import of the generated module compiles it
    rows: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        for n in SIZES:
            folder = base / f"policy{n}"
            folder.mkdir()
            (folder / "rules.yaml").write_text(rules_yaml(n), encoding="utf-8")
            pyfile = base / f"rules{n}.py"
            pyfile.write_text(rules_python(n), encoding="utf-8")

            module, load_py = timed(lambda pyfile=pyfile: import_path(pyfile))  # type: ignore[misc]
            compiled, load_c = timed(lambda folder=folder: load_policy("p", folder))  # type: ignore[misc]
            reference, load_r = timed(  # type: ignore[misc]
                lambda folder=folder: load_policy("p", folder, reference=True)
            )
            chains = {}
            for key, executor, points in (
                ("python", module.Rules(), frozenset({"session_spawn"})),
                ("compiled", compiled, frozenset(compiled.points())),
                ("reference", reference, frozenset(reference.points())),
            ):
                chains[key] = Chain([Link("rules", executor, points)], log=EventLog())
            prompts = {key: chain.run(CTX).prompt for key, chain in chains.items()}
            assert len(set(prompts.values())) == 1, prompts
            assert prompts["python"].count("] ") == n // 10
            t = per_call(chains)
            rows.append(
                f"| {n:,} | {t['python'] * 1e6:,.1f} | {t['compiled'] * 1e6:,.1f} | "
                f"{t['compiled'] / t['python']:.1f}× | {t['reference'] * 1e6:,.1f} | "
                f"{t['reference'] / t['python']:.1f}× | {load_py * 1e3:,.1f} | "
                f"{load_c * 1e3:,.1f} | {load_c / load_py:.0f}× | {load_r * 1e3:,.1f} |"
            )
    print("session_spawn through one Chain, 1 rule in 10 matching (best of 7, interleaved; "
          "µs per call, ms per load; × = ratio to plain Python)\n")
    print("| rules | Python µs | policy compiled µs | ratio | policy reference µs | ratio "
          "| load Python ms | load compiled ms | ratio | load reference ms |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
