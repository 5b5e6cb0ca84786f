"""Builds the argument parser from one visible table of commands and turns errors into exit codes.

Every command group is a module of `the_loop.cli` with a `register(sub)` function, listed in
`COMMANDS` below; the subcommands of `the-loop policy` are listed in `POLICY_SUBCOMMANDS`.
A new command is one line in one of these tables.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from the_loop import __version__
from the_loop.cli import (
    completion,
    demo,
    events,
    hooks,
    init,
    items,
    loop,
    policy,
    policy_eval,
    replay,
    serve,
    state,
)
from the_loop.cli.helptext import decorate
from the_loop.errors import LoopError, exception_line
from the_loop.interrupt import install as install_interrupt

Register = Callable[[Any], None]

#: Every top-level command group, in the order `the-loop --help` lists them.
COMMANDS: tuple[Register, ...] = (
    init.register,         # init [DIR]
    hooks.register,        # hooks, hooks points|run|schema|serve
    policy.register,       # policy check|test|eval|replay (subcommands below)
    items.register,        # items add|list|show|comment|label|close
    loop.register,         # start, reply, poll, ask, graph complete
    serve.register,        # serve (the control plane)
    state.register,        # state migrate|check (the loop's database)
    events.register,       # events
    demo.register,         # demo
    completion.register,   # completion bash|zsh|fish
)

#: The subcommands of `the-loop policy`; each `register(ps)` adds its parser to `ps`.
POLICY_SUBCOMMANDS: tuple[Register, ...] = (
    policy.register_check,  # policy check [DIR]
    policy.register_test,   # policy test [DIR]
    policy_eval.register_eval,  # policy eval DIR --point P [--context FILE|-] [--facts …]
    replay.register,        # policy replay [--since 7d] [--point P] … (cli/replay.py)
)

CONFIG_HELP = (
    "the cli-config.yaml to use; accepted anywhere on the line (default: "
    "$THE_LOOP_CLI_CONFIG, else ./cli-config.yaml, ./.the-loop/cli-config.yaml, "
    "~/.the-loop/cli-config.yaml)"
)


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
    parser.add_argument("--config", metavar="PATH", help=CONFIG_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for register in COMMANDS:
        register(sub)
    for register in POLICY_SUBCOMMANDS:
        register(policy.subcommands(sub))
    _config_everywhere(parser)
    for each in (parser, *_subparsers(parser)):
        decorate(each)  # defaults and an example in every --help
    return parser


def _subparsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    out: list[argparse.ArgumentParser] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):
                out.append(child)
                out.extend(_subparsers(child))
    return out


def _config_everywhere(parser: argparse.ArgumentParser) -> None:
    """`--config` on every subcommand too; given there, it wins over one given earlier."""
    for child in _subparsers(parser):
        if not any("--config" in a.option_strings for a in child._actions):
            child.add_argument("--config", metavar="PATH", default=argparse.SUPPRESS,
                               help=CONFIG_HELP)


def run(argv: Sequence[str] | None = None) -> int:
    install_interrupt()  # a real Ctrl-C is told apart from a hook's own KeyboardInterrupt
    parser = build_parser()
    if "_ARGCOMPLETE" in os.environ:  # a <Tab> in a shell that sourced `the-loop completion`
        import argcomplete

        argcomplete.autocomplete(parser)  # prints the candidates and exits
    given = list(argv) if argv is not None else sys.argv[1:]
    for arg in given:
        _require_text(parser, arg)
    args = parser.parse_args(given)
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
    except Exception as exc:  # the last guard: one line, never a traceback (issue 11 rule 7)
        print(f"the-loop: {unexpected(exc)}", file=sys.stderr)
        return 1


def _require_text(parser: argparse.ArgumentParser, arg: str) -> None:
    """A usage error for an argument that is not Unicode text: bytes the locale could not
    decode, which Python keeps as lone surrogates and no database, log or rule takes
    (issue 20, item 8)."""
    try:
        arg.encode("utf-8")
    except UnicodeEncodeError:
        try:
            raw = arg.encode("utf-8", "surrogateescape")  # the bytes the shell passed
        except UnicodeEncodeError:
            raw = arg.encode("utf-8", "backslashreplace")
        shown = raw.decode("ascii", "backslashreplace")
        parser.error(f"argument '{shown[:80]}' is not UTF-8 text; pass text in UTF-8 (check "
                     "the encoding of the terminal or script that wrote it)")


def unexpected(exc: Exception) -> str:
    """One line for an error no command turned into a `LoopError`.

    An OS error names the file and what the system said; anything else is a bug of ours,
    said plainly; `THE_LOOP_DEBUG=1` prints the traceback as well.
    """
    if os.environ.get("THE_LOOP_DEBUG"):
        traceback.print_exc()
    if isinstance(exc, OSError):
        where = f"{exc.filename}: " if exc.filename else ""
        return f"{where}{exc.strerror or exception_line(exc)}; check the path and its permissions"
    if isinstance(exc, MemoryError):
        return "out of memory; an input is too large (see docs/security.md)"
    return (
        f"unexpected error: {exception_line(exc)}. This is a bug in the-loop; run again with "
        "THE_LOOP_DEBUG=1 for the traceback and report it"
    )
