"""Benchmark: the JMESPath compiler against the reference interpreter and hand-written Python.

Run: ``python benchmarks/jmespath_compiler.py`` (add ``--quick`` for a fast, noisier run).

Prints one markdown table with the per-evaluation time of

* the reference interpreter (``jmespath`` 1.1.0: parsed once, ``ParsedResult.search(data,
  options)`` with the policy functions),
* the compiled expression (``compile_expression(text).search(data)``),
* for the typical policy conditions, a hand-written Python function doing the same thing,

for every expression of the compliance suite's ``benchmarks.json`` plus typical policy conditions,
and the ratios reference/compiled and compiled/hand. Each time is the best of 5 ``timeit`` runs of
a loop long enough to take ~0.2 s (CPU time, so that other processes disturb it less). Then it
prints the time to compile 1,000 distinct expressions: conditions as a policy has them (distinct
literals and field names in a few shapes, which share generated code) and structurally distinct
ones (every one generates and compiles new Python).
"""

from __future__ import annotations

import json
import random
import re
import sys
import time
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jmespath
from jmespath.visitor import Options

from the_loop.hooks.policy.expressions import compile_expression
from the_loop.hooks.policy.functions import PolicyFunctions
from the_loop.jmes import compile_stats
from the_loop.jmes.emitter import CODE_CACHE

SUITE = Path(__file__).resolve().parent.parent / "tests" / "data" / "jmespath-compliance"

# A session_spawn context as the catalog types it (every condition below is a valid rule).
CONTEXT: dict[str, Any] = {
    "work_item": {
        "kind": "pull-request",
        "repository": "acme/app",
        "ref": "release/2024.06",
        "number": 120,
    },
    "actor": "dependabot[bot]",
    "respawn": False,
    "command": ["python3", "README.md", "docs/guide.md"],
    "labels": ["bug", "area/api", "needs-review"],
}


_RELEASE = re.compile("^release/").search


# (expression, hand-written Python with the same result on CONTEXT-like data)
POLICY: list[tuple[str, Callable[[Any], Any]]] = [
    (
        "work_item.kind == 'pull-request' && !contains(labels, 'trusted')",
        lambda d: d["work_item"]["kind"] == "pull-request" and "trusted" not in d["labels"],
    ),
    (
        "contains(['acme/app','acme/web'], work_item.repository)",
        lambda d: d["work_item"]["repository"] in ("acme/app", "acme/web"),
    ),
    (
        "regex_match('^release/', work_item.ref)",
        lambda d: _RELEASE(d["work_item"]["ref"]) is not None,
    ),
    ("length(labels) > `3`", lambda d: len(d["labels"]) > 3),
    (
        "work_item.kind == 'pull-request' && respawn == `false`",
        lambda d: d["work_item"]["kind"] == "pull-request" and d["respawn"] is False,
    ),
    (
        "actor == 'dependabot[bot]' || starts_with(work_item.ref, 'renovate/')",
        lambda d: (
            d["actor"] == "dependabot[bot]"
            or d["work_item"]["ref"].startswith("renovate/")
        ),
    ),
    (
        "length(labels[?starts_with(@, 'area/')]) > `0`",
        lambda d: len([x for x in d["labels"] if x.startswith("area/")]) > 0,
    ),
    (
        "work_item.number > `500` || contains(labels, 'large')",
        lambda d: d["work_item"]["number"] > 500 or "large" in d["labels"],
    ),
    (
        "command[?ends_with(@, '.md')]",
        lambda d: [f for f in d["command"] if f.endswith(".md")],
    ),
]


def best_per_call(function: Callable[[Any], Any], data: Any, quick: bool) -> float:
    """Seconds per call: best of 5 timeit runs of ~0.2 s each (--quick: 3 runs of 200 calls)."""
    timer = timeit.Timer("f(d)", globals={"f": function, "d": data}, timer=time.process_time)
    if quick:
        return min(timer.repeat(repeat=3, number=200)) / 200
    number, _ = timer.autorange()  # a loop of at least 0.2 s
    return min(timer.repeat(repeat=5, number=number)) / number


def fmt(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    return f"{seconds * 1e6:.3f}"


def short(text: str, width: int = 60) -> str:
    text = text.replace("|", "\\|")
    return text if len(text) <= width else text[: width - 1] + "…"


Row = tuple[str, str, float, float, float | None]


def expression_rows(quick: bool) -> list[Row]:
    """(source, expression, reference s, compiled s, hand-written s or None) per expression:
    every expression of the compliance suite's benchmarks.json, then the policy conditions."""
    options = Options(custom_functions=PolicyFunctions())
    rows: list[Row] = []

    def measure(source: str, text: str, data: Any, hand: Callable[[Any], Any] | None) -> None:
        parsed = jmespath.compile(text)
        compiled = compile_expression(text)
        expected = parsed.search(data, options=options)
        assert compiled.search(data) == expected, text
        if hand is not None:
            assert hand(data) == expected, text

        def reference(d: Any) -> Any:
            return parsed.search(d, options=options)

        ref = best_per_call(reference, data, quick)
        comp = best_per_call(compiled.search, data, quick)
        hand_time = best_per_call(hand, data, quick) if hand is not None else None
        tag = "" if compiled.compiled else " (fallback)"
        rows.append((source, short(text) + tag, ref, comp, hand_time))

    for group in json.loads((SUITE / "benchmarks.json").read_text(encoding="utf-8")):
        for case in group["cases"]:
            measure("compliance", case["expression"], group["given"], None)
    for text, hand in POLICY:
        measure("policy", text, CONTEXT, hand)
    return rows


def print_expression_table(rows: list[Row]) -> None:
    print(
        "| source | expression | reference µs | compiled µs | hand µs "
        "| ref/compiled | compiled/hand |"
    )
    print("|---|---|---:|---:|---:|---:|---:|")
    for source, text, ref, comp, hand_time in rows:
        ratio = f"{ref / comp:.1f}×"
        over_hand = f"{comp / hand_time:.2f}×" if hand_time else "–"
        print(
            f"| {source} | `{text}` | {fmt(ref)} | {fmt(comp)} | {fmt(hand_time)} "
            f"| {ratio} | {over_hand} |"
        )


def main() -> None:
    quick = "--quick" in sys.argv
    print_expression_table(expression_rows(quick))

    print()
    for label, texts in (
        ("1,000 distinct conditions in 10 shapes (as in a policy file)", policy_like()),
        ("1,000 structurally distinct expressions", structurally_distinct()),
    ):
        CODE_CACHE.clear()
        jmespath.parser.Parser.purge()
        start = time.perf_counter()
        for text in texts:
            compile_expression(text)
        elapsed = time.perf_counter() - start
        print(
            f"Compiling {label}: {elapsed:.3f} s ({elapsed:.3f} ms each; "
            f"{len(CODE_CACHE)} generated code objects)"
        )
    print(f"compile_stats() = {compile_stats()}")


def policy_like() -> list[str]:
    """Conditions that differ in their literals and field names, like the rules of a policy."""
    shapes = [
        "work_item.{f} == '{v}' && !contains(labels, '{v}x')",
        "contains(['{v}', '{v}y'], work_item.{f})",
        "regex_match('^{v}/', work_item.{f})",
        "length({f}) > `{n}`",
        "event == '{v}' && work_item.{f} == `false`",
        "work_item.author.{f} == '{v}' || starts_with(work_item.ref, '{v}/')",
        "length({f}[?starts_with(@, '{v}/')]) > `{n}`",
        "work_item.{f} > `{n}` || contains(labels, '{v}')",
        "work_item.files[?ends_with(@, '.{v}')]",
        "items[?size > `{n}`].{f} | [0] != '{v}'",
    ]
    fields = ["kind", "ref", "repository", "title", "size", "state", "login", "labels"]
    return [
        shapes[i % len(shapes)].format(v=f"v{i}", f=fields[i % len(fields)], n=i % 17)
        for i in range(1000)
    ]


def structurally_distinct(count: int = 1000) -> list[str]:
    """Random expressions (fixed seed) whose texts, with fixed names and literals, all differ."""
    rng = random.Random(20240601)

    def chain() -> str:
        return ".".join(rng.choice("abcd") for _ in range(rng.randint(1, 3)))

    def expression(depth: int) -> str:
        if depth <= 0:
            return rng.choice([chain(), f"{chain()} == 'x'", f"length({chain()}) > `2`"])

        def sub() -> str:
            return expression(depth - 1)

        shapes: list[Callable[[], str]] = [
            lambda: f"{sub()} && {sub()}",
            lambda: f"({sub()} || {sub()})",
            lambda: f"!({sub()})",
            lambda: f"contains({chain()}, 'y') || {sub()}",
            lambda: f"{chain()}[?{sub()}].{chain()}",
            lambda: f"[{sub()}, {sub()}]",
            lambda: f"{{k: {sub()}, l: {chain()}}}",
            lambda: f"sort_by({chain()}, &{chain()})[0].{chain()} == {chain()}",
            lambda: f"not_null({chain()}, {sub()})",
            lambda: f"{chain()}[*].{chain()} | [0] == `1`",
            lambda: f"starts_with({chain()}, 'z') && {sub()}",
        ]
        return rng.choice(shapes)()

    texts: dict[str, None] = {}
    while len(texts) < count:
        texts[expression(rng.randint(1, 3))] = None
    return list(texts)


if __name__ == "__main__":
    main()
