"""Shared test fixtures, small and generic: write a cli-config.yaml, run the CLI for real."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

# The shared helpers (runtime_helpers, serving_helpers, fault_helpers, any_loop_data) live
# here, beside this file; the tests live in folders that mirror the package.
sys.path.insert(0, str(Path(__file__).resolve().parent))

if TYPE_CHECKING:
    from runtime_helpers import LoopDir

CliRun = Callable[..., "subprocess.CompletedProcess[str]"]


@pytest.fixture
def write_config(tmp_path: Path) -> Callable[..., Path]:
    """`write_config(text, folder=tmp_path)` writes a dedented cli-config.yaml; returns its path."""

    def write(text: str, folder: Path | None = None, name: str = "cli-config.yaml") -> Path:
        where = folder if folder is not None else tmp_path
        where.mkdir(parents=True, exist_ok=True)
        path = where / name
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        return path

    return write


@pytest.fixture
def run_cli(tmp_path: Path) -> CliRun:
    """`run_cli(*args, cwd=, stdin=, env=)`: `python -m the_loop ARGS` in a fresh interpreter.

    The environment carries no $THE_LOOP_CLI_CONFIG and HOME is an empty folder, so only
    what the test passes is read. Never raises on a non-zero exit.
    """
    home = tmp_path / "_home"
    home.mkdir(exist_ok=True)

    def run(
        *args: str, cwd: Path | None = None, stdin: str = "", env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        full = {k: v for k, v in os.environ.items() if k != "THE_LOOP_CLI_CONFIG"}
        full["HOME"] = str(home)
        full.update(env or {})
        return subprocess.run(
            [sys.executable, "-m", "the_loop", *args], cwd=cwd or tmp_path, input=stdin,
            text=True, capture_output=True, env=full, timeout=60, check=False,
        )

    return run


@pytest.fixture
def ld(tmp_path: Path) -> Iterator[LoopDir]:
    """A loop's folder (config, stateDir, harness) whose processes are cleaned up after."""
    from runtime_helpers import LoopDir

    with LoopDir(tmp_path) as d:
        yield d
