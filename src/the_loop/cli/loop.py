"""The loop's commands: start, reply, poll, ask, graph complete, serve, events."""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, Any

from the_loop.cli._common import add_json, config_of, print_json
from the_loop.errors import HooksConfigError, LoopError, UsageError

if TYPE_CHECKING:
    from the_loop.runtime.service import Loop


def register(sub: Any) -> None:
    s = sub.add_parser("start", help="arm a ticket or pull request (the poller starts it)")
    s.add_argument("ref")
    s.add_argument("--actor", default=os.environ.get("USER", "operator"), metavar="LOGIN")
    s.set_defaults(func=cmd_start)

    r = sub.add_parser("reply", help="answer, comment or send /approve, /reject, /stop")
    r.add_argument("ref")
    r.add_argument("text")
    r.add_argument("--actor", default=os.environ.get("USER", "operator"), metavar="LOGIN")
    r.set_defaults(func=cmd_reply)

    p = sub.add_parser("poll", help="the poller daemon: start armed items, read input")
    p.add_argument("--once", action="store_true", help="run one cycle and exit")
    p.add_argument("--interval", type=float, default=5.0, metavar="S")
    add_json(p)
    p.set_defaults(func=cmd_poll)

    a = sub.add_parser("ask", help="(inside a session) ask a person a question")
    a.add_argument("text")
    a.add_argument("--summary", default="")
    a.add_argument("--work-item", default="", metavar="REF")
    a.set_defaults(func=cmd_ask)

    g = sub.add_parser("graph", help="(inside a session) the phase graph")
    gs = g.add_subparsers(dest="graph_command", metavar="SUBCOMMAND", required=True)
    gc = gs.add_parser("complete", help="the agent's node is done: advance the graph")
    gc.add_argument("--work-item", default="", metavar="REF")
    gc.add_argument("--summary", default="")
    gc.set_defaults(func=cmd_graph_complete)


def _work_item(args: argparse.Namespace) -> str:
    ref = args.work_item or os.environ.get("THE_LOOP_WORK_ITEM", "")
    if not ref:
        raise UsageError("no work item: pass --work-item REF (inside a session "
                         "$THE_LOOP_WORK_ITEM is set)")
    return str(ref)


def one_shot(args: argparse.Namespace, source: str) -> Loop:
    """A loop for a one-shot command: hooks load on first use and degrade on error."""
    from the_loop.runtime.service import Loop

    return Loop(config_of(args), strict_hooks=False, source=source)


def daemon(args: argparse.Namespace, source: str) -> Loop:
    """A loop for a daemon: the hooks load now and a bad declaration refuses the start."""
    from the_loop.runtime.service import Loop

    loop = Loop(config_of(args), strict_hooks=True, source=source)
    try:
        _ = loop.chain
    except HooksConfigError as exc:
        loop.db.close()
        raise LoopError(f"refusing to start: {exc}") from None
    return loop


def cmd_start(args: argparse.Namespace) -> int:
    loop = one_shot(args, "start")
    try:
        ref = loop.tracker.resolve(args.ref)
        if loop.arm(ref, actor=args.actor, source="command"):
            print(f"{ref} armed; the poller starts it (`the-loop poll --once`)")
        else:
            state = (loop.work(ref) or {}).get("state", "")
            print(f"{ref} is already armed ({state})")
    finally:
        loop.close()
    return 0


def cmd_reply(args: argparse.Namespace) -> int:
    from the_loop.runtime.poller import reply

    loop = one_shot(args, "reply")
    try:
        done = reply(loop, args.ref, args.text, actor=args.actor)
    finally:
        loop.close()
    print(f"{loop.tracker.resolve(args.ref)}: {done}")
    return 0


def cmd_poll(args: argparse.Namespace) -> int:
    from the_loop.runtime.poller import poll_once, run_forever

    loop = daemon(args, "poll")
    try:
        if args.once:
            report = poll_once(loop)
            if args.json:
                print_json(report.to_json())
            else:
                print(f"started {len(report.started)}, inputs {report.inputs}, closed "
                      f"{len(report.closed)}, sessions ended {len(report.exited)}")
            return 0
        print(f"polling every {args.interval:g} s (Ctrl-C to stop)", flush=True)
        why = run_forever(loop, args.interval)
        print(f"poller stopped ({why})", file=sys.stderr)
        return 0
    finally:
        loop.db.close()


def cmd_ask(args: argparse.Namespace) -> int:
    loop = one_shot(args, "ask")
    try:
        question = loop.ask(_work_item(args), args.text, summary=args.summary,
                            session_id=os.environ.get("THE_LOOP_SESSION", ""))
    finally:
        loop.close()
    print(f"asked: {question}")
    return 0


def cmd_graph_complete(args: argparse.Namespace) -> int:
    loop = one_shot(args, "graph")
    try:
        node = loop.graph_complete(_work_item(args), summary=args.summary)
    finally:
        loop.close()
    print(f"advanced to {node}")
    return 0
