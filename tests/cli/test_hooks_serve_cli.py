"""`the-loop hooks serve`: the class an operator declares by path, hosted by url (R4.4)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from the_loop.hooks import load_chain
from the_loop.hooks.engine.points import SessionSpawn, WorkItem, WorkItemStart

HOOKS = """\
from the_loop.sdk.hooks import LifecycleHooks, SessionSpawn, WorkItemStart

class Prefix(LifecycleHooks):
    def __init__(self, prefix="ACME: "):
        self.prefix = prefix

    def session_spawn(self, ctx: SessionSpawn) -> SessionSpawn:
        ctx.prompt = self.prefix + ctx.prompt
        return ctx


class Freeze(LifecycleHooks):
    def work_item_start(self, ctx: WorkItemStart) -> WorkItemStart:
        ctx.proceed = False
        ctx.reason = "frozen"
        return ctx
"""
ONE_CLASS = HOOKS.split("\n\nclass Freeze")[0] + "\n"


class Served:
    """A running `the-loop hooks serve` process and the URL it printed."""

    def __init__(self, args: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "the_loop", "hooks", "serve", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd,
            env={**os.environ, **(env or {})},
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # CI may ignore it
        )
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()

    def stop(self, sig: int = signal.SIGTERM) -> tuple[int, str]:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        _, err = self.proc.communicate(timeout=10)
        return self.proc.returncode, err


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Any]:
    started: list[Served] = []

    def run(*args: str, env: dict[str, str] | None = None) -> Served:
        started.append(Served(list(args), tmp_path, env))
        return started[-1]

    yield run
    for s in started:
        if s.proc.poll() is None:
            s.proc.kill()
        s.proc.communicate(timeout=10)


def declare(tmp_path: Path, url: str, extra: str = "") -> Path:
    config = tmp_path / "cli-config.yaml"
    config.write_text(
        f"loop: acme\nstateDir: state\nhooks:\n  - name: prefix\n    url: {url}\n"
        f"    timeoutSeconds: 5\n{extra}",
        encoding="utf-8",
    )
    return config


def test_r4_4_serve_path_hosts_the_class_a_url_entry_calls(tmp_path: Path, serve: Any) -> None:
    (tmp_path / "hooks.py").write_text(ONE_CLASS, encoding="utf-8")
    served = serve("--path", "hooks.py", "--port", "0", "--with", '{"prefix": "[x] "}')
    assert served.url.startswith("http://127.0.0.1:") and served.url.endswith("/")
    chain = load_chain(declare(tmp_path, served.url))
    item = WorkItem(ref="local:acme/app#1")
    assert chain.run(SessionSpawn(prompt="hello", work_item=item)).prompt == "[x] hello"
    # Points the class does not override pass through, as they would by path:.
    assert chain.run(WorkItemStart(work_item=item)).proceed is True
    code, err = served.stop()
    assert code == 0
    assert "serving Prefix" in err and "points: session_spawn" in err
    assert "hook server stopped" in err and "Traceback" not in err


def test_serve_executor_picks_one_class_and_ctrl_c_stops_cleanly(
    tmp_path: Path, serve: Any
) -> None:
    (tmp_path / "hooks.py").write_text(HOOKS, encoding="utf-8")
    served = serve("--path", "hooks.py", "--executor", "Freeze", "--port", "0")
    chain = load_chain(declare(tmp_path, served.url, "    required: true\n"))
    out = chain.run(WorkItemStart())
    assert (out.proceed, out.reason) == (False, "frozen")
    code, err = served.stop(signal.SIGINT)
    assert code == 0 and "Traceback" not in err


def test_r4_3_serve_with_token_env_requires_the_bearer(
    tmp_path: Path, serve: Any, monkeypatch: Any
) -> None:
    (tmp_path / "hooks.py").write_text(ONE_CLASS, encoding="utf-8")
    served = serve("--path", "hooks.py", "--port", "0", "--token-env", "SERVE_TOKEN",
                   env={"SERVE_TOKEN": "serve-secret-1"})
    monkeypatch.setenv("SERVE_TOKEN", "serve-secret-1")
    good = load_chain(declare(tmp_path, served.url, "    tokenEnv: SERVE_TOKEN\n"))
    assert good.run(SessionSpawn(prompt="p")).prompt == "ACME: p"
    bad = load_chain(declare(tmp_path, served.url, "    required: true\n"))
    out = bad.run(SessionSpawn(prompt="p"))
    assert out.proceed is False and "HTTP 401" in out.reason
    code, err = served.stop()
    assert code == 0
    lines = [line for line in err.splitlines() if line.startswith("the-loop: (request)")
             or line.startswith("the-loop: session_spawn")]
    # One line per request, the refused one included (docs/any-loop.md), and no token in it.
    assert [line.split(" ")[1:3] for line in lines] == [["session_spawn", "ok"],
                                                        ["(request)", "http"]]
    assert lines[1].endswith(" ms: unauthorized: missing or wrong bearer token")
    assert "serve-secret-1" not in err


@pytest.mark.parametrize(("args", "env", "code", "expected"), [
    (["--host", "0.0.0.0"], {}, 2, "refusing to listen beyond loopback without --token-env"),
    (["--token-env", "NOT_SET_ANYWHERE"], {}, 2, "--token-env NOT_SET_ANYWHERE: the variable "
     "is unset or empty"),
    (["--token-env", "abc-def"], {}, 2, "expected the NAME of an environment variable"),
    (["--with", "{nope"], {}, 2, "--with: not JSON"),
    (["--with", "[1]"], {}, 2, "--with: expected a JSON object"),
    (["--executor", "Nope"], {}, 1, "--executor: 'hooks.py' has no attribute 'Nope'"),
])
def test_serve_refuses_with_a_message_naming_the_option(
    tmp_path: Path, args: list[str], env: dict[str, str], code: int, expected: str
) -> None:
    (tmp_path / "hooks.py").write_text(HOOKS, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "the_loop", "hooks", "serve", "--path", "hooks.py", "--port", "0",
         *args],
        capture_output=True, text=True, cwd=tmp_path, env={**os.environ, **env}, timeout=30,
    )
    assert result.returncode == code, result.stderr
    assert expected in result.stderr and result.stdout == ""
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(("args", "expected"), [
    (["--path", "missing.py"], "--path missing.py: nothing at"),
    (["--path", "hooks.py"], "--executor: 'hooks.py' defines several LifecycleHooks subclasses "
     "(Freeze, Prefix); name one with --executor"),
    (["--module", "json"], "--module: 'json' defines no LifecycleHooks subclass"),
    (["--module", "not a module"], "--module: expected a dotted module name"),
])
def test_serve_load_errors_name_the_option(tmp_path: Path, args: list[str], expected: str) -> None:
    (tmp_path / "hooks.py").write_text(HOOKS, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "the_loop", "hooks", "serve", *args, "--port", "0"],
        capture_output=True, text=True, cwd=tmp_path, timeout=30,
    )
    assert result.returncode == 1, result.stderr
    assert expected in result.stderr and "Traceback" not in result.stderr


def test_serve_module_hosts_an_installed_module(tmp_path: Path, serve: Any) -> None:
    package = tmp_path / "acme_hooks"
    package.mkdir()
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "prefix.py").write_text(ONE_CLASS, encoding="utf-8")
    served = serve("--module", "acme_hooks.prefix", "--port", "0",
                   env={"PYTHONPATH": str(tmp_path)})
    chain = load_chain(declare(tmp_path, served.url))
    assert chain.run(SessionSpawn(prompt="p")).prompt == "ACME: p"
    assert served.stop()[0] == 0
