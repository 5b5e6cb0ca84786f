"""`the-loop hooks …`: list the declaration, show the catalog, dry-run a point (the declared
chain or one hook named on the command line), the schema."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from the_loop.cli._common import (
    CLI_NAMES,
    add_json,
    completes_points,
    config_of,
    print_json,
    require_path,
    with_arg,
)
from the_loop.cli.dryrun import (
    add_input_args,
    dry_context,
    dry_input,
    explained_of,
    print_outcome,
)
from the_loop.cli.serve_hooks import register_serve
from the_loop.errors import HooksConfigError, UsageError
from the_loop.events import EventLog
from the_loop.hooks.declaring.declaration import parse_hooks
from the_loop.hooks.declaring.loading import construct, load_executor
from the_loop.hooks.engine.chain import Chain, Link
from the_loop.hooks.engine.points import (
    POINTS,
    SPECS,
    WORK_ITEM_FIELDS,
    context_to_json,
    unknown_point_message,
)
from the_loop.hooks.executors.registry import default_points


def register(sub: Any) -> None:
    p = sub.add_parser("hooks", help="the declared hooks, the catalog, dry runs")
    add_json(p)
    p.set_defaults(func=cmd_list)
    hs = p.add_subparsers(dest="hooks_command", metavar="SUBCOMMAND")

    pp = hs.add_parser("points", help="the catalog of lifecycle points: facts and decisions")
    add_json(pp)
    completes_points(pp.add_argument("--point", metavar="P", help="one point only"))
    pp.set_defaults(func=cmd_points)

    pr = hs.add_parser("run", help="run the declared chain, or one hook, at one point on "
                                   "given fields")
    completes_points(pr.add_argument("point", metavar="POINT",
                                     help=f"the lifecycle point: {', '.join(POINTS)}"))
    one = pr.add_mutually_exclusive_group()
    one.add_argument("--policy", metavar="DIR", help="run this policy folder alone, with no "
                                                     "config")
    one.add_argument("--path", metavar="FILE", help="run the LifecycleHooks class of this .py "
                                                    "file alone, with no config")
    one.add_argument("--url", metavar="URL", help="call this hook server alone, with no config")
    one.add_argument("--command", nargs=argparse.REMAINDER, metavar="PROG ARG",
                     help="run this program as a command: hook alone, with no config (last "
                          "on the line: every word after it is the program's)")
    pr.add_argument("--with", dest="with_json", metavar="JSON", default="",
                    help="with --path: the class's constructor keyword arguments as a JSON "
                         "object, as with: gives them in cli-config.yaml")
    pr.add_argument("--token-env", metavar="VAR", default="",
                    help="with --url: the environment variable holding its bearer token")
    add_input_args(pr)
    add_json(pr)
    pr.set_defaults(func=cmd_run)

    ps = hs.add_parser("schema", help="the JSON Schema of cli-config.yaml (hooks, runtime keys)")
    ps.set_defaults(func=cmd_schema)

    register_serve(hs)


def cmd_list(args: argparse.Namespace) -> int:
    config = config_of(args)
    entries = parse_hooks(config.hooks, config.folder)
    if args.json:
        print_json({"config": str(config.path or ""), "hooks": [e.to_json() for e in entries]})
        return 0
    if config.path is None:
        print("no cli-config.yaml found (pass --config PATH, or run `the-loop init` to write "
              "./.the-loop/cli-config.yaml); no hooks declared")
        return 0
    if not entries:
        print(f"{config.path}: no hooks declared")
        return 0
    rows = [("NAME", "KIND", "TARGET", "POINTS", "REQUIRED", "ENABLED")]
    for e in entries:
        rows.append((
            e.name, e.kind, e.shown, ",".join(e.on) if e.on is not None else "(default)",
            "yes" if e.required else "no", "yes" if e.enabled else "no",
        ))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    print(f"{config.path}:")
    for r in rows:
        print("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return 0


def cmd_points(args: argparse.Namespace) -> int:
    if args.point is not None and args.point not in POINTS:
        raise UsageError(unknown_point_message(args.point))
    specs = [SPECS[args.point]] if args.point else list(SPECS.values())
    if args.json:
        data = [s.to_json() for s in specs]
        print_json(data[0] if args.point else data)
        return 0
    for s in specs:
        print(f"{s.name}  ({s.context.__name__})")
        print(f"  fires: {s.when}")
        print("  facts:")
        for f in s.facts:
            said = f.doc + (f" (one of: {', '.join(f.values)})" if f.values else "")
            if f.sent_by == "other-loop":
                said += " [sent only by the open-source the-loop]"
            print(f"    {f.name:<11} {f.type:<9} {said}")
            if f.type == "WorkItem":
                inner = ", ".join(f"{f.name}.{k}" for k in WORK_ITEM_FIELDS)
                print(f"    {'':<11} {'':<9} ({inner})")
        print("  decisions:")
        for d in s.decisions:
            print(f"    {d.name:<11} {d.type:<5} default {json.dumps(d.default):<6} {d.applied}")
        print()
    return 0


def one_hook_chain(args: argparse.Namespace) -> Chain | None:
    """The chain of the one hook --policy, --path, --url or --command names (None: use the
    config's)."""
    if args.token_env and not args.url:
        raise UsageError("--token-env names the token of a --url hook; pass --url URL too")
    if args.with_json and not args.path:
        raise UsageError("--with gives a class its constructor arguments; pass --path FILE too")
    if args.policy or args.path:
        option, value = ("--policy", args.policy) if args.policy else ("--path", args.path)
        require_path(args, value, f"{option} ", or_else="or leave it out to run the declared "
                                                        "chain")
        if args.policy:
            from the_loop.hooks.serving.hosted import policy_executor

            executor: Any = policy_executor(args.policy)
        else:
            executor = load_executor(path=args.path, module=None, names=CLI_NAMES,
                                     with_=with_arg(args.with_json))
        name = "policy" if args.policy else "path"
    elif args.url or args.command is not None:
        name = "url" if args.url else "command"
        entry: dict[str, Any] = {"name": name, name: args.url or args.command}
        if args.token_env:
            entry["tokenEnv"] = args.token_env
        try:  # as an entry of a config in the working directory would be
            executor = construct(parse_hooks([entry], Path.cwd())[0])
        except HooksConfigError as exc:
            option = "--token-env" if exc.key == "tokenEnv" else f"--{name}"
            raise UsageError(f"{option}: {exc.detail}") from None
    else:
        return None
    chain = Chain([Link(name, executor, frozenset(default_points(executor)))], log=EventLog())
    bind = getattr(executor, "bind_log", None)
    if bind is not None:
        bind(chain.log)
    return chain


def cmd_run(args: argparse.Namespace) -> int:
    from the_loop.hooks.declaring.loading import chain_from_config

    given = dry_input(args, args.point)  # before the config: a bad context is the answer
    chain = one_hook_chain(args)
    config = config_of(args) if chain is None else None
    ctx = dry_context(args.point, given, loop=config.loop if config is not None else "")
    # A dry run: the chain's events stay in memory, so the loop's event log never shows a
    # decision or refusal for a work item that does not exist.
    if chain is None:
        assert config is not None
        chain = chain_from_config(config, log=EventLog())
    outcome = chain.invoke(ctx)
    explained = explained_of(args, chain, outcome)
    if args.json:
        trace = [step.to_json() for step in outcome.steps]
        for item in trace:
            if item["hook"] in explained:
                item["explain"] = [t.to_json() for t in explained[item["hook"]]]
        print_json({"point": args.point, "context": context_to_json(outcome.context),
                    "trace": trace})
        return 0
    print_outcome(args, chain, outcome, explained)
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    from the_loop.config_schema import config_schema

    print_json(config_schema())
    return 0
