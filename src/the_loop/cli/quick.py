"""The agent's commands without argparse: `graph complete` and `ask`, run many times per work
item by the agent inside its session (issue 34: each costs at most 3x a bare Python's start).

`agent_args(argv)` reads the plain lines of those two commands — the full option names
(`--summary S` or `--summary=S`, `--work-item REF`, `--config PATH`, before or after the
command) and `ask`'s one question — into the namespace the parser would make, and returns
None for anything else: help, an abbreviated or unknown option, `--`, a value that starts
with `-`, text that is not UTF-8, a shell asking for completions. A None line goes to the
parser (cli/app.py), which says what is wrong as always. tests/cli/test_startup_imports.py
holds the two readings side by side over many lines.
"""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

#: Each command's words, its options (full names) and the parser's defaults.
_COMMANDS: dict[tuple[str, ...], tuple[tuple[str, ...], dict[str, object]]] = {
    ("ask",): (("--summary", "--work-item"), {"command": "ask", "summary": "",
                                              "work_item": ""}),
    ("graph", "complete"): (("--work-item", "--summary"), {
        "command": "graph", "graph_command": "complete", "summary": "", "work_item": ""}),
}


#: The function of cli/loop.py each command runs (the parser's `func`: cli.bound).
FUNCS = {"ask": "cmd_ask", "graph": "cmd_graph_complete"}


def agent_args(argv: Sequence[str]) -> SimpleNamespace | None:
    """The parsed line of `graph complete` or `ask`, as the parser would parse it but for
    the function it runs (`the_loop.cli.bound` adds it); None when the line is another
    command's, or not a plain one (the parser reads it then)."""
    if "_ARGCOMPLETE" in os.environ or not all(_text(a) for a in argv):
        return None
    config: str | None = None
    i = 0
    while i < len(argv) and argv[i].startswith("--config"):  # the top level's one option
        taken = _option(argv, i, ("--config",))
        if taken is None:
            return None
        config, i = taken[1], taken[2]
    for words, (options, defaults) in _COMMANDS.items():
        if tuple(argv[i:i + len(words)]) == words:
            return _read(argv[i + len(words):], options, dict(defaults), config)
    return None


def _read(rest: Sequence[str], options: tuple[str, ...], out: dict[str, object],
          config: str | None) -> SimpleNamespace | None:
    texts: list[str] = []
    i = 0
    while i < len(rest):
        if rest[i].startswith("-"):
            taken = _option(rest, i, (*options, "--config"))
            if taken is None:
                return None
            name, value, i = taken
            if name == "--config":
                config = value  # given after the command, it wins (as app._config_everywhere)
            else:
                out[name[2:].replace("-", "_")] = value
        else:
            texts.append(rest[i])
            i += 1
    if out["command"] == "ask":
        if len(texts) != 1:
            return None
        out["text"] = texts[0]
    elif texts:
        return None
    return SimpleNamespace(config=config, **out)


def _option(argv: Sequence[str], i: int, names: tuple[str, ...]
            ) -> tuple[str, str, int] | None:
    """`--name VALUE` or `--name=VALUE` at `argv[i]`, one of `names` spelled in full: the
    name, the value and the index after it; None for anything else."""
    name, eq, value = argv[i].partition("=")
    if name not in names:
        return None
    if eq:
        return name, value, i + 1
    if i + 1 >= len(argv) or argv[i + 1].startswith("-"):
        return None  # a missing value, or one the parser might read as an option
    return name, argv[i + 1], i + 2


def _text(arg: str) -> bool:
    try:
        arg.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
