"""Command-line entry point: `main(argv) -> int`, one module per command group.

`the-loop --help`, `-h`, `--version` and a bare `the-loop` print without building a parser
when the help is formatted at the width it was written for (cli/tophelp.py, generated from
the parser); the plain lines of the agent's `graph complete` and `ask` are read without
argparse (cli/quick.py); every other line goes to the parser (cli/app.py).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from types import SimpleNamespace

#: The lines the top-level parser only answers with its own help (or version) text.
_HELP = (["-h"], ["--help"])


def main(argv: Sequence[str] | None = None) -> int:
    given = list(argv) if argv is not None else sys.argv[1:]
    if (given in _HELP or given == []) and "_ARGCOMPLETE" not in os.environ:
        from the_loop.cli import tophelp

        if _help_columns(tophelp.WIDTH) == tophelp.WIDTH:
            _write(tophelp.TEXT)
            if given:
                raise SystemExit(0)  # as argparse's --help action exits
            return 2  # no command: the help, as a usage error
    elif given == ["--version"]:
        from the_loop import __version__

        _write(f"the-loop {__version__}\n")
        raise SystemExit(0)
    door = os.environ.get("THE_LOOP_AGENT_DOOR", "")
    if door and given[:1] in (["ask"], ["graph"], ["--config"]) and "_ARGCOMPLETE" not in \
            os.environ:  # inside a session: the poller that launched it answers
        from the_loop import agentdoor

        try:
            answered = agentdoor.ask(door, given)
        except KeyboardInterrupt:
            sys.stderr.write("the-loop: interrupted\n")
            return 130
        if answered is not None:
            return answered
    from the_loop.cli.quick import agent_args

    args = agent_args(given)
    if args is not None:  # `graph complete` and `ask`, read without argparse
        from the_loop.cli.guard import call
        from the_loop.interrupt import install as install_interrupt

        install_interrupt()
        return call(bound(args).func, args)
    from the_loop.cli.app import run

    return run(given)


def bound(args: SimpleNamespace) -> SimpleNamespace:
    """A line `quick.agent_args` read, with the function its command runs, as the parser
    sets it."""
    from the_loop.cli import loop  # its commands import what they run (no argparse)
    from the_loop.cli.quick import FUNCS

    args.func = getattr(loop, FUNCS[args.command])
    return args


def _help_columns(fallback: int) -> int:
    """The width argparse formats help for: `shutil.get_terminal_size().columns` (COLUMNS,
    else the terminal of stdout, else `fallback`), without importing shutil."""
    try:
        width = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        width = 0
    if width <= 0:
        out = sys.__stdout__
        try:
            width = os.get_terminal_size(out.fileno()).columns if out is not None else 0
        except (AttributeError, ValueError, OSError):
            width = 0
        width = width or fallback
    return width


def _write(text: str) -> None:
    """Print as argparse prints help: to stdout, a closed or missing stdout ignored."""
    try:
        sys.stdout.write(text)
    except (AttributeError, OSError):
        return
