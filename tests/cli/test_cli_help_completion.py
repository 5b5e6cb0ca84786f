"""Every command's --help shows its defaults and one example; `the-loop completion` prints a
script generated from the parser, and the parser answers the shell (issue 15, item 9)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from the_loop.cli.app import _subparsers, build_parser
from the_loop.cli.helptext import EXAMPLES, command_of

PARSERS = [build_parser(), *_subparsers(build_parser())]


@pytest.mark.parametrize("parser", PARSERS, ids=lambda p: command_of(p) or "the-loop")
def test_every_command_help_ends_with_an_example_of_itself(
    parser: argparse.ArgumentParser,
) -> None:
    text = parser.format_help()
    example = EXAMPLES[command_of(parser)]
    assert text.rstrip().endswith(f"example:\n  {example}")
    assert example.split("|")[-1].strip().startswith("the-loop " + command_of(parser).split(
        " ")[0]) or command_of(parser) in ("", "graph")


@pytest.mark.parametrize("parser", PARSERS, ids=lambda p: command_of(p) or "the-loop")
def test_every_option_with_a_default_says_it_in_help(parser: argparse.ArgumentParser) -> None:
    text = " ".join(parser.format_help().split())
    for action in parser._actions:
        default = action.default
        if not action.option_strings or default in (None, False, "", [], argparse.SUPPRESS):
            continue
        if isinstance(action, argparse._HelpAction | argparse._VersionAction):
            continue
        assert "default" in (action.help or "").lower(), (command_of(parser), action.dest)
        if "%(default)" in (action.help or ""):
            assert f"(default: {default})" in text, (command_of(parser), action.dest)


@pytest.mark.parametrize("parser", PARSERS, ids=lambda p: command_of(p) or "the-loop")
def test_every_argument_says_what_it_is(parser: argparse.ArgumentParser) -> None:
    """No bare `ref` or `--summary` in a help page: each argument has a sentence."""
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction | argparse._VersionAction
                      | argparse._SubParsersAction):
            continue
        assert action.help and action.help != argparse.SUPPRESS, (
            command_of(parser), action.option_strings or action.dest)


def test_poll_help_shows_its_interval_default(run_cli: Any) -> None:
    done = run_cli("poll", "--help")
    assert "--interval S" in done.stdout and "(default: 5.0)" in done.stdout


@pytest.mark.parametrize("parser", PARSERS, ids=lambda p: command_of(p) or "the-loop")
def test_every_command_description_fits_a_terminal(parser: argparse.ArgumentParser) -> None:
    text = parser.format_help()
    description = parser.description or ""
    lines = [line for line in description.splitlines() if line in text]
    assert [line for line in lines if len(line) > 80] == []


@pytest.mark.parametrize(("argv", "names"), [
    (["serve"], ["/console/", "serve.tokens", "$THE_LOOP_SESSION_TOKEN", "GET /health"]),
    (["hooks", "serve"], ["GET /health", "GET /ready", "GET /metrics", "--decision-log",
                          "policy replay", "SIGHUP"]),
    (["policy", "replay"], ["a hook server's with --log", "one policy folder (--policy DIR)"]),
    (["start"], ["(default: $USER, else operator)"]),  # what an unset $USER arms as
])
def test_help_names_what_each_command_serves_reads_or_defaults_to(
    run_cli: Any, argv: list[str], names: list[str]
) -> None:
    done = run_cli(*argv, "--help")
    text = " ".join(done.stdout.split())  # argparse wraps lines where it likes
    assert [n for n in names if n not in text] == [], text


def test_the_installed_console_script_runs_the_cli() -> None:
    """The one run through the `the-loop` script pip installs (the rest call main())."""
    script = Path(sys.executable).parent / "the-loop"
    assert script.is_file(), f"{script} is missing: install the project (pip install -e .)"
    done = subprocess.run([str(script), "hooks", "points", "--point", "phase_changed"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "phase_changed" in done.stdout and "notify" in done.stdout


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_prints_a_script_for_each_shell(shell: str, run_cli: Any) -> None:
    done = run_cli("completion", shell)
    assert done.returncode == 0, done.stderr
    assert "the-loop" in done.stdout and "_ARGCOMPLETE" in done.stdout


@pytest.mark.parametrize(("line", "want"), [
    ("the-loop hooks r", ["run"]),
    ("the-loop policy test --m", ["--min-coverage"]),
    ("the-loop comp", ["completion"]),
    ("the-loop completion f", ["fish"]),
    ("the-loop hooks run w", ["work_item_start", "waiting_for_input", "work_item_complete"]),
    ("the-loop hooks run session_", ["session_spawn", "session_spawned"]),
    ("the-loop hooks points --point ph", ["phase_changed"]),
    ("the-loop policy replay --point input", ["input_received"]),
])
def test_the_shell_gets_candidates_from_the_parser(
    tmp_path: Path, line: str, want: list[str]
) -> None:
    out = tmp_path / "candidates"
    env = {**os.environ, "_ARGCOMPLETE": "1", "COMP_LINE": line, "COMP_POINT": str(len(line)),
           "_ARGCOMPLETE_IFS": "\n", "_ARGCOMPLETE_STDOUT_FILENAME": str(out)}
    done = subprocess.run([sys.executable, "-m", "the_loop"], env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert [c.strip() for c in out.read_text("utf-8").split("\n")] == want
