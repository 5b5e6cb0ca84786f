"""`the-loop policy check|test [DIR]`: compile a policy folder and list its rules; run its tests."""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from the_loop.cli._common import add_json, config_of, print_json, require_path
from the_loop.errors import LoopError, PolicyError
from the_loop.hooks.declaring.declaration import parse_hooks
from the_loop.hooks.engine.callers import DIALECTS
from the_loop.hooks.engine.points import POINTS
from the_loop.util import shown_path

if TYPE_CHECKING:
    from the_loop.hooks.policy import Policy


def register(sub: Any) -> None:
    """The `policy` group; its subcommands are listed in `app.POLICY_SUBCOMMANDS`."""
    p = sub.add_parser("policy", help="check, test and try policy folders; replay recorded points")
    p.add_subparsers(dest="policy_command", metavar="SUBCOMMAND")
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def subcommands(sub: Any) -> Any:
    """The subparsers of the `policy` group, where a policy subcommand adds its parser."""
    parser = sub.choices["policy"]
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


_DIR_HELP = ("a folder of rule files (default: every policy: entry of the config in effect; "
             "without one, policies/ beside the config, else ./policies)")


def register_check(ps: Any) -> None:
    pc = ps.add_parser("check", help="compile every rule; list the rules per point")
    pc.add_argument("dir", metavar="DIR", nargs="?", help=_DIR_HELP)
    pc.add_argument("--dialect", choices=DIALECTS, default=None,
                    help="also check the rules against what this caller sends: the-loop (this "
                         "loop's runtime) or other-loop (the open-source the-loop, served "
                         "with hooks serve --policy); a rule reading a fact it never sends "
                         "is an error (default: no caller in particular)")
    add_json(pc)
    pc.set_defaults(func=cmd_check)


def register_test(ps: Any) -> None:
    pt = ps.add_parser("test", help="run the cases in DIR/tests against the rules")
    pt.add_argument("dir", metavar="DIR", nargs="?", help=_DIR_HELP)
    pt.add_argument("--explain", action="store_true",
                    help="under each case, why each rule at its point matched or not")
    pt.add_argument("--full", action="store_true",
                    help="with --explain, show long values whole (by default their first and "
                         "last characters and their length)")
    pt.add_argument("--coverage", action="store_true",
                    help="per rule, how many cases matched it and how many did not; per "
                    "condition, which parts (each side of && and ||, each comparison, each "
                    "contains) were never true or never false")
    pt.add_argument("--min-coverage", type=percent, default=None, metavar="PCT",
                    help="exit 1 when the measure --coverage-of names is below PCT%%, naming "
                    "what no case reached (implies --coverage); PCT is 0 to 100, with or "
                    "without %%")
    pt.add_argument("--coverage-of", choices=("rules", "branches"), default="rules",
                    help="what --min-coverage gates: the share of rules some case matched "
                    "(default), or the share of condition parts seen both true and false")
    pt.add_argument("--run", type=pattern, default=None, metavar="PATTERN",
                    help="run only the cases whose name matches PATTERN (a regular "
                    "expression, searched)")
    add_json(pt)
    pt.set_defaults(func=cmd_test)


def percent(text: str) -> float:
    """`--min-coverage`'s value: a number from 0 to 100, optionally followed by %."""
    number = text.strip().removesuffix("%").strip()
    try:
        value = float(number)
    except ValueError:
        value = float("nan")
    if not 0 <= value <= 100:  # also refuses nan and inf
        raise argparse.ArgumentTypeError(
            f"expected a percentage from 0 to 100 (e.g. 100 or 80%), got {text!r}")
    return value


def pattern(text: str) -> re.Pattern[str]:
    """`--run`'s value: a regular expression."""
    try:
        return re.compile(text)
    except re.error as exc:
        raise argparse.ArgumentTypeError(
            f"not a regular expression ({exc}): {text!r}; a plain case name works too") from None


@dataclass(frozen=True)
class Target:
    """A policy folder to check or test, and the `policy:` entry that declares it ("" if none)."""

    folder: Path
    entry: str = ""
    points: tuple[str, ...] | None = None


def targets(args: argparse.Namespace) -> list[Target]:
    """DIR; else every `policy:` entry of the config in effect; else policies/ beside the
    config, else ./policies."""
    if args.dir:
        require_path(args, args.dir, "", or_else="leave DIR out to use every policy: entry "
                                                 "of the config in effect")
        return [Target(Path(args.dir))]
    config = config_of(args)
    if config.path is None:
        if not Path("policies").is_dir():
            raise LoopError(
                "no policy folder: pass DIR, or run where a cli-config.yaml with a policy: "
                "entry is found (`the-loop init` writes one), or pass --config PATH"
            )
        return [Target(Path("policies"))]
    entries = [e for e in parse_hooks(config.hooks, config.folder) if e.kind == "policy"]
    if entries:
        return [Target(Path(e.resolved), e.name, e.on) for e in entries]
    return [Target(config.folder / "policies")]


def policy_dir(args: argparse.Namespace) -> Path:
    """The first folder `targets` names (kept for callers that take one folder)."""
    return targets(args)[0].folder


def load_target(target: Target, *, lazy: bool = False) -> Policy:
    """Read and check the target's folder, with its entry's `on:` (raises `PolicyError`)."""
    from the_loop.hooks.policy import PolicyError, idle_rules, read_policy

    policy = read_policy(target.folder, lazy=lazy)
    if target.points is not None:
        idle = idle_rules(policy, target.points)
        if idle:
            raise PolicyError([f"policy entry {target.entry!r}: {e}" for e in idle],
                              folder=str(target.folder))
    return policy


def _stats_delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after.get(k, 0) - before.get(k, 0) for k in after}


def _each(args: argparse.Namespace, one: Any) -> int:
    """Run `one(target) -> (code, json)` per target; one JSON document, worst exit code."""
    try:
        found = targets(args)
    except LoopError as exc:
        if not args.json:
            raise
        print_json({"ok": False, "error": str(exc), "folders": []})  # CI parses stdout
        return exc.exit_code
    codes: list[int] = []
    docs: list[dict[str, Any]] = []
    for i, target in enumerate(found):
        if target.entry and not args.json:
            print(("\n" if i else "") + _header(target))
        try:
            code, doc = one(target)
        except PolicyError as exc:  # this entry's errors, then the next entry (text only)
            print(f"the-loop: {exc}", file=sys.stderr)
            code, doc = exc.exit_code, {"error": str(exc)}
        codes.append(code)
        docs.append({"entry": target.entry or None, **doc, "ok": code == 0})
    if args.json:  # one shape for any number of entries; ok is false whenever the exit is not 0
        print_json({"ok": max(codes) == 0, "folders": docs})
    return max(codes)


def _header(target: Target) -> str:
    """`== policy entry 'house-rules' (policies; on: session_spawn)`"""
    on = f"; on: {', '.join(target.points)}" if target.points is not None else ""
    return f"== policy entry {target.entry!r} ({shown_path(target.folder)}{on})"


def cmd_check(args: argparse.Namespace) -> int:
    return _each(args, lambda target: _check(args, target))


def _check(args: argparse.Namespace, target: Target) -> tuple[int, dict[str, Any]]:
    from the_loop.hooks.policy import PolicyError
    from the_loop.hooks.policy.dialect_check import dialect_problems
    from the_loop.hooks.policy.lints import lint
    from the_loop.jmes import compile_stats

    folder = target.folder
    before = dict(compile_stats())
    try:
        policy = load_target(target)
    except PolicyError as exc:
        if not args.json:
            raise  # exit 1, every error listed on stderr
        return 1, {"folder": str(folder), "ok": False, "errors": exc.errors}
    stats = _stats_delta(before, dict(compile_stats()))
    by_point = {p: policy.rules_at(p) for p in POINTS}
    warnings = lint(policy)
    if args.dialect:
        errors, by_caller = dialect_problems(policy, args.dialect)
        warnings += by_caller
        if errors:
            if args.json:
                return 1, {"folder": str(folder), "ok": False, "errors": errors,
                           "warnings": warnings}
            raise PolicyError(errors, folder=str(folder))
    if args.json:
        return 0, _check_doc(folder, policy, stats, warnings, by_point)
    _print_check(folder, policy, stats.get("fallback", 0), by_point)
    for warning in warnings:  # advice: the folder loads and the exit stays 0
        print(f"the-loop: warning: {warning}", file=sys.stderr)
    return 0, {}


def _check_doc(folder: Path, policy: Policy, stats: dict[str, int], warnings: list[str],
               by_point: dict[str, Any]) -> dict[str, Any]:
    """`policy check --json`'s document for a folder that loads."""
    return {
        "folder": str(folder), "ok": True, "revision": policy.revision, "mask": policy.mask,
        "files": [_name(f) for f in policy.files],
        "rules": len(policy.rules), "compile_stats": stats, "warnings": warnings,
        "data": {name: _name(where) for name, where in policy.data.origin.items()},
        "points": {
            p: [{"name": r.name, "mode": r.mode, "file": _name(r.file),
                 "description": r.description} for r in rules]
            for p, rules in by_point.items() if rules
        },
    }


def _print_check(folder: Path, policy: Policy, fallback: int, by_point: dict[str, Any]) -> None:
    """`policy check`'s text for a folder that loads: the summary, the rules per point, the
    data names and the points without rules."""
    print(f"{folder}: {len(policy.rules)} rule(s) in {len(policy.files)} file(s), all "
          f"compiled and checked; {fallback} expression(s) fell back to the reference "
          f"interpreter; revision {policy.revision}")
    if policy.mask:
        print(f"a hook server's decision log masks: {', '.join(policy.mask)}")
    _print_rules_by_point(policy, by_point)
    if policy.data.values:
        print(f"data: {', '.join(policy.data.values)}")
    idle = [p for p, rules in by_point.items() if not rules]
    if idle:
        print(f"no rules at: {', '.join(idle)}")


def _print_rules_by_point(policy: Policy, by_point: dict[str, Any]) -> None:
    """Each point that has rules, then its rules in columns (name, mode, file, description)."""
    width = max(len(r.name) for r in policy.rules)
    files = max(len(_name(r.file)) for r in policy.rules)  # descriptions line up
    for point, rules in by_point.items():
        if not rules:
            continue
        print(f"{point}:")
        for r in rules:
            line = f"  {r.name:<{width}}  {r.mode:<7}  {_name(r.file):<{files}}"
            if r.description:
                line += f"  {r.description}"
            print(line.rstrip())


def _name(path: str | Path) -> str:
    """A file's name as it can be printed: a name that is not UTF-8 (bytes on POSIX) shows
    its odd bytes escaped (`r\\udcff.yaml`) instead of failing the print."""
    return Path(path).name.encode("utf-8", "backslashreplace").decode("utf-8")


def cmd_test(args: argparse.Namespace) -> int:
    return _each(args, lambda target: _test(args, target))


def _test(args: argparse.Namespace, target: Target) -> tuple[int, dict[str, Any]]:
    from the_loop.hooks.policy import PolicyError
    from the_loop.hooks.policy.testing import run_tests

    folder = target.folder
    try:
        report = run_tests(folder, policy=load_target(target), explain=args.explain,
                           branches=args.coverage or args.min_coverage is not None,
                           run=args.run)
    except PolicyError as exc:
        if not args.json:
            raise  # exit 1, every error listed on stderr
        return 1, {"folder": str(folder), "ok": False, "passed": 0, "failed": 0,
                   "errors": exc.errors, "cases": []}
    floor = args.min_coverage
    branches, below = _coverage_gate(args, report)
    code = 0 if report.ok and not below else 1
    if args.json:
        return code, _test_doc(args, report, below)
    _print_results(report, args.full)
    if args.coverage or floor is not None:
        _print_coverage(report)
    elif report.unexercised:
        print(f"note: no case exercised: {', '.join(report.unexercised)}")
    _print_summary(report)
    if below:
        _print_below(report, folder, floor, branches)
    return code, {}


def _coverage_gate(args: argparse.Namespace, report: Any) -> tuple[bool, bool]:
    """Whether `--min-coverage` gates branch coverage (`--coverage-of branches`, measured),
    and whether the measure it gates is below the floor (never, without `--min-coverage`)."""
    floor = args.min_coverage
    branches = args.coverage_of == "branches" and report.branches is not None
    measured = report.branches.percent() if branches and report.branches else \
        report.covered_percent
    below = floor is not None and measured < floor
    return branches, below


def _test_doc(args: argparse.Namespace, report: Any, below: bool) -> dict[str, Any]:
    """`policy test --json`'s document: the report's, with the gate under `coverage`."""
    doc: dict[str, Any] = report.to_json()
    if args.min_coverage is not None:
        doc["coverage"]["min"] = args.min_coverage
        doc["coverage"]["of"] = args.coverage_of
        doc["coverage"]["ok"] = not below
    return doc


def _print_results(report: Any, full: bool) -> None:
    """One PASS or FAIL line per case, with its problems and explanation; then the test
    files' errors."""
    for r in report.results:
        print(f"{'PASS' if r.passed else 'FAIL'}  {Path(r.file).name}: {r.name}  ({r.point})")
        for problem in r.problems:
            print(f"      {problem}")
        for rule in r.explained or ():
            print(f"      · {rule.text(full)}")
    for error in report.errors:
        print(f"ERROR {error}")


def _print_summary(report: Any) -> None:
    """`3 passed, 1 failed[, N test file error(s)]`"""
    summary = f"{report.passed} passed, {report.failed} failed"
    if report.errors:
        summary += f", {len(report.errors)} test file error(s)"
    print(summary)


def _print_below(report: Any, folder: Path, floor: float, branches: bool) -> None:
    """What to add when the gated coverage is below `--min-coverage`."""
    if branches and report.branches is not None:
        print(f"branch coverage {report.branches.shown_percent():.1f}% is below "
              f"--min-coverage {floor:g}: add cases to {folder / 'tests'} that make each part "
              "above true and false")
    else:
        print(f"coverage {report.shown_percent:.1f}% is below --min-coverage {floor:g}: no "
              f"case matched {', '.join(report.unexercised)}; add a case to "
              f"{folder / 'tests'} that each of them matches")  # below 100%: some rule is named


def _print_coverage(report: Any) -> None:
    width = max((len(name) for name in report.coverage), default=4)
    print(f"coverage: {'RULE':<{width}}  MATCHED  NOT MATCHED")
    for name, (matched, missed) in report.coverage.items():
        flag = "" if matched else "  <- no case matches this rule"
        print(f"          {name:<{width}}  {matched:>7}  {missed:>11}{flag}")
    total = len(report.coverage)
    print(f"coverage: {report.shown_percent:.1f}% of rules matched by a case "
          f"({total - len(report.unexercised)} of {total})")
    branches = report.branches
    if branches is None:
        return
    for rule, part, said in branches.gaps():
        print(f"branches: {rule}: `{part}` {said}")
    seen, outcomes = branches.outcomes()
    print(f"branches: {branches.shown_percent():.1f}% of condition outcomes seen ({seen} of "
          f"{outcomes}: each part of a condition true and false)")
