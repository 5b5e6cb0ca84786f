"""A command imports only what it runs (issue 34, item 3): read from `python -X importtime`,
never timed. benchmarks/startup.py measures the CPU the same commands cost.

The agent's commands run in the environment a real session's harness was given (the
fixture's harness writes it down), as an agent runs them: with the snapshot of the config
the loop parsed at the launch (config.py), and read without argparse (cli/quick.py).
`--help` prints the text generated from the parser (cli/tophelp.py).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
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

#: Not imported by a session's `graph complete` and `ask`: PyYAML (the config is the
#: launch's snapshot), argparse and what formatting help pulls in, the parser's table,
#: subprocess (they launch nothing).
NOT_FOR_AGENT = ("yaml", "the_loop.yamlsafe", "argparse", "gettext", "locale", "shutil",
                 "textwrap", "the_loop.cli.app", "the_loop.cli.helptext", "subprocess")

#: `--help` prints cli/tophelp.py: nothing of the loop, no argparse, no re, no json.
NOT_FOR_HELP = ("yaml", "sqlite3", "argparse", "re", "json", "typing", "the_loop.runtime",
                "the_loop.config", "the_loop.errors", "the_loop.cli.app", "the_loop.cli.loop")

#: Not imported by a session's `graph complete` and `ask` either: `dataclasses` and what it
#: pulls in (inspect, ast, dis, tokenize, linecache), with the methods it would generate for
#: each record class of the runtime at every start (the runtime's records are plain classes).
NO_DATACLASSES = ("dataclasses", "inspect", "ast", "dis", "tokenize", "linecache")

#: Not imported by `ask`: OpenSSL (hashlib), loaded where a digest is made; `graph complete`
#: makes one (the agent's login it records the completion as).
NOT_FOR_ASK = ("hashlib", "_hashlib")

#: Modules a command may import beyond the bare interpreter's (`python -c pass`). The main
#: commit before issue 34 imported 259 for `ask`, then 167, then 106 (dataclasses among
#: them) before the runtime's records were plain classes; now 91 for `graph complete` and
#: 88 for `ask` (sqlite3, json, re, typing, pathlib, hashlib for graph complete, and the
#: runtime's own modules). `--help`: 22, all but three of them `python -m`'s own (runpy,
#: importlib.util, contextlib).
BUDGET = {"--help": 25, "graph complete": 94, "ask": 91}

CONFIG = """\
loop: acme
stateDir: .the-loop
tracker: {kind: local, repository: acme/app}
harness: writes-env
harnesses:
  - name: writes-env
    command: [PYTHON, "-c", "import json, os, sys; json.dump(dict(os.environ), open(sys.argv[1], 'w'))", OUT]
"""  # noqa: E501 - one harness line


def imported(argv: list[str], env: dict[str, str], cwd: Path) -> list[str]:
    """The modules a real `python -X importtime` process of `argv` imported, in order."""
    done = subprocess.run([sys.executable, "-X", "importtime", *argv], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return [line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines()
            if line.startswith("import time:") and "|" in line][1:]  # the header line


def under(modules: list[str], roots: tuple[str, ...]) -> list[str]:
    return [m for m in modules if any(m == r or m.startswith(r + ".") for r in roots)]


def cli(env: dict[str, str], cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "the_loop", *argv], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=60, check=False)


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], Path]:
    """A local loop with one item at its first agent node, and the environment its
    session's harness was given."""
    root = tmp_path_factory.mktemp("startup")
    config = root / "cli-config.yaml"
    seen = root / "session-env.json"
    config.write_text(CONFIG.replace("PYTHON", json.dumps(sys.executable))
                      .replace("OUT", json.dumps(str(seen))), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("THE_LOOP_")}
    env["HOME"] = str(root)
    for args in (["items", "add", "Bench"], ["start", "1", "--actor", "alice"],
                 ["poll", "--once"]):
        subprocess.run([sys.executable, "-m", "the_loop", "--config", str(config), *args],
                       env=env, cwd=root, capture_output=True, check=True, timeout=60)
    deadline = time.monotonic() + 60
    while not seen.is_file() or not seen.read_text(encoding="utf-8").endswith("}"):
        assert time.monotonic() < deadline, "the harness did not write its environment"
        time.sleep(0.05)
    return json.loads(seen.read_text(encoding="utf-8")), root


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
    else:
        assert under(modules, NOT_FOR_AGENT) == []
        assert "the_loop.runtime.service" in modules  # it did its work
    extra = [m for m in modules if m not in bare]
    assert len(extra) <= BUDGET[name], f"{len(extra)} modules: {extra}"


@pytest.mark.parametrize(("name", "argv"), [
    ("graph complete", ["graph", "complete", "--summary", "ok"]),
    ("ask", ["ask", "Which database?"]),
])
def test_agent_commands_import_no_dataclasses_and_ask_no_openssl(
    session: Any, name: str, argv: list[str]
) -> None:
    env, root = session
    modules = imported(["-m", "the_loop", *argv], env, root)
    assert "the_loop.runtime.service" in modules  # it did its work
    assert under(modules, NO_DATACLASSES) == []
    if name == "ask":
        assert under(modules, NOT_FOR_ASK) == []


#: Imported by neither agent command when the poller's door answers it (the_loop/agentdoor.py):
#: no database, no config reading, no runtime, no JSON, no typing.
NOT_THROUGH_THE_DOOR = ("sqlite3", "yaml", "json", "re", "typing", "pathlib", "argparse",
                        "the_loop.runtime", "the_loop.config", "the_loop.cli.loop",
                        "the_loop.cli.quick")
#: Modules a command answered through the door may import beyond a bare Python's: socket
#: and what it pulls in (enum, selectors, array…), runpy's, the_loop.cli, the client.
DOOR_BUDGET = 30


@pytest.mark.parametrize(("name", "argv", "said"), [
    ("graph complete", ["graph", "complete", "--summary", "ok"], "requirements done; the loop"),
    ("ask", ["ask", "Which database?"], "asked: the loop posts your question on"),
])
def test_agent_commands_answered_by_the_pollers_door_import_no_database_nor_config(
    session: Any, name: str, argv: list[str], said: str
) -> None:
    """Inside a session of a running poller, the two commands send their line to its door
    and print its answer: their process imports a socket, not the loop."""
    from the_loop.cli.door import Door
    from the_loop.cli.loop import ask_line, complete_line
    from the_loop.cli.quick import agent_args

    env, root = session
    door = Door.open(Path(env["THE_LOOP_CLI_CONFIG"]), {"ask": ask_line, "graph": complete_line},
                     agent_args)
    assert door is not None
    try:
        through = {**env, "THE_LOOP_AGENT_DOOR": door.path}
        bare = imported(["-c", "pass"], env, root)
        modules = imported(["-m", "the_loop", *argv], through, root)
        done = cli(through, root, *argv)
    finally:
        door.close()
    assert done.returncode == 0 and done.stdout.startswith(said), done.stderr
    assert door.answered == 2  # both runs were answered there, not as one-shots
    assert under(modules, NOT_THROUGH_THE_DOOR) == []
    extra = [m for m in modules if m not in bare]
    assert len(extra) <= DOOR_BUDGET, f"{len(extra)} modules: {extra}"


def test_the_session_is_given_a_snapshot_of_the_config_holding_no_secret(session: Any) -> None:
    """Mode 0600, beside the session's log; the config's data, not the session's token."""
    env, _ = session
    snapshot = Path(env["THE_LOOP_CONFIG_SNAPSHOT"])
    assert snapshot.parent.name == "sessions"
    assert snapshot.name == env["THE_LOOP_SESSION"] + ".config.json"
    assert stat.S_IMODE(snapshot.stat().st_mode) == 0o600
    text = snapshot.read_text(encoding="utf-8")
    assert env["THE_LOOP_SESSION_TOKEN"] not in text
    assert json.loads(text)["data"]["loop"] == "acme"


def test_a_config_edited_after_the_launch_is_read_again_by_the_sessions_commands(
    tmp_path: Path, session: Any
) -> None:
    """The snapshot stands for the file only while it is the file the loop read: after an
    edit, `graph complete` reads the YAML and says what is wrong with it."""
    env, root = session
    config = Path(env["THE_LOOP_CLI_CONFIG"])
    before = config.read_text(encoding="utf-8")
    try:
        config.write_text(before + "hookz: []\n", encoding="utf-8")
        done = cli(env, root, "graph", "complete", "--summary", "ok")
        assert done.returncode != 0
        assert done.stderr.startswith(f"the-loop: {config}: unknown top-level key 'hookz' "
                                      "(did you mean 'hooks'?)"), done.stderr
        assert "Traceback" not in done.stderr
    finally:
        config.write_text(before, encoding="utf-8")


def test_a_snapshot_json_cannot_hold_as_it_is_is_not_written(tmp_path: Path) -> None:
    from the_loop.config import Config, read_config, write_snapshot

    path = tmp_path / "cli-config.yaml"
    path.write_text("loop: a\nharnesses: [{name: x, command: [x], env: {1: one}}]\n",
                    encoding="utf-8")
    config = read_config(path)
    assert write_snapshot(config, tmp_path / "s" / "one.json") == ""  # 1 would come back "1"
    assert not (tmp_path / "s" / "one.json").exists()
    assert write_snapshot(Config(path, {"loop": "a"}), tmp_path / "two.json") == ""  # unread
    path.write_text("loop: a\n", encoding="utf-8")
    written = write_snapshot(read_config(path), tmp_path / "s" / "three.json")
    assert written == str(tmp_path / "s" / "three.json")


def test_help_is_the_parsers_at_its_width_and_at_any_other(tmp_path: Path) -> None:
    """cli/tophelp.py is what `python -m the_loop.cli.app` writes now; `the-loop --help`,
    `-h` and a bare `the-loop` print the parser's text, from there at 80 columns and from
    the parser at 100."""
    from the_loop.cli import app, tophelp

    assert Path(tophelp.__file__).read_text(encoding="utf-8") == app.tophelp_module(), (
        "cli/tophelp.py is stale: run `python -m the_loop.cli.app`")
    env = {k: v for k, v in os.environ.items() if not k.startswith("THE_LOOP_")}
    for width in ("80", "100"):
        env["COLUMNS"] = width
        os.environ["COLUMNS"] = width
        try:
            want = app.build_parser("").format_help()
        finally:
            del os.environ["COLUMNS"]
        for argv, code in ((["--help"], 0), (["-h"], 0), ([], 2)):
            done = cli(env, tmp_path, *argv)
            assert (done.returncode, done.stdout, done.stderr) == (code, want, ""), argv
    done = cli(env, tmp_path, "--version")
    from the_loop import __version__

    assert (done.returncode, done.stdout) == (0, f"the-loop {__version__}\n")


#: Lines of `ask` and `graph complete` and the parser's reading of each.
LINES = [
    ["ask", "Which database?"],
    ["ask", "Which database?", "--summary", "schema drafted"],
    ["ask", "--summary=drafted, twice", "--work-item", "local:acme/app#2", "Q?"],
    ["ask", "", "--summary", ""],
    ["ask", "Q?", "--summary", "one", "--summary", "two"],
    ["--config", "/x/cli-config.yaml", "ask", "Q?"],
    ["--config=/x/a.yaml", "ask", "Q?", "--config", "/y/b.yaml"],
    ["ask", "a=b", "--work-item=7"],
    ["graph", "complete"],
    ["graph", "complete", "--summary", "design written"],
    ["graph", "complete", "--work-item", "3", "--summary=ok", "--config", "c.yaml"],
    ["--config", "c.yaml", "graph", "complete", "--summary", "ok"],
]

#: Lines the short reading leaves to the parser (which may take them or say what is wrong).
NOT_PLAIN = [
    ["ask"], ["ask", "a", "b"], ["ask", "-h"], ["ask", "--help"], ["ask", "Q?", "--sum", "x"],
    ["ask", "Q?", "--summary"], ["ask", "Q?", "--summary", "-x"], ["ask", "--", "-Q?"],
    ["ask", "-5"], ["ask", "Q?", "--bogus"], ["--config", "ask", "Q?"], ["-h", "ask", "Q?"],
    ["graph"], ["graph", "--config", "c.yaml", "complete"], ["graph", "complete", "extra"],
    ["graph", "done"], ["start", "1"], ["poll", "--once"], ["ask", "caf\udce9"], [],
    ["--version"], ["asks", "Q?"],
]


@pytest.mark.parametrize("argv", LINES)
def test_the_agents_plain_lines_read_as_the_parser_reads_them(argv: list[str]) -> None:
    from the_loop.cli import bound
    from the_loop.cli.app import build_parser, command_word
    from the_loop.cli.quick import agent_args

    quick = agent_args(argv)
    assert quick is not None
    assert vars(bound(quick)) == vars(build_parser(command_word(argv)).parse_args(argv))


@pytest.mark.parametrize("argv", NOT_PLAIN)
def test_any_other_line_goes_to_the_parser(argv: list[str]) -> None:
    from the_loop.cli.quick import agent_args

    assert agent_args(argv) is None


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


def test_a_loop_that_runs_no_policy_records_its_points_without_the_policy_compiler() -> None:
    """The loop's decision log is built at the first point a poller fires; before issue 34
    it imported the policy executor (and with it the rule compiler and the JMESPath
    language, about 75 ms of a poller's first cycle) only to ask whether a refusing hook
    was one."""
    done = subprocess.run(
        [sys.executable, "-c", "import sys, the_loop.decisions.looplog\n"
         "print(sorted(m for m in sys.modules if m == 'the_loop.hooks.executors.policy' "
         "or m.startswith(('the_loop.hooks.policy', 'the_loop.jmes', 'jmespath'))))"],
        capture_output=True, text=True, check=True, timeout=60)
    assert done.stdout.strip() == "[]", done.stdout
