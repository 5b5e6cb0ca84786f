"""Load and evaluation cost against input size, for the bounds of issue 11 rule 6.

    python benchmarks/bounded_input.py [--quick]

Each row is measured in this one run and shown as a ratio to the smallest input of its
family, so a linear cost doubles when the input doubles (a quadratic one quadruples):

- `policy load, dotted path`: `read_policy` on one rule whose `when` is `a.a.a…` of N
  characters (the field check was quadratic: 16 KB took 24 s);
- `yaml, aliases`: `yamlsafe.load` of a document with N aliases to one small anchor (the
  alias budget's check is one pass over the distinct nodes);
- `regex_match`, on RE2: `^([A-Za-z0-9]+ ?)+$` against N letters and a `!` (Python's `re`
  takes exponential time here; it is shown for the two smallest sizes only);
- `glob_match`, on RE2, given a comment of N characters as its pattern (the reversed-arguments
  slip, issue 20 item 7), beside `fnmatch.fnmatchcase` on the same (what glob_match was: 800 KB
  took 23 s); past 10,000 characters glob_match refuses the pattern without compiling it.
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import re
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from the_loop import yamlsafe
from the_loop.errors import PolicyError
from the_loop.hooks.policy.functions import InvalidValueError, glob_match, regex_match
from the_loop.hooks.policy.rules import read_policy

PATTERN = "^([A-Za-z0-9]+ ?)+$"


def best(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def dotted(folder: Path, chars: int) -> Callable[[], object]:
    path = ".".join(["work_item"] * (chars // 10))
    (folder / "r.yaml").write_text(
        f'rules:\n  - {{name: r, on: session_spawn, when: "{path}", set: {{proceed: false}}}}\n',
        encoding="utf-8")

    def load() -> object:
        try:
            return read_policy(folder)
        except PolicyError as exc:
            return exc
    return load


def aliases(count: int) -> Callable[[], object]:
    text = "x: &x [1, 2]\ny: [" + ", ".join(["*x"] * count) + "]\n"
    return lambda: yamlsafe.load(text)


def slip(chars: int, tag: int) -> str:
    """A comment of `chars` characters holding glob syntax, unique per `tag` (no cache hit)."""
    return (f"{tag} " + "fix *.py in acme/* " * (chars // 19 + 1))[:chars]


def globs(repeat: int, *, full: bool) -> list[tuple[str, int, float, float]]:
    """glob_match and fnmatch with a comment as the pattern, each call a new pattern."""
    rows: list[tuple[str, int, float, float]] = []
    for what, match in (("glob_match on RE2, a comment as the pattern (chars)", glob_match),
                        ("fnmatch, same (for contrast)",
                         lambda p, s: fnmatch.fnmatchcase(s, p))):
        base, tag = 0.0, 0
        for n in [1000, 2000, 4000, 8000]:
            def once(n: int = n, match: Callable[[str, str], bool] = match) -> None:
                nonlocal tag
                tag += 1
                match(slip(n, tag), "acme/x")
            t = best(once, repeat)
            base = base or t
            rows.append((what, n, t, t / base))
    sizes = [80_000, 800_000] if full else [80_000]
    for n in sizes:
        def refused(n: int = n) -> None:
            with contextlib.suppress(InvalidValueError):
                glob_match(slip(n, 0), "acme/x")
        rows.append(("glob_match past 10,000 chars: refused", n, best(refused, repeat), 0.0))
    if full:  # one call: 80 KB already takes seconds
        rows.append(("fnmatch, 80,000 chars (for contrast)", 80_000,
                     best(lambda: fnmatch.fnmatchcase("acme/x", slip(80_000, -1)), 1), 0.0))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    repeat = 3 if args.quick else 15
    rows: list[tuple[str, int, float, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        sizes = [1000, 2000, 4000, 8000, 16000]
        base = 0.0
        for n in sizes:
            t = best(dotted(folder, n), repeat)
            base = base or t
            rows.append(("policy load, dotted path (chars)", n, t, t / base))
    base = 0.0
    for n in [400, 800, 1600, 3200]:
        t = best(aliases(n), repeat)
        base = base or t
        rows.append(("yaml, aliases to one anchor", n, t, t / base))
    base = 0.0
    for n in [1000, 10000, 100000, 1000000]:
        subject = "a" * n + "!"
        t = best(lambda s=subject: regex_match(PATTERN, s), repeat)
        base = base or t
        rows.append(("regex_match on RE2 (subject chars)", n, t, t / base))
    base = 0.0
    for n in [18, 20, 22]:
        subject = "a" * n + "!"
        t = best(lambda s=subject: re.search(PATTERN, s), 1)
        base = base or t
        rows.append(("Python re, same pattern (for contrast)", n, t, t / base))
    rows += globs(repeat, full=not args.quick)
    print("| what | input size | seconds | ratio to the smallest |")
    print("|---|---:|---:|---:|")
    for what, n, t, ratio in rows:
        shown = f"{ratio:.1f}×" if ratio else "—"
        print(f"| {what} | {n} | {t:.6f} | {shown} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
