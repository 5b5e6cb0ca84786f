"""A command imports only what it runs (issue 34, item 1): read from `python -X importtime`,
never timed. benchmarks/startup.py measures the CPU the same commands cost."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

#: Imported by none of `--help`, `graph complete` and `ask` on a loop that declares no hook:
#: the hooks engine's loader, executors, serving stack and policy language, the console,
#: and the heavy libraries they use.
HEAVY = ("psycopg", "psycopg_pool", "uvloop", "httptools", "jinja2", "prometheus_client",
         "jmespath", "argcomplete", "the_loop.jmes", "the_loop.hooks.policy",
         "the_loop.hooks.declaring", "the_loop.hooks.executors", "the_loop.hooks.serving",
         "the_loop.hooks.engine", "the_loop.console", "the_loop.cli.hooks",
         "the_loop.cli.policy", "the_loop.runtime.decisionlog", "the_loop.runtime.channels",
         "urllib.request", "http.client")

#: `--help` lists the commands from app.COMMANDS and reads no config nor database.
NOT_FOR_HELP = ("yaml", "sqlite3", "the_loop.runtime", "the_loop.config", "the_loop.cli.loop")

#: Modules a command may import beyond the bare interpreter's (`python -c pass`). The main
#: commit before issue 34 imported 259 for `ask`; now 167 (argparse, yaml, sqlite3, json,
#: dataclasses, pathlib and the runtime's own modules).
BUDGET = {"--help": 70, "graph complete": 150, "ask": 150}

CONFIG = """\
loop: acme
stateDir: .the-loop
tracker: {kind: local, repository: acme/app}
harness: idle
harnesses:
  - {name: idle, command: ["true"]}
"""


def imported(argv: list[str], env: dict[str, str], cwd: Path) -> list[str]:
    """The modules a real `python -X importtime` process of `argv` imported, in order."""
    done = subprocess.run([sys.executable, "-X", "importtime", *argv], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return [line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines()
            if line.startswith("import time:") and "|" in line][1:]  # the header line


def under(modules: list[str], roots: tuple[str, ...]) -> list[str]:
    return [m for m in modules if any(m == r or m.startswith(r + ".") for r in roots)]


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], Path]:
    """A local loop with one item at its first agent node, and a session's environment."""
    root = tmp_path_factory.mktemp("startup")
    config = root / "cli-config.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("THE_LOOP_")}
    env["HOME"] = str(root)
    for args in (["items", "add", "Bench"], ["start", "1", "--actor", "alice"],
                 ["poll", "--once"]):
        subprocess.run([sys.executable, "-m", "the_loop", "--config", str(config), *args],
                       env=env, cwd=root, capture_output=True, check=True, timeout=60)
    env.update(THE_LOOP_CLI_CONFIG=str(config), THE_LOOP_WORK_ITEM="local:acme/app#1")
    return env, root


@pytest.mark.parametrize(("name", "argv"), [
    ("--help", ["--help"]),
    ("graph complete", ["graph", "complete", "--summary", "ok"]),
    ("ask", ["ask", "Which database?"]),
])
def test_agent_commands_and_help_import_neither_the_hooks_engine_nor_heavy_libraries(
    session: Any, name: str, argv: list[str]
) -> None:
    env, root = session
    bare = imported(["-c", "pass"], env, root)
    modules = imported(["-m", "the_loop", *argv], env, root)
    assert under(modules, HEAVY) == []
    if name == "--help":
        assert under(modules, NOT_FOR_HELP) == []
    extra = [m for m in modules if m not in bare]
    assert len(extra) <= BUDGET[name], f"{len(extra)} modules: {extra}"


def test_a_command_builds_only_its_own_parser() -> None:
    """`the-loop graph complete` builds the `loop` commands' parsers; every other command is
    a line of the listing, with no arguments of its own."""
    from the_loop.cli.app import build_parser, command_word

    assert command_word(["--config", "x.yaml", "graph", "complete"]) == "graph"
    parser = build_parser("graph")
    sub = next(a for a in parser._actions if a.dest == "command")
    assert sub.choices is not None
    full = {n for n, p in sub.choices.items() if len(p._actions) > 2}  # beyond -h, --config
    assert full == {"start", "reply", "poll", "ask", "graph"}
