"""Builds the argument parser from one visible table of commands and turns errors into exit codes.

Every top-level command is a row of `COMMANDS`: its name, the module of `the_loop.cli` whose
`register(sub)` adds its parser, and the line `the-loop --help` lists it with. A run imports
and builds only the module of the command on its line (argparse compiles patterns for every
parser it builds, and the modules import what they run); the others are one-line entries,
enough for the listing and for shell completion of command names. The subcommands of
`the-loop policy` are listed in `POLICY_SUBCOMMANDS`. A new command is one line in a table.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any, NamedTuple

from the_loop import __version__
from the_loop.cli.guard import call, unexpected
from the_loop.cli.helptext import decorate
from the_loop.interrupt import install as install_interrupt


class Command(NamedTuple):
    """One top-level command: `the_loop.cli.<module>.register` adds its parser."""

    name: str
    module: str
    help: str


#: Every top-level command, in the order `the-loop --help` lists them.
COMMANDS: tuple[Command, ...] = (
    Command("init", "init", "write a cli-config.yaml, example policies with tests, an example "
            "hook"),
    Command("hooks", "hooks", "the declared hooks, the catalog, dry runs"),
    Command("policy", "policy", "check, test and try policy folders; replay recorded points"),
    Command("items", "items", "tickets and pull requests in the local tracker"),
    Command("start", "loop", "arm a ticket or pull request (the poller starts it)"),
    Command("reply", "loop", "answer, comment or send /approve, /reject, /stop"),
    Command("poll", "loop", "the poller daemon: start armed items, read input"),
    Command("ask", "loop", "(inside a session) ask a person a question"),
    Command("graph", "loop", "(inside a session) the phase graph"),
    Command("serve", "serve", "the control plane: a JSON API, a tracker webhook and a "
            "read-only console in a browser (/console/)"),
    Command("state", "state", "the loop's database: migrate its schema, check it"),
    Command("events", "events", "the event log, readable (--json for machines)"),
    Command("demo", "demo", "run one work item end to end on the embedded default"),
    Command("completion", "completion", "print a shell completion script to source"),
)

#: The subcommands of `the-loop policy` (module, function); each `function(ps)` adds its
#: parser to `ps`.
POLICY_SUBCOMMANDS: tuple[tuple[str, str], ...] = (
    ("policy", "register_check"),  # policy check [DIR]
    ("policy", "register_test"),   # policy test [DIR]
    ("policy_eval", "register_eval"),  # policy eval DIR --point P [--context FILE|-] [--facts …]
    ("replay", "register"),        # policy replay [--since 7d] [--point P] … (cli/replay.py)
)

#: Every command's parser is built, as `completion` and the help tests need.
ALL = "*"

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


def build_parser(command: str = ALL) -> argparse.ArgumentParser:
    """The parser: `command`'s in full (every command's for ALL), the rest as one line each."""
    parser = _Parser(
        prog="the-loop",
        description="Deliver work items with agent sessions; attach hooks and policy to "
        "their lifecycle.",
    )
    parser.add_argument("--version", action="version", version=f"the-loop {__version__}")
    parser.add_argument("--config", metavar="PATH", help=CONFIG_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    modules = dict.fromkeys(c.module for c in COMMANDS if command in (ALL, c.name))
    for name in modules:
        _module(name).register(sub)
        if name == "policy":
            policy = sub.choices["policy"]
            ps = next(a for a in policy._actions if isinstance(a, argparse._SubParsersAction))
            for module, function in POLICY_SUBCOMMANDS:
                getattr(_module(module), function)(ps)
    built = dict(sub.choices)
    lines = {a.dest: a for a in sub._choices_actions}
    sub._choices_actions.clear()  # listed in table order, built or not
    sub._name_parser_map.clear()
    for c in COMMANDS:
        if c.name in built:
            sub._name_parser_map[c.name] = built[c.name]
            sub._choices_actions.append(lines[c.name])
        else:
            sub.add_parser(c.name, help=c.help)
    _config_everywhere(parser)
    for each in (parser, *_subparsers(parser)):
        decorate(each)  # defaults and an example in every --help
    return parser


def _module(name: str) -> Any:
    return importlib.import_module(f"the_loop.cli.{name}")


#: The options of `the-loop` itself that take a value (the command is the word after them).
_VALUED = ("--config",)


def command_word(argv: Sequence[str]) -> str:
    """The command named on a line of `the-loop` arguments ("" when there is none)."""
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in _VALUED:
            skip = True
        elif arg == "--":
            return ""
        elif not arg.startswith("-"):
            return arg
    return ""


def _completing() -> list[str]:
    """The words before the cursor when the shell asks for candidates (argcomplete)."""
    import shlex

    line = os.environ.get("COMP_LINE", "")[: int(os.environ.get("COMP_POINT", "0") or 0)]
    try:
        words = shlex.split(line)
    except ValueError:  # an open quote: the words so far
        words = line.split()
    if line and not line[-1].isspace() and words:
        words = words[:-1]  # the word being typed is not a command yet
    return words[1:]


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
    given = list(argv) if argv is not None else sys.argv[1:]
    if "_ARGCOMPLETE" in os.environ:  # a <Tab> in a shell that sourced `the-loop completion`
        import argcomplete

        # prints the candidates and exits
        argcomplete.autocomplete(build_parser(_known(command_word(_completing()))))
    parser = build_parser(_known(command_word(given)))
    for arg in given:
        _require_text(parser, arg)
    args = parser.parse_args(given)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    return call(func, args)


def _known(word: str) -> str:
    """`word` when it names a command, else "" (no command's parser is needed)."""
    return word if any(c.name == word for c in COMMANDS) else ""


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


def tophelp_module() -> str:
    """The text of `the_loop/cli/tophelp.py`: `the-loop --help` as this parser prints it at
    `TOPHELP_WIDTH` columns (tests/cli/test_startup_imports.py compares the two; rewrite
    it with `python -m the_loop.cli.app`)."""
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(TOPHELP_WIDTH)
    try:
        text = build_parser("").format_help()
    finally:
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved
    lines = "".join(f"    {line!r}\n" for line in text.splitlines(keepends=True))
    return TOPHELP_TEMPLATE.format(width=TOPHELP_WIDTH, lines=lines)


#: The width the static `--help` is written for: argparse's own when there is no terminal.
TOPHELP_WIDTH = 80

TOPHELP_TEMPLATE = '''"""`the-loop --help` at {width} columns, as the parser prints it.

Written by `python -m the_loop.cli.app` (do not edit): tests/cli/test_startup_imports.py
checks that it is the parser's output.

`the-loop --help`, `-h` and a bare `the-loop` print this when the help is {width} columns
wide (no terminal, or a terminal of {width}): no argparse imported, no parser built (issue
34: a command costs at most 3x a bare Python). At any other width the parser prints it.
"""

from __future__ import annotations

#: The terminal width TEXT was formatted for (argparse's own fallback without a terminal).
WIDTH = {width}


TEXT = (
{lines})
'''


__all__ = ["ALL", "COMMANDS", "build_parser", "command_word", "run", "unexpected"]


if __name__ == "__main__":
    import pathlib

    target = pathlib.Path(__file__).with_name("tophelp.py")
    target.write_text(tophelp_module(), encoding="utf-8")
    print(f"wrote {target}")
