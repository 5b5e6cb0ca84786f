"""What every command's `--help` shows beyond its arguments: the defaults, and one example.

`decorate(parser)` walks the whole parser tree once it is built: each option with a
default worth saying gets "(default: …)", and each command an `example:` epilog from
`EXAMPLES` (keyed by the command's words after `the-loop`). A command without an example
fails the test that walks the tree, so a new command comes with one.
"""

from __future__ import annotations

import argparse
import textwrap

EXAMPLES: dict[str, str] = {
    "": "the-loop init && the-loop policy test --coverage",
    "init": "the-loop init ops/loop",
    "hooks": "the-loop hooks --config ops/cli-config.yaml",
    "hooks points": "the-loop hooks points --point session_spawn",
    "hooks run": "echo '{\"labels\": [\"wip\"]}' | the-loop hooks run work_item_start "
                 "--context - --explain",
    "hooks schema": "the-loop hooks schema > ~/.the-loop/cli-config.schema.json",
    "hooks serve": "the-loop hooks serve --declared --port 8765",
    "policy": "the-loop policy test --min-coverage 100",
    "policy check": "the-loop policy check policies --json",
    "policy test": "the-loop policy test --coverage --explain",
    "policy eval": "the-loop policy eval policies --point work_item_start --facts "
                   "actor=alice work_item=github:acme/app#12 --explain",
    "policy replay": "the-loop policy replay --since 7d --fail-on-change",
    "items": "the-loop items add 'Fix the login page' --label loop",
    "items add": "the-loop items add 'Fix the login page' --label loop",
    "items list": "the-loop items list --state open --json",
    "items show": "the-loop items show 1",
    "items comment": "the-loop items comment 1 'Looks good' --author alice",
    "items label": "the-loop items label 1 quiet --remove",
    "items close": "the-loop items close 1 --actor alice",
    "start": "the-loop start local:acme/app#1",
    "reply": "the-loop reply 1 /approve --actor alice",
    "poll": "the-loop poll --once",
    "state": "the-loop state check",
    "state migrate": "the-loop state migrate",
    "state check": "the-loop state check --max-skew 1",
    "ask": "the-loop ask 'Which database should the migration target?'",
    "graph": "the-loop graph complete --summary 'design written'",
    "graph complete": "the-loop graph complete --summary 'design written'",
    "serve": "the-loop serve --port 8700 --token-env LOOP_TOKEN",
    "events": "the-loop events --follow --event 'hooks.*'",
    "demo": "the-loop demo --dir /tmp/loop-demo",
    "completion": "the-loop completion bash > ~/.local/share/bash-completion/completions/"
                  "the-loop",
}

def _worth_saying(default: object) -> bool:
    if default is None or default is False or default is argparse.SUPPRESS:
        return False
    return not (default == "" or default == [])


def command_of(parser: argparse.ArgumentParser) -> str:
    """`hooks run` for the parser of `the-loop hooks run`."""
    return parser.prog.removeprefix("the-loop").strip()


def decorate(parser: argparse.ArgumentParser) -> None:
    """Defaults into each option's help, an example under each command."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    if parser.description and "\n" not in parser.description:  # raw: wrapped here, once
        parser.description = textwrap.fill(parser.description, 79)
    example = EXAMPLES.get(command_of(parser))
    if example and not parser.epilog:
        parser.epilog = f"example:\n  {example}"
    for action in parser._actions:
        if action.help == argparse.SUPPRESS or not action.option_strings:
            continue
        if isinstance(action, argparse._VersionAction | argparse._HelpAction):
            continue
        if not _worth_saying(action.default):
            continue
        help_text = action.help or ""
        if "default" not in help_text.lower():
            action.help = (help_text + " (default: %(default)s)").strip()
