"""`the-loop policy eval DIR --point P`: run one policy folder on one context with no config;
prints the decisions and the rules that matched (exit 1 when the policy fails on it).

When a rule fails at run time the policy's answer is no answer: eval says so, shows the
decisions as a chain applies them with the entry not required (the failure is recorded and
the policy skipped: the incoming values) and with `required: true` (the chain's refusal at a
point with `proceed`; nothing more elsewhere), so neither reads as the policy's decision."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from the_loop.cli._common import add_json, completes_points, print_json
from the_loop.cli.dryrun import (
    add_input_args,
    dry_context,
    dry_input,
    explained_of,
    print_decisions,
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
    given = dry_input(args, args.point)
    chain = _policy_chain(args.dir)
    outcome = chain.invoke(dry_context(args.point, given))
    explained = explained_of(args, chain, outcome)
    step = outcome.steps[0] if outcome.steps else None
    error = step.error if step is not None else ""
    required = _as_required(chain).run(dry_context(args.point, given)) if error else None
    if args.json:
        doc: dict[str, Any] = {
            "folder": str(args.dir), "point": args.point, "ok": not error,
            "decisions": _decisions(outcome.context),
            "rules": list(step.detail.get("rules", [])) if step is not None else [],
            "audit": list(step.detail.get("audit", [])) if step is not None else [],
            "error": error or None,
        }
        if required is not None:
            doc["failed_rule"] = _failed_rule(error) or None
            doc["decisions_if_required"] = _decisions(required)
        if args.explain:
            doc["explain"] = [t.to_json() for t in explained.get("policy", ())]
        print_json(doc)
    elif required is not None:
        failed = _failed_rule(error)
        print_outcome(args, chain, outcome, explained,
                      heading=f"{f'rule {failed!r}' if failed else 'the policy'} FAILED at "
                              f"{args.point}, so the policy decided nothing. Not required "
                              "(the default), the chain records the failure and skips the "
                              "policy: the decisions keep their incoming values:")
        refuses = "proceed" in SPECS[args.point].context.decisions()
        print("With required: true, the chain refuses:" if refuses else
              f"With required: true, nothing more ({args.point} has no proceed to refuse): "
              "the failure is recorded:")
        print_decisions(required, full=args.full)
    else:
        if step is None:
            print(f"{args.point}: no rule of {args.dir} is at this point; the decisions keep "
                  "their incoming values")
        print_outcome(args, chain, outcome, explained)
    return 1 if error else 0


def _as_required(chain: Chain) -> Chain:
    """The same policy as a `required: true` entry (what the chain does when it fails)."""
    return Chain([Link(link.name, link.executor, link.points, required=True)
                  for link in chain.links], log=EventLog())


def _failed_rule(error: str) -> str:
    """The rule a policy's run-time error names (`policy rule 'x' (file) → …`), or ""."""
    m = re.match(r"policy rule '((?:[^'\\]|\\.)*)'", error)
    return m.group(1) if m else ""


def _decisions(ctx: Any) -> dict[str, Any]:
    final = context_to_json(ctx)
    return {d.name: final[d.name] for d in SPECS[ctx.POINT].decisions}


__all__ = ["cmd_eval", "register_eval"]
