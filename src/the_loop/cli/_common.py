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


def print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, ensure_ascii=False)
    sys.stdout.write("\n")


def add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON for machines")
