"""Command-line entry point: `main(argv) -> int`, one module per command group."""

from __future__ import annotations

from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    from the_loop.cli.app import run

    return run(argv)
