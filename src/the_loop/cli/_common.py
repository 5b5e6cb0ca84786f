"""Helpers every command module shares: the config in effect, JSON output."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from the_loop.config import Config, find_config, read_config
from the_loop.errors import LoopError, UsageError

if TYPE_CHECKING:  # `ask` and `graph complete` run without argparse (cli/quick.py)
    import argparse

#: The longest wait a duration flag takes (a day): past it a poller is not polling.
MAX_SECONDS = 86_400.0


def seconds(text: str, *, least: float = 0.0) -> float:
    """A duration flag's value: a finite number of seconds from `least` up to a day.

    `float()` alone takes "inf", "nan" and "-1", which a poller then spins on or crashes on.
    """
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (least <= value <= MAX_SECONDS):  # also refuses nan and inf
        import argparse

        raise argparse.ArgumentTypeError(
            f"expected a number of seconds from {least:g} up to {MAX_SECONDS:g} (e.g. 5 or "
            f"0.5), got {text!r}")
    return value


#: The shortest poll interval: anything shorter (0, 1e-300) is a busy loop writing a
#: poll.cycle event per round; the soak and the throughput benchmark poll at this rate.
MIN_INTERVAL = 0.05


def positive_seconds(text: str) -> float:
    """`seconds` for an interval, where 0 (or next to it) would be a busy loop."""
    return seconds(text, least=MIN_INTERVAL)


def config_of(args: argparse.Namespace) -> Config:
    """The cli-config.yaml in effect for this invocation (an empty one when none exists)."""
    return read_config(find_config(getattr(args, "config", None)))


def require_path(args: argparse.Namespace, value: str, option: str, *, or_else: str) -> None:
    """Raise `LoopError` when the path `value` named on the command line does not exist.

    A relative path resolves against the working directory, as any path on a command line
    does. When it is missing here but present beside the config in effect (`init` writes
    ./.the-loop/), the sentence names the path to pass (quoted for a shell) instead of a
    bare "no such file"; `or_else` is the other way out.
    """
    path = Path(value)
    if path.exists():
        return
    there: Path | None = None
    if not path.is_absolute():
        try:
            config = config_of(args)
        except LoopError:
            config = None
        if config is not None and config.path is not None and (config.folder / path).exists():
            there = config.folder / path
    if there is None:
        raise LoopError(f"{option}{value}: nothing at {path.absolute()} (a path on the command "
                        f"line is relative to the working directory); {or_else}")
    import shlex

    shown = shlex.quote(os.path.relpath(there))
    raise LoopError(
        f"{option}{value}: nothing at {path.absolute()}; paths on the command line resolve "
        f"against the working directory. Beside the config in effect it is {shown}: pass "
        f"{option}{shown}, or {or_else}"
    )


def completes_points(action: argparse.Action) -> None:
    """The shell completes `action` with the lifecycle points (argcomplete reads the
    action's `completer`; choices= would replace our did-you-mean error with argparse's)."""
    def point_names(**_: Any) -> tuple[str, ...]:
        from the_loop.hooks.engine.points import POINTS

        return tuple(POINTS)

    setattr(action, "completer", point_names)  # noqa: B010 - argparse.Action has no such slot


def print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")


def add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON for machines")


#: The options that name a hook class on the command line (`hooks serve`, `hooks run`).
CLI_NAMES = {"path": "--path", "module": "--module", "executor": "--executor", "with": "--with"}


def with_arg(text: str) -> dict[str, Any]:
    """--with JSON: a class's constructor keyword arguments (`hooks serve`, `hooks run`)."""
    try:
        with_ = json.loads(text or "{}")
    except ValueError as exc:
        raise UsageError(f"--with: not JSON ({exc}); pass an object like '{{\"team\": \"a\"}}'")
    if not isinstance(with_, dict) or not all(
        isinstance(k, str) and k.isidentifier() for k in with_
    ):
        raise UsageError(
            f"--with: expected a JSON object of constructor keyword arguments, got {text!r}"
        )
    return with_
