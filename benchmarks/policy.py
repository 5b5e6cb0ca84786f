"""Policy rules vs the same rules written by hand in Python, through the same Chain (issue 8).

One point (session_spawn) runs against policies of 10, 100 and 1,000 rules, one in ten matching
(each match adds a prompt prefix), three ways, in one process:

* the policy executor as it runs (compiled: one generated function per point),
* the policy executor on jmespath's reference interpreter (`load_policy(reference=True)`),
* a LifecycleHooks class with one plain `if` per rule, as an operator writes it by hand.

Then the same executors called directly (no chain), the chain's own cost, the load times
(reading and checking the YAML folder; importing the generated .py file for Python), and the
compliance suite's benchmarks.json expressions (from benchmarks/jmespath_compiler.py).
Prints markdown tables; ratios are against the hand-written Python measured in this run.
The same rules in OPA's Go engine and in CEL (benchmarks/peers.py) are loaded and called in
the same run, beside the compiled policy: a peer not installed is a row saying so.

    /work/venv/bin/python benchmarks/policy.py [--quick]
"""

from __future__ import annotations

import gc
import importlib.util
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from jmespath_compiler import expression_rows, print_expression_table
from peers import PEERS, facts_of, missing
from the_loop.events import EventLog
from the_loop.hooks.engine.chain import Chain, Link, copy_context
from the_loop.hooks.engine.executor import LifecycleHooks
from the_loop.hooks.engine.points import SessionSpawn, WorkItem
from the_loop.hooks.executors.policy import load_policy
from the_loop.hooks.policy.branches import BranchCounter

QUICK = "--quick" in sys.argv
SIZES = (10, 100) if QUICK else (10, 100, 1000)
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
    """The rules as an operator writes them by hand: one plain `if` per rule."""
    out = [
        "from the_loop.hooks.engine.executor import LifecycleHooks",
        "",
        "class Rules(LifecycleHooks):",
        "    def session_spawn(self, ctx):",
        "        prefix = ''",
    ]
    for i in range(n):
        label = "loop" if matches(i) else f"team-{i}"
        out += [
            f"        if ctx.work_item.repository == 'acme/app' and {label!r} in ctx.labels:",
            f"            prefix += {f'[{i}] '!r}",
        ]
    out += [
        "        if not prefix:",
        "            return None",
        "        ctx.prompt = prefix + ctx.prompt",
        "        return ctx",
    ]
    return "\n".join(out) + "\n"


class Floor(LifecycleHooks):
    """The least a hook that changes the prompt can do: the chain's own cost."""

    def session_spawn(self, ctx: SessionSpawn) -> SessionSpawn:
        ctx.prompt = "[0] " + ctx.prompt
        return ctx


def import_path(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"bench_rules_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def best_load(fn: Callable[[], Any], times: int = 1 if QUICK else 3) -> tuple[Any, float]:
    """(result, seconds of this process's CPU): the best of `times` runs, each after a full
    garbage collection. CPU time, so other work on a shared machine does not count."""
    best = float("inf")
    result = None
    for _ in range(times):
        result = None
        gc.collect()
        started = time.process_time()
        result = fn()
        best = min(best, time.process_time() - started)
    return result, best


def per_call(calls: dict[str, Callable[[], Any]], budget: float = 0.05,
             rounds: int = 11) -> dict[str, float]:
    """Seconds per call of each function: best of `rounds`, measured round-robin.

    Interleaving the functions within each round lets them share whatever else the machine
    is doing, so the ratios hold even when the absolute numbers wander.
    """
    if QUICK:
        budget, rounds = 0.005, 2

    def spend(fn: Callable[[], Any], n: int) -> float:
        started = time.perf_counter()
        for _ in range(n):
            fn()
        return time.perf_counter() - started

    counts: dict[str, int] = {}
    for key, fn in calls.items():  # calibrate: enough calls to fill `budget`
        n = 1
        while spend(fn, n) < budget and n < 1_000_000:
            n *= 2
        counts[key] = n
    best = dict.fromkeys(calls, float("inf"))
    for _ in range(rounds):
        for key, fn in calls.items():
            best[key] = min(best[key], spend(fn, counts[key]) / counts[key])
    return best


def direct_calls(python: Any, compiled: Any, reference: Any) -> dict[str, Callable[[], Any]]:
    """Each executor's handler on a context; the Python hook gets a fresh copy each call (it
    edits the context it is given, as the chain allows); the policy never modifies its own."""
    work = copy_context(CTX)
    hook = python.session_spawn
    fast = compiled.handler("session_spawn")
    slow = reference.handler("session_spawn")
    return {
        "python": lambda: hook(copy_context(work)),
        "compiled": lambda: fast(work),
        "reference": lambda: slow(work),
    }


def variant_yaml(n: int, data: bool) -> str:
    """`n` rules that read a maintainer list: written as a literal, or from `data/`."""
    people = "data.maintainers" if data else "['alice', 'bob', 'carol']"
    named = "{{ join(', ', data.maintainers) }}" if data else "alice, bob, carol"
    lines = ["rules:"]
    for i in range(n):
        label = "loop" if matches(i) else f"team-{i}"
        lines += [
            f"  - name: rule-{i}",
            "    on: session_spawn",
            f"    when: \"contains({people}, actor) && contains(labels, '{label}')\"",
            f"    set: {{prompt_prefix: \"[{i}] by {named}. \"}}",
        ]
    return "\n".join(lines) + "\n"


def data_rows(base: Path) -> list[str]:
    """Per size: the executor's handler with the list as a literal vs read from data/."""
    rows: list[str] = []
    for n in SIZES:
        handlers = {}
        for key in ("literal", "data"):
            folder = base / f"{key}{n}"
            (folder / "data").mkdir(parents=True)
            (folder / "rules.yaml").write_text(variant_yaml(n, key == "data"), "utf-8")
            (folder / "data" / "people.yaml").write_text("maintainers: [alice, bob, carol]\n",
                                                        "utf-8")
            handlers[key] = load_policy("p", folder).handler("session_spawn")
        work = copy_context(CTX)
        assert handlers["literal"](work) == handlers["data"](work)
        t = per_call({key: partial(fn, work) for key, fn in handlers.items()})
        rows.append(f"| {n:,} | {us(t['literal'])} | {us(t['data'])} | "
                    f"{t['data'] / t['literal']:.2f}× |")
    return rows


def coverage_rows(base: Path) -> list[str]:
    """Per size: the compiled handler of a policy never used for coverage vs one whose rules
    a coverage run counted (no counter is compiled into it), and what counting costs a case."""
    rows: list[str] = []
    for n in SIZES:
        folder = base / f"policy{n}"
        plain = load_policy("p", folder)
        covered = load_policy("p", folder)
        counter = BranchCounter.of(covered.policy)
        counter.count(covered.policy, "session_spawn", CTX)
        # the loop's code is the same code, byte for byte, whether coverage ran or not
        assert _matcher_code(plain) == _matcher_code(covered)
        work = copy_context(CTX)
        t = per_call({
            "plain": partial(plain.handler("session_spawn"), work),
            "covered": partial(covered.handler("session_spawn"), work),
            "count": partial(counter.count, covered.policy, "session_spawn", work),
        })
        rows.append(f"| {n:,} | {us(t['plain'])} | {us(t['covered'])} | "
                    f"{t['covered'] / t['plain']:.2f}× | {us(t['count'])} |")
    return rows


def _matcher_code(executor: Any) -> bytes:
    plan = executor._fast["session_spawn"]
    return bytes(plan.enforce.__code__.co_code)


def peer_rows(n: int, folder: Path, compiled: Any, prompt: str) -> list[str]:
    """One row per peer: its load and call beside the compiled policy's, measured now; the
    loads alternate with ours round by round, so the machine's load falls on both."""
    facts = facts_of(CTX)
    work = copy_context(CTX)
    rows: list[str] = []
    for name, (peer, module, install) in PEERS.items():
        if missing(module):
            rows.append(f"| {n:,} | {name} | not installed: `{install}` | | | |")
            continue
        load_ours = load_peer = float("inf")
        built: Any = None
        for _ in range(1 if QUICK else 5):
            load_ours = min(load_ours, best_load(partial(load_policy, "p", folder), 1)[1])
            if built is not None:
                built.close()
            built, seconds = best_load(partial(peer, n, facts), 1)
            load_peer = min(load_peer, seconds)
        assert built.prefix + CTX.prompt == prompt, (name, built.prefix)
        t = per_call({"ours": partial(compiled.handler("session_spawn"), work),
                      "peer": partial(built.call, facts)})
        built.close()
        rows.append(f"| {n:,} | {name} | {ms(load_ours)} | {ms(load_peer)} | "
                    f"{load_peer / load_ours:.2f}× | {us(t['ours'])} | {us(t['peer'])} | "
                    f"{t['peer'] / t['ours']:.1f}× |")
    return rows


def us(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f}"


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.1f}"


def main() -> int:
    sys.dont_write_bytecode = True  # every import of the generated module compiles it
    chained: list[str] = []
    direct: list[str] = []
    loads: list[str] = []
    peers: list[str] = []
    floor = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        for n in SIZES:
            folder = base / f"policy{n}"
            folder.mkdir()
            (folder / "rules.yaml").write_text(rules_yaml(n), encoding="utf-8")
            pyfile = base / f"rules{n}.py"
            pyfile.write_text(rules_python(n), encoding="utf-8")

            module, load_py = best_load(partial(import_path, pyfile))
            compiled, load_c = best_load(partial(load_policy, "p", folder))
            reference, load_r = best_load(partial(load_policy, "p", folder, reference=True))
            python = module.Rules()
            chains = {
                key: Chain([Link("rules", executor, frozenset({"session_spawn"}))], log=EventLog())
                for key, executor in (
                    ("python", python), ("compiled", compiled), ("reference", reference),
                    ("floor", Floor()),
                )
            }
            prompts = {key: chain.run(CTX).prompt for key, chain in chains.items()}
            assert prompts["python"] == prompts["compiled"] == prompts["reference"], prompts
            assert prompts["python"].count("] ") == n // 10
            t = per_call({key: partial(chain.run, CTX) for key, chain in chains.items()})
            floor = t["floor"]
            chained.append(
                f"| {n:,} | {us(t['python'])} | {us(t['compiled'])} | "
                f"{t['compiled'] / t['python']:.2f}× | {us(t['reference'])} | "
                f"{t['reference'] / t['python']:.1f}× | {t['reference'] / t['compiled']:.1f}× |"
            )
            d = per_call(direct_calls(python, compiled, reference))
            direct.append(
                f"| {n:,} | {us(d['python'])} | {us(d['compiled'])} | "
                f"{d['compiled'] / d['python']:.2f}× | {us(d['reference'])} | "
                f"{d['reference'] / d['python']:.1f}× |"
            )
            loads.append(f"| {n:,} | {ms(load_py)} | {ms(load_c)} | {ms(load_r)} |")
            peers.extend(peer_rows(n, folder, compiled, prompts["compiled"]))
        with_data = data_rows(base)
        with_coverage = coverage_rows(base)
    print("session_spawn through one Chain, 1 rule in 10 matching (best of 11, interleaved; "
          "µs per call; × = ratio)\n")
    print("| rules | hand-written Python µs | policy compiled µs | compiled / Python "
          "| policy reference µs | reference / Python | reference / compiled |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    print("\n".join(chained))
    print(f"\nThe chain's own cost, with a hook that only prepends to the prompt: {us(floor)} µs "
          "(copies, read-back, the hooks.decided event).\n")
    print("The same executors called directly, without the chain (µs per call; the Python hook "
          "gets a fresh copy of the context, as the chain gives it):\n")
    print("| rules | hand-written Python µs | policy compiled µs | compiled / Python "
          "| policy reference µs | reference / Python |")
    print("|---:|---:|---:|---:|---:|---:|")
    print("\n".join(direct))
    print("\nLoad (best of 3, ms of CPU): importing the generated Python module; reading, "
          "checking and compiling the YAML folder\n")
    print("| rules | Python import ms | policy compiled ms | policy reference ms |")
    print("|---:|---:|---:|---:|")
    print("\n".join(loads))
    print("\nPeers, measured in this run on the same rules and facts (benchmarks/peers.py): "
          "load = read, check and compile our folder, or add and prepare every rule in the "
          "peer (best of 5, alternating with ours, ms of this process's CPU, the Go engine's "
          "threads included); call = one evaluation of every rule, the peer's prefix "
          "asserted equal to ours (best of 11, interleaved, µs). ÷ ours: the peer's figure "
          "over ours (above 1: we are faster)\n")
    print("| rules | peer | our load ms | peer load ms | load ÷ ours | our call µs "
          "| peer call µs | call ÷ ours |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    print("\n".join(peers))
    print("\nPolicy data: the same rules reading a maintainer list written in each rule (and "
          "in its prompt prefix) or read from data/people.yaml (`data.maintainers`, "
          "`{{ join(', ', data.maintainers) }}`); the executor called directly, µs per call\n")
    print("| rules | list as a literal µs | list from data/ µs | data / literal |")
    print("|---:|---:|---:|---:|")
    print("\n".join(with_data))
    print("\nBranch coverage: the compiled handler of a policy no coverage run touched, and of "
          "one whose rules `policy test --coverage` counted (its counting is a separate walk; "
          "the compiled code has no counters: the two generated functions' bytecode is "
          "asserted identical); last, what counting one case costs\n")
    print("| rules | compiled µs | compiled after a coverage run µs | after / before "
          "| counting one case µs |")
    print("|---:|---:|---:|---:|---:|")
    print("\n".join(with_coverage))
    print("\nThe compliance suite's benchmarks.json expressions and typical policy conditions, "
          "one evaluation each (µs; from benchmarks/jmespath_compiler.py)\n")
    print_expression_table(expression_rows(QUICK))
    return 0


if __name__ == "__main__":
    sys.exit(main())
