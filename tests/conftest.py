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

# The shared helpers (cli_helpers, runtime_helpers, serving_helpers, fault_helpers,
# any_loop_data) live here, beside this file; the tests live in folders that mirror the package.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from cli_helpers import CLI_TIMEOUT, PYCACHE, in_process

# This process caches its bytecode where its children do (runtime_helpers.child_env), even
# under PYTHONDONTWRITEBYTECODE: else each xdist worker compiles src/ and pytest rewrites
# every test module again, in every run (some 4 s of CPU a worker).
sys.dont_write_bytecode = False
sys.pycache_prefix = str(PYCACHE)

if TYPE_CHECKING:
    from runtime_helpers import LoopDir
    from the_loop.runtime.db import Database

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
    """`run_cli(*args, cwd=, stdin=, env=)`: `the_loop.cli.main(args)` in this process.

    It runs as a fresh `python -m the_loop` would see the world, without the interpreter's
    start-up cost: the working directory is `cwd` (default tmp_path), the environment
    carries no $THE_LOOP_CLI_CONFIG and HOME is an empty folder, stdin holds `stdin`, and
    stdout/stderr are UTF-8 streams (stdout strict, as a pipe's would be). Everything it
    changes — cwd, environment, signal handlers, sys.path, the hook modules it imported,
    the process's chain cache — is put back afterwards. Never raises on a non-zero exit;
    an exception escaping main() fails the test (in a process it would be a traceback).
    Use `spawn_cli` where only a real process proves the point (PYTHONPATH, signals,
    exit codes of a dying interpreter, the console script).
    """
    home = tmp_path / "_home"
    home.mkdir(exist_ok=True)

    def run(
        *args: str, cwd: Path | None = None, stdin: str = "", env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        if env and "PYTHONPATH" in env:
            raise AssertionError("run_cli runs in this process: use spawn_cli for PYTHONPATH")
        full = {k: v for k, v in os.environ.items() if k != "THE_LOOP_CLI_CONFIG"}
        full["HOME"] = str(home)
        full.update(env or {})
        return in_process(list(args), cwd=cwd or tmp_path, stdin=stdin, env=full)

    return run


@pytest.fixture
def spawn_cli(tmp_path: Path) -> CliRun:
    """`spawn_cli(*args, cwd=, stdin=, env=)`: `python -m the_loop ARGS` in a fresh
    interpreter, with the environment `run_cli` gives. Never raises on a non-zero exit."""
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
            text=True, capture_output=True, env=full, timeout=CLI_TIMEOUT, check=False,
        )

    return run


@pytest.fixture
def ld(tmp_path: Path) -> Iterator[LoopDir]:
    """A loop's folder (config, stateDir, harness) whose processes are cleaned up after."""
    from runtime_helpers import LoopDir

    with LoopDir(tmp_path) as d:
        yield d


def _provided(variable: str, what: str) -> str:
    """The value of a THE_LOOP_TEST_* variable, or skip the test: CI sets it, a laptop may not."""
    value = os.environ.get(variable, "")
    if not value:
        pytest.skip(f"{variable} is not set: this test needs {what} (.ci/run provides it)")
    return value


def _shown_dsn(dsn: str) -> str:
    """The DSN with any password replaced, for a failure message."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    try:
        parts = conninfo_to_dict(dsn)
    except Exception:  # an unparseable DSN says so below; never echo what it holds
        return "(unparseable)"
    if "password" in parts:
        parts["password"] = "***"
    return make_conninfo("", **parts)


@pytest.fixture(scope="session")
def _pg_admin_dsn() -> str:
    """THE_LOOP_TEST_PG_DSN checked once per worker: skip when unset, fail when unreachable."""
    dsn = _provided("THE_LOOP_TEST_PG_DSN", "a PostgreSQL server")
    import psycopg

    try:
        with psycopg.connect(dsn, connect_timeout=10, autocommit=True) as conn:
            conn.execute("select 1")
    except psycopg.Error as exc:
        problem = (str(exc).strip() or type(exc).__name__).splitlines()[0]
    else:
        return dsn
    pytest.fail(
        f"THE_LOOP_TEST_PG_DSN is set ({_shown_dsn(dsn)}) but PostgreSQL cannot be reached: "
        f"{problem}; start the server or unset the variable to skip these tests", pytrace=False,
    )


@pytest.fixture
def pg_dsn(_pg_admin_dsn: str) -> Iterator[str]:
    """A DSN to an empty PostgreSQL database of this test's own, dropped afterwards.

    Each test gets a new database (named after its xdist worker and a random suffix), so
    tests on parallel workers, or two suites on one server, never see each other's tables.
    """
    import uuid

    import psycopg
    from psycopg import sql

    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    name = f"the_loop_t_{worker}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(_pg_admin_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
    try:
        yield _with_dbname(_pg_admin_dsn, name)
    finally:
        with psycopg.connect(_pg_admin_dsn, autocommit=True) as admin:
            admin.execute(
                sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name))
            )


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest) -> str:
    """A test taking this runs on both backends: '' (SQLite in stateDir, the default) and
    then a PostgreSQL database of its own (skipped without THE_LOOP_TEST_PG_DSN)."""
    if request.param == "sqlite":
        return ""
    return str(request.getfixturevalue("pg_dsn"))


@pytest.fixture
def target(database: str, tmp_path: Path) -> str | Path:
    """The loop's database on each backend (`database`): PostgreSQL's DSN, or the SQLite
    file a stateDir would hold."""
    return database or tmp_path / "state" / "loop.db"


@pytest.fixture
def db(target: str | Path) -> Iterator[Database]:
    """The loop's store (runtime.db), opened on `target`, closed after the test."""
    from the_loop.runtime.db import open_database

    opened = open_database(target)
    yield opened
    opened.close()


def _with_dbname(dsn: str, name: str) -> str:
    """`dsn` pointing at database `name`: a URL stays a URL, key=value stays key=value."""
    from urllib.parse import urlsplit

    from psycopg.conninfo import make_conninfo

    if dsn.startswith(("postgresql://", "postgres://")):
        url = urlsplit(dsn)  # urlunsplit would drop the `//` of an empty host
        return f"{url.scheme}://{url.netloc}/{name}" + (f"?{url.query}" if url.query else "")
    return make_conninfo(dsn, dbname=name)


@pytest.fixture(scope="session")
def chromium_path() -> str:
    """THE_LOOP_TEST_CHROMIUM: skip when unset, fail when it is not an executable file."""
    path = _provided("THE_LOOP_TEST_CHROMIUM", "a Chromium binary")
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        pytest.fail(
            f"THE_LOOP_TEST_CHROMIUM is set ({path}) but that is not an executable file; "
            "install Debian's chromium (apt-get install chromium) or unset the variable",
            pytrace=False,
        )
    return path


#: The test modules that drive Chromium; the run's summary says how long they took.
BROWSER_MODULES = ("tests/console/test_console_browser.py",)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One line: how many browser tests ran (or skipped) and their time, setup included."""
    seconds, ran, skipped = 0.0, set(), set()
    for reports in terminalreporter.stats.values():
        for report in reports:
            nodeid = getattr(report, "nodeid", "")
            if not nodeid.startswith(BROWSER_MODULES):
                continue
            seconds += float(getattr(report, "duration", 0.0))
            (skipped if getattr(report, "skipped", False) else ran).add(nodeid)
    if ran or skipped:
        terminalreporter.write_line(
            f"browser tests (Chromium): {len(ran - skipped)} ran, {len(skipped)} skipped, "
            f"{seconds:.1f} s including setup")
