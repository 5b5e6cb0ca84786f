"""Helpers every command module shares: the config in effect, JSON output."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from the_loop.config import Config, find_config, read_config


def config_of(args: argparse.Namespace) -> Config:
    """The cli-config.yaml in effect for this invocation (an empty one when none exists)."""
    return read_config(find_config(getattr(args, "config", None)))


def completes_points(action: argparse.Action) -> None:
    """The shell completes `action` with the lifecycle points (argcomplete reads the
    action's `completer`; choices= would replace our did-you-mean error with argparse's)."""
    def point_names(**_: Any) -> tuple[str, ...]:
        from the_loop.hooks.points import POINTS

        return tuple(POINTS)

    setattr(action, "completer", point_names)  # noqa: B010 - argparse.Action has no such slot


def print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")


def add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON for machines")
