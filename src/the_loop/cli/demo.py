"""`the-loop demo`: the main job on a fresh machine."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def register(sub: Any) -> None:
    d = sub.add_parser("demo", help="run one work item end to end on the embedded default")
    d.add_argument("--dir", default="", metavar="PATH",
                   help="where to write its cli-config.yaml and state (default: a fresh "
                   "./the-loop-demo folder)")
    d.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    from the_loop.demo.scenario import run_demo

    return run_demo(Path(args.dir).absolute() if args.dir else None)
