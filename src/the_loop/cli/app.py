"""Builds the argument parser from the command modules and turns errors into exit codes."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence

from the_loop import __version__
from the_loop.errors import LoopError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="the-loop",
        description="Deliver work items with agent sessions; attach hooks and policy to "
        "their lifecycle.",
    )
    parser.add_argument("--version", action="version", version=f"the-loop {__version__}")
    parser.add_argument(
        "--config", metavar="PATH",
        help="cli-config.yaml (default: $THE_LOOP_CLI_CONFIG, ./.the-loop/cli-config.yaml, "
        "~/.the-loop/cli-config.yaml)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    import the_loop.cli as pkg

    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        if info.name.startswith("_") or info.name == "app":
            continue
        module = importlib.import_module(f"the_loop.cli.{info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(sub)
    return parser


def run(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(list(argv) if argv is not None else None)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        code: int = func(args)
        return code
    except LoopError as exc:
        print(f"the-loop: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("the-loop: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 1
