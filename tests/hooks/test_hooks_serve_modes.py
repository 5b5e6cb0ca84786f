"""`hooks serve --policy DIR` and `--declared` (issue 14.1), its log line per call and
`--quiet` (issue 15.8), and the WSGI app's matching THE_LOOP_HOOK_* modes."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from any_loop_data import upstream_request
from serving_helpers import Served, post
from the_loop.errors import HooksConfigError
from the_loop.hooks.serving.wsgi import app_from_env

PREFIX_RULES = """\
rules:
  - name: team-prefix
    on: session_spawn
    set:
      prompt_prefix: "[rules] "
"""
RAISES = """\
from the_loop.sdk.hooks import LifecycleHooks, SessionSpawn

class Broken(LifecycleHooks):
    def session_spawn(self, ctx: SessionSpawn) -> SessionSpawn:
        raise RuntimeError("compliance database is down")
"""
STAMP = """\
from the_loop.sdk.hooks import LifecycleHooks, SessionSpawn

class Stamp(LifecycleHooks):
    def session_spawn(self, ctx: SessionSpawn) -> SessionSpawn:
        ctx.prompt = "[stamp] " + ctx.prompt
        return ctx
"""
CALL = {"jsonrpc": "2.0", "method": "session_spawn", "params": {"prompt": "p"}, "id": 1}


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Any]:
    started: list[Served] = []

    def run(*args: str) -> Served:
        started.append(Served(["hooks", "serve", *args, "--port", "0"], tmp_path))
        return started[-1]

    yield run
    for s in started:
        s.kill()


def run_cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "the_loop", *args], capture_output=True,
                          text=True, cwd=tmp_path, env=dict(os.environ), timeout=30)


def write_rules(folder: Path, text: str = PREFIX_RULES) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "rules.yaml").write_text(text, encoding="utf-8")
    return folder


def test_serve_policy_hosts_a_folder_and_logs_one_line_per_call(
    tmp_path: Path, serve: Any
) -> None:
    write_rules(tmp_path / "rules")
    served = serve("--policy", "rules")
    assert post(served.url, CALL)[1]["result"] == {"prompt": "[rules] p"}
    post(served.url, _with_unknown_keys(upstream_request("work_item_start")))
    code, err = served.stop()
    assert code == 0
    assert "serving the policy folder rules" in err and "points: session_spawn;" in err
    lines = [line for line in err.splitlines() if line.startswith("the-loop: session_spawn ")]
    assert len(lines) == 1 and lines[0].startswith("the-loop: session_spawn ok ")
    assert lines[0].endswith(" ms")
    start = next(line for line in err.splitlines() if "work_item_start ok" in line)
    assert start.endswith("(ignored: region, tenant)")


def _with_unknown_keys(request: dict[str, Any]) -> dict[str, Any]:
    """The other loop's request with two keys no catalog has (theirs are all facts here)."""
    request["params"].update(tenant="acme", region="east")
    return request


def test_serve_quiet_logs_no_calls_but_each_ignored_field_once(
    tmp_path: Path, serve: Any
) -> None:
    write_rules(tmp_path / "rules")
    served = serve("--policy", "rules", "--quiet")
    for _ in range(3):
        post(served.url, _with_unknown_keys(upstream_request("work_item_start")))
    _, err = served.stop()
    assert " ok " not in err
    assert err.count("ignoring field(s) this catalog does not know: region, tenant") == 1


def test_serve_policy_with_errors_refuses_to_start_listing_every_error(tmp_path: Path) -> None:
    write_rules(tmp_path / "rules", "rules:\n  - name: a\n    on: session_spwan\n    set: "
                "{proceed: false}\n  - name: b\n    on: session_spawn\n    when: 'nope ==='\n"
                "    set: {proceed: false}\n")
    result = run_cli(tmp_path, "hooks", "serve", "--policy", "rules", "--port", "0")
    assert result.returncode == 1 and result.stdout == ""
    assert "2 errors in policy folder" in result.stderr
    assert "rule 'a' → on: 'session_spwan' is not a lifecycle point" in result.stderr
    assert "rule 'b' → when: syntax error" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("extra", [["--executor", "X"], ["--with", '{"a": 1}']])
def test_class_options_with_a_policy_are_a_usage_error(tmp_path: Path, extra: list[str]) -> None:
    write_rules(tmp_path / "rules")
    result = run_cli(tmp_path, "hooks", "serve", "--policy", "rules", "--port", "0", *extra)
    assert result.returncode == 2
    assert "--executor and --with name and build a hook class" in result.stderr


def test_serve_policy_without_a_folder_says_so(tmp_path: Path) -> None:
    result = run_cli(tmp_path, "hooks", "serve", "--policy", "missing", "--port", "0")
    assert result.returncode == 1
    assert "--policy missing: nothing at" in result.stderr


def _config(tmp_path: Path, hooks: str) -> None:
    (tmp_path / "cli-config.yaml").write_text(f"loop: acme\nstateDir: state\nhooks:\n{hooks}",
                                              encoding="utf-8")


def test_serve_declared_runs_the_chain_in_order(tmp_path: Path, serve: Any) -> None:
    write_rules(tmp_path / "rules")
    (tmp_path / "stamp.py").write_text(STAMP, encoding="utf-8")
    _config(tmp_path, "  - name: stamp\n    path: stamp.py\n"
                      "  - name: house\n    policy: rules\n")
    served = serve("--declared", "--config", "cli-config.yaml")
    # The policy reads the prompt the stamp left: declaration order.
    assert post(served.url, CALL)[1]["result"] == {"prompt": "[rules] [stamp] p"}
    _, err = served.stop()
    assert "serving the declared chain" in err


def test_serve_declared_keeps_required_a_failing_required_hook_refuses(
    tmp_path: Path, serve: Any
) -> None:
    write_rules(tmp_path / "rules")
    (tmp_path / "broken.py").write_text(RAISES, encoding="utf-8")
    _config(tmp_path, "  - name: house\n    policy: rules\n"
                      "  - name: compliance\n    path: broken.py\n    required: true\n")
    served = serve("--declared", "--config", "cli-config.yaml")
    result = post(served.url, CALL)[1]["result"]
    assert result["proceed"] is False
    assert "compliance" in result["reason"] and "compliance database is down" in result["reason"]


def test_serve_declared_with_a_broken_declaration_refuses_to_start(tmp_path: Path) -> None:
    _config(tmp_path, "  - name: x\n    path: nowhere.py\n")
    result = run_cli(tmp_path, "--config", "cli-config.yaml", "hooks", "serve", "--declared",
                     "--port", "0")
    assert result.returncode == 1
    assert "hooks[0] ('x') → path: no file at" in result.stderr


def test_serve_declared_without_a_config_says_how_to_name_one(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "THE_LOOP_CLI_CONFIG"}
    env["HOME"] = str(tmp_path)
    result = subprocess.run([sys.executable, "-m", "the_loop", "hooks", "serve", "--declared",
                             "--port", "0"], capture_output=True, text=True, cwd=tmp_path,
                            env=env, timeout=30)
    assert result.returncode == 1
    assert "no cli-config.yaml found to serve the declared chain of" in result.stderr


@pytest.mark.parametrize(("env", "expected"), [
    ({"THE_LOOP_HOOK_POLICY": "/x", "THE_LOOP_HOOK_PATH": "/y.py"},
     "got THE_LOOP_HOOK_PATH and THE_LOOP_HOOK_POLICY"),
    ({"THE_LOOP_HOOK_POLICY": "/nonexistent/rules"},
     "THE_LOOP_HOOK_POLICY: /nonexistent/rules: no policy folder there"),
    ({"THE_LOOP_HOOK_CONFIG": "/nonexistent/cli-config.yaml"},
     "THE_LOOP_HOOK_CONFIG: /nonexistent/cli-config.yaml: no such file"),
])
def test_wsgi_policy_and_config_modes_name_the_variable(
    env: dict[str, str], expected: str
) -> None:
    with pytest.raises(HooksConfigError) as info:
        app_from_env(env)
    assert expected in str(info.value)


def test_the_wsgi_app_keeps_the_gunicorn_address_written_before_the_move() -> None:
    """`gunicorn 'the_loop.hooks.wsgi:app_from_env()'` still names the same app factory."""
    import importlib

    old = importlib.import_module("the_loop.hooks.wsgi")
    assert old.app_from_env is app_from_env
    with pytest.raises(HooksConfigError, match="THE_LOOP_HOOK_POLICY: /nonexistent/rules"):
        old.app_from_env({"THE_LOOP_HOOK_POLICY": "/nonexistent/rules"})


def test_serve_logs_a_line_for_every_request_even_one_naming_no_point(
    tmp_path: Path, serve: Any
) -> None:
    """Not JSON, an unknown method (named safely: the caller chose it) and a refusal each
    get their line; a caller cannot split a log line with a newline in the method."""
    write_rules(tmp_path / "rules", PREFIX_RULES + "  - name: no\n    on: work_item_start\n"
                                                  "    set: {proceed: false, reason: no}\n")
    served = serve("--policy", "rules")
    request = urllib.request.Request(served.url, data=b"{not json", method="POST",
                                     headers={"Content-Type": "application/json"})
    with contextlib.suppress(urllib.error.HTTPError):
        urllib.request.urlopen(request, timeout=10).close()
    assert post(served.url, {**CALL, "method": "bogus\nthe-loop: forged"})[1]["error"][
        "code"] == -32601
    assert post(served.url, {**CALL, "method": "work_item_start", "params": {}})[1][
        "result"]["proceed"] is False
    _, err = served.stop()
    lines = [line for line in err.splitlines() if line.endswith(" ms") or "ms (" in line]
    assert [line.split(" ")[1:3] for line in lines] == [
        ["(not", "JSON)"], ['"bogus\\nthe-loop:', 'forged"'], ["work_item_start", "ok"]]
    assert lines[0].startswith("the-loop: (not JSON) error -32700 ")
    assert " error -32601 " in lines[1]
    assert lines[2].endswith(" ms (refused)")
    assert not [line for line in err.splitlines() if line.startswith("the-loop: forged")]


def test_serve_a_relative_path_found_only_beside_the_config_says_which_to_pass(
    tmp_path: Path
) -> None:
    """Right after `init`, `--policy policies` is not here but in .the-loop/: say so."""
    write_rules(tmp_path / ".the-loop" / "policies")
    (tmp_path / ".the-loop" / "cli-config.yaml").write_text(
        "hooks:\n  - {name: house, policy: policies}\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "THE_LOOP_CLI_CONFIG"}
    result = subprocess.run(
        [sys.executable, "-m", "the_loop", "hooks", "serve", "--policy", "policies", "--port",
         "0"], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=30, check=False)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr == (
        f"the-loop: --policy policies: nothing at {tmp_path / 'policies'}; paths on the command "
        "line resolve against the working directory. Beside the config in effect it is "
        ".the-loop/policies: pass --policy .the-loop/policies, or serve the whole declared "
        "chain with --declared\n")


ECHOES = """\
import os
from the_loop.sdk.hooks import LifecycleHooks, SessionSpawn

class Echo(LifecycleHooks):
    def session_spawn(self, ctx: SessionSpawn) -> SessionSpawn:
        ctx.prompt = ctx.prompt + " " + os.environ["REMOTE_TOKEN"]
        return ctx
"""
FAILS = """\
import os
from the_loop.sdk.hooks import LifecycleHooks, SessionSpawn

class Fails(LifecycleHooks):
    def session_spawn(self, ctx: SessionSpawn) -> SessionSpawn:
        # The server's own token whole, the other entry's across where the message is cut.
        raise RuntimeError(os.environ["SERVE_TOKEN"] + " " + "x" * 470 + os.environ["REMOTE_TOKEN"])
"""


def test_issue20_item3_serve_declared_redacts_every_token_it_holds_in_its_answers(
        tmp_path: Path) -> None:
    """A declared hook's answer holds another entry's tokenEnv value, and a required one's
    error text holds it and the server's own token: the caller gets `[redacted]` for each,
    never the value, nor the part a cut would have left."""
    (tmp_path / "echo.py").write_text(ECHOES, encoding="utf-8")
    (tmp_path / "fails.py").write_text(FAILS, encoding="utf-8")
    _config(tmp_path, "  - {name: echo, path: echo.py}\n"
                      "  - {name: fails, path: fails.py, required: true}\n"
                      "  - {name: other, url: 'http://127.0.0.1:9/hook', tokenEnv: REMOTE_TOKEN,"
                      " on: [work_item_start]}\n")
    tokens = {"SERVE_TOKEN": "serve-secret-0123456789", "REMOTE_TOKEN": "remote-secret-9876543210"}
    served = Served(["hooks", "serve", "--declared", "--config", "cli-config.yaml",
                     "--token-env", "SERVE_TOKEN", "--port", "0"], tmp_path, env=tokens)
    try:
        req = urllib.request.Request(
            served.url, data=json.dumps(CALL).encode(), method="POST",
            headers={"Content-Type": "application/json",
                     "Authorization": f"Bearer {tokens['SERVE_TOKEN']}"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            raw = resp.read().decode()
    finally:
        _, err = served.stop()
    result = json.loads(raw)["result"]
    assert result["prompt"] == "p [redacted]"
    assert result["proceed"] is False
    assert result["reason"].startswith("required hook 'fails' failed: RuntimeError: [redacted] x")
    for token in tokens.values():
        assert token[:12] not in raw and token[:12] not in err
