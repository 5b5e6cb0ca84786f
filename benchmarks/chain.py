"""Cost of one point invocation: the chain beside a plain Python call and beside pluggy.

    python benchmarks/chain.py [--quick]

Everything is measured in this one run (timeit, best of several interleaved rounds, CPU
time) and printed as a markdown table with ratios. Targets: with no executors a point costs
no more than 3 plain function calls (issue 2); the marginal cost of one more local executor,
(t10 − t1) / 9, is at most 1.3× pluggy's marginal cost of one more implementation measured
the same way (issue 33); a point with one policy executor costs at most 5 µs more than the
executor's own handler (issue 22).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pluggy

from the_loop.events import EventLog
from the_loop.hooks.engine.chain import Chain, Link
from the_loop.hooks.engine.executor import LifecycleHooks
from the_loop.hooks.engine.points import SessionSpawn, WorkItem
from the_loop.hooks.executors.policy import load_policy

CTX = SessionSpawn(
    work_item=WorkItem(ref="local:acme/app#7", tracker="local", repository="acme/app",
                       number=7),
    loop="acme", labels=["loop", "trusted"], harness="demo", model="demo-1",
    command=["python3", "-m", "the_loop.demo.agent"], cwd="/srv/loop/ws/7",
    prompt="Fix the failing test in tests/test_app.py.",
)
PROMPT = "ACME: Fix the failing test in tests/test_app.py."


class PassThrough(LifecycleHooks):
    def session_spawn(self, ctx: SessionSpawn) -> SessionSpawn | None:
        return None


class Prefix(LifecycleHooks):
    def session_spawn(self, ctx: SessionSpawn) -> SessionSpawn | None:
        ctx.prompt = PROMPT  # a constant, so the plain and pluggy runs can share one context
        return ctx


def chain_of(n: int, changing: bool) -> Chain:
    hooks: list[LifecycleHooks] = [PassThrough() for _ in range(n)]
    if changing:
        hooks[n // 2] = Prefix()
    links = [Link(f"h{i}", h, frozenset({"session_spawn"})) for i, h in enumerate(hooks)]
    log = EventLog()  # in memory: the benchmark measures the chain, not the disk
    return Chain(links, log=log)


def plain_of(n: int, changing: bool) -> Callable[[SessionSpawn], SessionSpawn]:
    """The same work written by hand: call each hook; apply the one change."""
    if n == 0:
        def nothing(ctx: SessionSpawn) -> SessionSpawn:
            return ctx

        return nothing
    hooks: list[LifecycleHooks] = [PassThrough() for _ in range(n)]
    if changing:
        hooks[n // 2] = Prefix()
    methods = [h.session_spawn for h in hooks]

    def by_hand(ctx: SessionSpawn) -> SessionSpawn:
        for method in methods:
            answer = method(ctx)
            if answer is not None:
                ctx = answer
        return ctx

    return by_hand


spec = pluggy.HookspecMarker("bench")
impl = pluggy.HookimplMarker("bench")


class Spec:
    @spec
    def session_spawn(self, ctx: SessionSpawn) -> Any:
        """The pluggy twin of the point."""


class PluggyPass:
    @impl
    def session_spawn(self, ctx: SessionSpawn) -> Any:
        return None


class PluggyPrefix:
    @impl
    def session_spawn(self, ctx: SessionSpawn) -> Any:
        ctx.prompt = PROMPT
        return ctx


def pluggy_of(n: int, changing: bool) -> Any:
    pm = pluggy.PluginManager("bench")
    pm.add_hookspecs(Spec)
    for i in range(n):
        plugin = PluggyPrefix() if changing and i == n // 2 else PluggyPass()
        pm.register(plugin, name=f"p{i}")
    return pm.hook.session_spawn


def timer(stmt: str, **names: Any) -> timeit.Timer:
    """A timer on this process's CPU time, so other work on a shared machine does not count."""
    return timeit.Timer(stmt, timer=time.process_time, globals={"ctx": CTX, **names})


def best(timers: dict[str, timeit.Timer], number: int, rounds: int) -> dict[str, float]:
    """Seconds per statement, the best of `rounds`; the rounds interleave every timer so a
    burst of load elsewhere hits them all alike."""
    out = {key: float("inf") for key in timers}
    for _ in range(rounds):
        for key, t in timers.items():
            out[key] = min(out[key], t.timeit(number) / number)
    return out


SCENARIOS = [
    ("no executors", 0, False),
    ("1 local executor, returns None", 1, False),
    ("10 local executors, return None", 10, False),
    ("10 local executors, one changes a decision", 10, True),
]


def measure(number: int, rounds: int) -> tuple[list[tuple[str, float, float, float]], float]:
    """The table's rows (label, chain, plain, pluggy) and the cost of one plain call."""

    def f(ctx: SessionSpawn) -> SessionSpawn:
        return ctx

    timers = {"call": timer("f(ctx)", f=f)}
    for i, (_, n, changing) in enumerate(SCENARIOS):
        timers[f"chain{i}"] = timer("chain.run(ctx)", chain=chain_of(n, changing))
        timers[f"plain{i}"] = timer("plain(ctx)", plain=plain_of(n, changing))
        timers[f"pluggy{i}"] = timer("hook(ctx=ctx)", hook=pluggy_of(n, changing))
    t = best(timers, number, rounds)
    rows = [
        (label, t[f"chain{i}"], t[f"plain{i}"], t[f"pluggy{i}"])
        for i, (label, _, _) in enumerate(SCENARIOS)
    ]
    return rows, t["call"]


POLICY = """\
rules:
""" + "".join(f"""\
  - name: rule-{i}
    on: session_spawn
    when: "harness == 'h{i}' || contains(labels, 'team-{i}')"
    set:
      prompt_prefix: "[{i}] "
""" for i in range(9)) + """\
  - name: trusted
    on: session_spawn
    when: "contains(labels, 'trusted')"
    set:
      prompt_prefix: "[trusted] "
"""


def policy_point(number: int, rounds: int) -> tuple[float, float]:
    """A point with one policy executor of 10 rules (one matches): (chain.run, the
    executor's own handler on the same context), seconds per call."""
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "rules.yaml").write_text(POLICY, encoding="utf-8")
        executor = load_policy("policy", Path(tmp))
    chain = Chain([Link("policy", executor, frozenset({"session_spawn"}))], log=EventLog())
    executor.bind_log(chain.log)
    t = best({"chain": timer("chain.run(ctx)", chain=chain),
              "handler": timer("handler(ctx)", handler=executor.handler("session_spawn"))},
             number, rounds)
    return t["chain"], t["handler"]


def us(seconds: float) -> str:
    return f"{seconds * 1e6:.2f} µs"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few iterations (a smoke run)")
    args = parser.parse_args(argv)
    number, rounds = (1_000, 2) if args.quick else (10_000, 25)
    rows, call = measure(number, rounds)
    print(f"Python {sys.version.split()[0]}, pluggy {pluggy.__version__}; one plain function "
          f"call: {us(call)}\n")
    print("| per point invocation | the-loop chain | plain Python | chain ÷ plain "
          "| pluggy | chain ÷ pluggy |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, t_chain, t_plain, t_plug in rows:
        print(f"| {label} | {us(t_chain)} | {us(t_plain)} | {t_chain / t_plain:.1f}× "
              f"| {us(t_plug)} | {t_chain / t_plug:.2f}× |")
    empty = rows[0][1]
    marginal_chain = (rows[2][1] - rows[1][1]) / 9
    marginal_plug = (rows[2][3] - rows[1][3]) / 9
    ratio = marginal_chain / marginal_plug
    print()
    print(f"- no executors: {us(empty)} = {empty / call:.1f} plain function calls "
          f"(target ≤ 3): {'met' if empty <= 3 * call else 'MISSED'}")
    print(f"- marginal cost of one more local executor, (t10 − t1) / 9: chain "
          f"{us(marginal_chain)}, pluggy {us(marginal_plug)} per implementation, {ratio:.2f}× "
          f"(target ≤ 1.3×): {'met' if ratio <= 1.3 else 'MISSED'}")
    print("- the 'one changes' row includes reading the answer back and recording one "
          "hooks.decided event (in an in-memory log)")
    traced = best({"invoke": timer("chain.invoke(ctx)", chain=chain_of(10, False))},
                  number // 10, rounds)["invoke"]
    print(f"- traced (`Chain.invoke`, which the loop runs at each point, a step per executor), "
          f"10 returning None: {us(traced)}")
    bounded = Chain([Link("h0", PassThrough(), frozenset({"session_spawn"}), timeout=30.0)],
                    log=EventLog())
    threaded = best({"thread": timer("chain.run(ctx)", chain=bounded)},
                    max(number // 50, 20), rounds)["thread"]
    print(f"- 1 local executor with timeoutSeconds (a worker thread per call): "
          f"{us(threaded)} per point, against {us(rows[1][1])} in the loop's own thread")
    t_chain, t_handler = policy_point(number, rounds)
    print(f"- one policy executor of 10 rules (one matches): chain {us(t_chain)}, the "
          f"executor's own handler {us(t_handler)}; the chain's own cost "
          f"{us(t_chain - t_handler)} (target ≤ 5 µs, with its hooks.decided record): "
          f"{'met' if t_chain - t_handler <= 5e-6 else 'MISSED'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
