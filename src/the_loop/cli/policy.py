"""`the-loop policy check|test [DIR]`: compile a policy folder and list its rules; run its tests."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from the_loop.cli._common import add_json, print_json
from the_loop.config import find_config
from the_loop.hooks.points import POINTS


def register(sub: Any) -> None:
    p = sub.add_parser("policy", help="check a policy folder; run its rule tests")
    ps = p.add_subparsers(dest="policy_command", metavar="SUBCOMMAND")
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])

    pc = ps.add_parser("check", help="compile every rule; list the rules per point")
    pc.add_argument("dir", metavar="DIR", nargs="?",
                    help="the folder of rule files (default: policies next to cli-config.yaml, "
                         "else ./policies)")
    add_json(pc)
    pc.set_defaults(func=cmd_check)

    pt = ps.add_parser("test", help="run the cases in DIR/tests against the rules")
    pt.add_argument("dir", metavar="DIR", nargs="?",
                    help="the folder of rule files (default: as for check)")
    add_json(pt)
    pt.set_defaults(func=cmd_test)


def policy_dir(args: argparse.Namespace) -> Path:
    """DIR, else `policies` next to the config file in effect, else ./policies."""
    if args.dir:
        return Path(args.dir)
    config = find_config(getattr(args, "config", None))
    if config is not None and config.is_file():
        return config.parent / "policies"
    return Path("policies")


def _stats_delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after.get(k, 0) - before.get(k, 0) for k in after}


def cmd_check(args: argparse.Namespace) -> int:
    from the_loop.hooks.policy import PolicyError, read_policy
    from the_loop.hooks.policy.jmes import compile_stats

    folder = policy_dir(args)
    before = dict(compile_stats())
    try:
        policy = read_policy(folder)
    except PolicyError as exc:
        if not args.json:
            raise  # exit 1, every error listed on stderr
        print_json({"folder": str(folder), "ok": False, "errors": exc.errors})
        return 1
    stats = _stats_delta(before, dict(compile_stats()))
    fallback = stats.get("fallback", 0)
    by_point = {p: policy.rules_at(p) for p in POINTS}
    if args.json:
        print_json({
            "folder": str(folder), "ok": True, "files": [f.name for f in policy.files],
            "rules": len(policy.rules), "compile_stats": stats,
            "points": {
                p: [{"name": r.name, "mode": r.mode, "file": Path(r.file).name,
                     "description": r.description} for r in rules]
                for p, rules in by_point.items() if rules
            },
        })
        return 0
    print(f"{folder}: {len(policy.rules)} rule(s) in {len(policy.files)} file(s), all "
          f"compiled and checked; {fallback} expression(s) fell back to the reference "
          "interpreter")
    width = max(len(r.name) for r in policy.rules)
    for point, rules in by_point.items():
        if not rules:
            continue
        print(f"{point}:")
        for r in rules:
            line = f"  {r.name:<{width}}  {r.mode:<7}  {Path(r.file).name}"
            if r.description:
                line += f"  {r.description}"
            print(line.rstrip())
    idle = [p for p, rules in by_point.items() if not rules]
    if idle:
        print(f"no rules at: {', '.join(idle)}")
    return 0


def cmd_test(args: argparse.Namespace) -> int:
    from the_loop.hooks.policy import PolicyError
    from the_loop.hooks.policy.testing import run_tests

    folder = policy_dir(args)
    try:
        report = run_tests(folder)
    except PolicyError as exc:
        if not args.json:
            raise  # exit 1, every error listed on stderr
        print_json({"folder": str(folder), "ok": False, "passed": 0, "failed": 0,
                    "errors": exc.errors, "cases": []})
        return 1
    if args.json:
        print_json(report.to_json())
        return 0 if report.ok else 1
    for r in report.results:
        print(f"{'PASS' if r.passed else 'FAIL'}  {Path(r.file).name}: {r.name}  ({r.point})")
        for problem in r.problems:
            print(f"      {problem}")
    for error in report.errors:
        print(f"ERROR {error}")
    if report.unexercised:
        print(f"note: no case exercised: {', '.join(report.unexercised)}")
    summary = f"{report.passed} passed, {report.failed} failed"
    if report.errors:
        summary += f", {len(report.errors)} test file error(s)"
    print(summary)
    return 0 if report.ok else 1
