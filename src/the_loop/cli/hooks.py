"""`the-loop hooks …`: list the declaration, show the catalog, dry-run a point, the schema."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from the_loop import yamlsafe
from the_loop.cli._common import add_json, completes_points, config_of, print_json
from the_loop.cli.serve_hooks import register_serve
from the_loop.errors import UsageError
from the_loop.events import EventLog
from the_loop.hooks.declaring.declaration import parse_hooks
from the_loop.hooks.engine.points import (
    POINTS,
    SPECS,
    WORK_ITEM_FIELDS,
    context_from_json,
    context_to_json,
)
from the_loop.hooks.serving.wire import NotUnicode, read_json


def register(sub: Any) -> None:
    p = sub.add_parser("hooks", help="the declared hooks, the catalog, dry runs")
    add_json(p)
    p.set_defaults(func=cmd_list)
    hs = p.add_subparsers(dest="hooks_command", metavar="SUBCOMMAND")

    pp = hs.add_parser("points", help="the catalog of lifecycle points: facts and decisions")
    add_json(pp)
    completes_points(pp.add_argument("--point", metavar="P", help="one point only"))
    pp.set_defaults(func=cmd_points)

    pr = hs.add_parser("run", help="run the declared chain at one point on given fields")
    completes_points(pr.add_argument("point", metavar="POINT",
                                     help=f"the lifecycle point: {', '.join(POINTS)}"))
    pr.add_argument("--context", metavar="FILE|-",
                    help="a JSON object of the point's fields, from FILE or stdin (-); fields "
                         "left out take their defaults (default: an empty object)")
    pr.add_argument("--explain", action="store_true",
                    help="per policy rule: matched, not matched (the false part of `when` and "
                    "the fields it read) or failed; audit rules with what they would set")
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
            e.name, e.kind, e.target, ",".join(e.on) if e.on is not None else "(default)",
            "yes" if e.required else "no", "yes" if e.enabled else "no",
        ))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    print(f"{config.path}:")
    for r in rows:
        print("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return 0


def cmd_points(args: argparse.Namespace) -> int:
    if args.point is not None and args.point not in POINTS:
        from the_loop.hooks.engine.points import unknown_point_message

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
            print(f"    {f.name:<11} {f.type:<9} {f.doc}")
            if f.type == "WorkItem":
                inner = ", ".join(f"{f.name}.{k}" for k in WORK_ITEM_FIELDS)
                print(f"    {'':<11} {'':<9} ({inner})")
        print("  decisions:")
        for d in s.decisions:
            print(f"    {d.name:<11} {d.type:<5} default {json.dumps(d.default):<6} {d.applied}")
        print()
    return 0


def _read_context_arg(source: str | None) -> Any:
    if source is None:
        return {}
    try:
        text = _context_text(source)
    except OSError as exc:
        raise UsageError(f"--context {source}: cannot read: {exc.strerror}") from None
    try:
        return read_json(text) if text.strip() else {}
    except NotUnicode as exc:
        raise UsageError(f"--context {source}: the context {exc}") from None
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"--context {source}: not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None


def _context_text(source: str) -> str:
    """The --context file (a regular file) or standard input, bounded and UTF-8."""
    if source != "-":
        return yamlsafe.read_text(Path(source))
    limit = yamlsafe.MAX_BYTES
    data = sys.stdin.buffer.read(limit + 1)
    if len(data) > limit:
        raise yamlsafe.UnreadableError(f"more than {limit // (1024 * 1024)} MiB on standard "
                                       "input; a context is far smaller (is this the right "
                                       "input?)")
    return yamlsafe.decoded(data)


def cmd_run(args: argparse.Namespace) -> int:
    from the_loop.hooks.declaring.loading import chain_from_config
    from the_loop.hooks.engine.points import unknown_point_message

    if args.point not in POINTS:
        raise UsageError(unknown_point_message(args.point))
    data = _read_context_arg(args.context)
    config = config_of(args)
    if isinstance(data, dict) and "loop" not in data and config.loop:
        data = {**data, "loop": config.loop}  # the fact the loop itself would pass
    try:
        ctx = context_from_json(args.point, data)
    except ValueError as exc:
        raise UsageError(f"--context: {exc}") from None
    # A dry run: the chain's events stay in memory, so the loop's event log never shows a
    # decision or refusal for a work item that does not exist.
    chain = chain_from_config(config, log=EventLog())
    outcome = chain.invoke(ctx)
    final = context_to_json(outcome.context)
    trace = [step.to_json() for step in outcome.steps]
    explained = _explained(chain, outcome) if args.explain else {}
    for item in trace:
        if item["hook"] in explained:
            item["explain"] = [t.to_json() for t in explained[item["hook"]]]
    if args.json:
        print_json({"point": args.point, "context": final, "trace": trace})
        return 0
    names = chain.names(args.point)
    print(f"{args.point}: {len(names)} hook(s) run: {', '.join(names) or 'none'}")
    for step in outcome.steps:
        line = f"  {step.hook:<16} {step.status:<9} {step.ms:8.3f} ms"
        if step.changed:
            line += "  changed " + ", ".join(
                f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in step.changed.items()
            )
        if step.error:
            line += f"  error: {step.error}"
        if step.dropped:
            line += f"  ignored: {', '.join(step.dropped)}"
        rules = step.detail.get("rules")
        if rules:
            line += f"  rules: {', '.join(rules)}"
        audit = step.detail.get("audit")
        if audit:
            line += f"  audit rules matched: {', '.join(audit)}"
        print(line)
        for rule in explained.get(step.hook, ()):
            print(f"      {rule.text()}")
    print("final decisions:")
    for d in SPECS[args.point].decisions:
        print(f"  {d.name} = {json.dumps(final[d.name], ensure_ascii=False)}")
    return 0


def _explained(chain: Any, outcome: Any) -> dict[str, Any]:
    from the_loop.hooks.policy.explain import explain_chain

    return explain_chain(chain, outcome)


def cmd_schema(args: argparse.Namespace) -> int:
    from the_loop.config_schema import config_schema

    print_json(config_schema())
    return 0
