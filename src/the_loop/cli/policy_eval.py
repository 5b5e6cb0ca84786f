"""`the-loop policy eval DIR --point P`: run one policy folder on one context with no config;
prints the decisions and the rules that matched (exit 1 when the policy fails on it)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from the_loop.cli._common import add_json, completes_points, print_json
from the_loop.cli.dryrun import (
    add_input_args,
    dry_context,
    dry_input,
    explained_of,
    print_outcome,
)
from the_loop.errors import LoopError, UsageError
from the_loop.events import EventLog
from the_loop.hooks.engine.chain import Chain, Link
from the_loop.hooks.engine.points import POINTS, SPECS, context_to_json, unknown_point_message
from the_loop.util import shown_path


def register_eval(ps: Any) -> None:
    pe = ps.add_parser("eval", help="run one policy folder on one context, with no config")
    pe.add_argument("dir", metavar="DIR", help="the policy folder (a folder of rule files)")
    completes_points(pe.add_argument("--point", metavar="P", required=True,
                                     help=f"the lifecycle point: {', '.join(POINTS)}"))
    add_input_args(pe)
    add_json(pe)
    pe.set_defaults(func=cmd_eval)


def _policy_chain(folder: str) -> Chain:
    from the_loop.hooks.serving.hosted import policy_executor

    path = Path(folder)
    if not path.exists():
        raise LoopError(f"{folder}: nothing at {path.absolute()} (a path on the command line "
                        "is relative to the working directory); pass the folder holding the "
                        "rule files")
    if not path.is_dir():
        raise LoopError(f"{folder}: not a folder; pass the folder holding the rule files, "
                        f"not one file (e.g. {shown_path(path.parent)})")
    executor = policy_executor(folder)
    chain = Chain([Link("policy", executor, frozenset(executor.points()))], log=EventLog())
    executor.bind_log(chain.log)
    return chain


def cmd_eval(args: argparse.Namespace) -> int:
    if args.point not in POINTS:
        raise UsageError(f"--point: {unknown_point_message(args.point)}")
    ctx = dry_context(args.point, dry_input(args, args.point))
    chain = _policy_chain(args.dir)
    outcome = chain.invoke(ctx)
    explained = explained_of(args, chain, outcome)
    step = outcome.steps[0] if outcome.steps else None
    error = step.error if step is not None else ""
    if args.json:
        final = context_to_json(outcome.context)
        doc: dict[str, Any] = {
            "folder": str(args.dir), "point": args.point, "ok": not error,
            "decisions": {d.name: final[d.name] for d in SPECS[args.point].decisions},
            "rules": list(step.detail.get("rules", [])) if step is not None else [],
            "audit": list(step.detail.get("audit", [])) if step is not None else [],
            "error": error or None,
        }
        if args.explain:
            doc["explain"] = [t.to_json() for t in explained.get("policy", ())]
        print_json(doc)
    else:
        if step is None:
            print(f"{args.point}: no rule of {args.dir} is at this point; the decisions keep "
                  "their incoming values")
        print_outcome(args, chain, outcome, explained)
    return 1 if error else 0


__all__ = ["cmd_eval", "register_eval"]
