"""`command:` hooks (issue 35): a program per point, with the JSON a `url:` hook gets on stdin,
bounded by its timeout and its own process group, read back as strictly as a remote answer
(R2.4, R6.1, R6.3, abuse cases 1 and 2). Every program here is a real process."""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from the_loop.config_schema import config_schema
from the_loop.events import EventLog
from the_loop.hooks import Chain, HooksConfigError, load_chain
from the_loop.hooks.engine.points import PhaseChanged, SessionSpawn, WorkItem
from the_loop.hooks.executors.command import MAX_OUTPUT, MAX_REASON
from the_loop.hooks.executors.remote import request_body

PY = json.dumps(sys.executable)
PR = WorkItem(ref="local:acme/app#2", kind="pull-request")


def _chain(tmp_path: Path, entry: str, **scripts: str) -> Chain:
    """The chain of one `command:` entry, with `scripts` written beside the config."""
    for name, text in scripts.items():
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        path.chmod(0o755)
    config = tmp_path / "cli-config.yaml"
    config.write_text(f"loop: acme\nstateDir: state\nhooks:\n{entry}", encoding="utf-8")
    return load_chain(config, log=EventLog())


def _printing(name: str, printed: str) -> str:
    """An entry whose shell line reads its stdin and prints `printed` (passed as $0)."""
    return (f"  - name: {name}\n    command: [sh, -c, 'cat >/dev/null; printf %s \"$0\"', "
            f"{json.dumps(printed)}]\n")


def _failed(chain: Chain) -> list[dict[str, Any]]:
    return [e for e in chain.log.memory if e["event"] == "hooks.failed"]


# ------------------------------------------------------------------ the protocol


def test_stdin_is_exactly_the_json_rpc_request_a_url_hook_gets(tmp_path: Path) -> None:
    chain = _chain(tmp_path, f"  - {{name: dump, command: [{PY}, dump.py]}}\n", **{"dump.py": (
        "import sys\nopen('got.json', 'wb').write(sys.stdin.buffer.read())\n")})
    ctx = SessionSpawn(prompt="Fix it.", work_item=PR, labels=["loop"])
    assert chain.run(ctx).prompt == "Fix it."  # it printed nothing: nothing changes
    assert (tmp_path / "got.json").read_bytes() == request_body("session_spawn", ctx, 1)


@pytest.mark.parametrize("printed", [
    '{"prompt": "ACME: Fix it.", "work_item": "forged", "x": 1}',
    '{"jsonrpc": "2.0", "id": 1, "result": {"prompt": "ACME: Fix it.", "x": 1}}',
])
def test_stdout_is_a_bare_result_or_a_json_rpc_response_facts_and_unknown_keys_dropped(
    tmp_path: Path, printed: str
) -> None:
    chain = _chain(tmp_path, _printing("pre", printed))
    out = chain.invoke(SessionSpawn(prompt="Fix it."))
    assert out.context.prompt == "ACME: Fix it."
    assert out.context.work_item == WorkItem()
    [dropped] = [e for e in chain.log.memory if e["event"] == "hooks.dropped"]
    assert set(dropped["dropped"]) <= {"work_item", "x"} and "x" in dropped["dropped"]


@pytest.mark.parametrize(("printed", "says"), [
    ('{"prompt": true}', "decision 'prompt' must be str (got True that is bool)"),
    ('{"jsonrpc": "2.0", "id": 7, "result": null}', "its id 7 does not match the request's 1"),
    ('{"jsonrpc": "2.0", "id": 1, "error": {"code": -32000, "message": "down"}}',
     'JSON-RPC error -32000 "down" from sh'),
    ('[1, 2]', "the result from sh must be null or an object of decisions, got an array"),
    ('hello there', "the answer from sh is not JSON (it starts with \"hello there"),
])
def test_r6_1_a_wrong_answer_is_that_hooks_failure_and_changes_nothing(
    tmp_path: Path, printed: str, says: str
) -> None:
    chain = _chain(tmp_path, _printing("bad", printed))
    out = chain.invoke(SessionSpawn(prompt="Fix it."))
    assert out.context.prompt == "Fix it." and out.context.proceed is True
    [failed] = _failed(chain)
    assert says in failed["error"], failed["error"]


# ------------------------------------------------------------------ exit codes


def test_exit_2_refuses_at_a_point_with_proceed_with_trimmed_capped_stderr(
    tmp_path: Path
) -> None:
    chain = _chain(tmp_path, "  - {name: gate, command: [sh, -c, 'cat >/dev/null; printf "
                             "\"\\n  no PR sessions  \\n\" >&2; exit 2']}\n")
    out = chain.invoke(SessionSpawn(prompt="Fix it.", work_item=PR))
    assert (out.context.proceed, out.context.reason, out.refused_by) == (
        False, "no PR sessions", "gate")
    long = _chain(tmp_path, "  - {name: gate, command: [sh, -c, 'cat >/dev/null; head -c "
                            "5000 /dev/zero | tr \"\\\\0\" x >&2; exit 2']}\n")
    reason = long.run(SessionSpawn()).reason
    assert reason == "x" * MAX_REASON + "…"


def test_exit_2_at_a_point_without_proceed_is_a_failure(tmp_path: Path) -> None:
    chain = _chain(tmp_path, "  - {name: gate, command: [sh, -c, 'cat >/dev/null; echo no >&2;"
                             " exit 2']}\n")
    out = chain.invoke(PhaseChanged())
    assert out.context.notify is True
    [failed] = _failed(chain)
    assert failed["error"] == ('sh exited 2 (a refusal) at phase_changed, which has no proceed '
                               'decision to refuse with; its last stderr line: "no"')


def test_r6_1_exit_1_is_a_failure_naming_the_exit_code_and_the_last_stderr_line(
    tmp_path: Path
) -> None:
    chain = _chain(tmp_path, "  - {name: flaky, command: [./flaky.sh]}\n", **{
        "flaky.sh": "#!/bin/sh\ncat >/dev/null\necho starting >&2\necho 'db down' >&2\n"
                    "echo '{\"prompt\": \"changed\"}'\nexit 1\n"})
    out = chain.invoke(SessionSpawn(prompt="Fix it."))
    assert out.context.prompt == "Fix it."
    [failed] = _failed(chain)
    assert failed["error"] == './flaky.sh exited 1; its last stderr line: "db down"'


def test_r6_3_a_required_command_that_fails_refuses(tmp_path: Path) -> None:
    chain = _chain(tmp_path, "  - {name: must, command: [sh, -c, 'exit 1'], required: true}\n")
    ctx = chain.run(SessionSpawn())
    assert (ctx.proceed, ctx.reason) == (False, "required hook 'must' failed: sh exited 1")


def test_r6_1_ten_megabytes_on_stdout_fails_at_the_cap_and_kills_the_program(
    tmp_path: Path
) -> None:
    chain = _chain(tmp_path, "  - {name: loud, command: [sh, -c, 'cat >/dev/null; head -c "
                             "10000000 /dev/zero; sleep 30'], timeoutSeconds: 20}\n")
    started = time.monotonic()
    out = chain.invoke(SessionSpawn(prompt="Fix it."))
    assert time.monotonic() - started < 10  # stopped at the cap, not at the timeout
    assert out.context.prompt == "Fix it."
    [failed] = _failed(chain)
    assert failed["error"] == (f"sh printed more than {MAX_OUTPUT} bytes on stdout and was "
                               "killed with its process group")


def test_r6_1_a_program_past_its_timeout_is_killed_with_its_child_and_recorded(
    tmp_path: Path
) -> None:
    """The program starts a child that would outlive it; both are gone when the call is."""
    chain = _chain(tmp_path, "  - {name: slow, command: [./slow.sh], timeoutSeconds: 0.5}\n",
                   **{"slow.sh": "#!/bin/sh\nsleep 60 &\necho $! > child.pid\necho waiting "
                                 ">&2\nsleep 60\n"})
    started = time.monotonic()
    out = chain.invoke(SessionSpawn(prompt="Fix it."))
    assert time.monotonic() - started < 5
    assert out.context.proceed is True
    [failed] = _failed(chain)
    assert failed["error"] == ('./slow.sh ran past timeoutSeconds (0.5 s) and was killed with '
                               'its process group; its last stderr line: "waiting"')
    child = int((tmp_path / "child.pid").read_text())
    assert _gone(child)


def test_a_child_left_running_after_the_program_exits_never_holds_the_call(
    tmp_path: Path
) -> None:
    """It answers and exits, leaving a child that keeps stdout open: the answer stands, the
    call returns at once, and the child is killed with the group."""
    chain = _chain(tmp_path, "  - {name: bg, command: [./bg.sh], timeoutSeconds: 20}\n", **{
        "bg.sh": "#!/bin/sh\ncat >/dev/null\nsleep 60 &\necho $! > child.pid\n"
                 "echo '{\"prompt\": \"done\"}'\n"})
    started = time.monotonic()
    assert chain.run(SessionSpawn()).prompt == "done"
    assert time.monotonic() - started < 5
    assert _gone(int((tmp_path / "child.pid").read_text()))


def _gone(pid: int) -> bool:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        if Path(f"/proc/{pid}/stat").exists() and ") Z " in Path(f"/proc/{pid}/stat").read_text():
            return True  # a zombie waiting for init to reap it: it no longer runs
        time.sleep(0.05)
    return False


# ------------------------------------------------------------------ the environment


def test_a_secret_the_entry_does_not_pass_is_absent_from_the_programs_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOOP_DB_PASSWORD", "hunter2-not-passed")
    monkeypatch.setenv("TEAM", "platform")
    monkeypatch.setenv("API_TOKEN", "tok-123456")
    chain = _chain(tmp_path, f"  - name: env\n    command: [{PY}, dump.py]\n"
                             "    env: {MODE: check}\n    passEnv: [TEAM, NOT_SET]\n"
                             "    secretEnv: [API_TOKEN]\n", **{"dump.py": (
                                 "import json, os, sys\nsys.stdin.read()\n"
                                 "json.dump(dict(os.environ), open('env.json', 'w'))\n"
                                 "print(json.dumps({'prompt': os.environ['API_TOKEN']}))\n")})
    ctx = chain.run(SessionSpawn())
    env = json.loads((tmp_path / "env.json").read_text())
    assert {k: v for k, v in env.items() if k not in ("PWD", "LC_CTYPE")} == {
        "MODE": "check", "TEAM": "platform", "API_TOKEN": "tok-123456"}
    assert "hunter2-not-passed" not in json.dumps(env)
    assert ctx.prompt == "[redacted]"  # what it printed of its secret never comes back
    assert "tok-123456" in chain.log.known_secrets()  # nor reaches an event


def test_an_unset_secret_env_fails_the_call_before_anything_runs(tmp_path: Path) -> None:
    chain = _chain(tmp_path, "  - {name: s, command: [sh, -c, 'touch ran'], "
                             "secretEnv: [SURELY_UNSET_VAR]}\n")
    chain.run(SessionSpawn())
    [failed] = _failed(chain)
    assert failed["error"].startswith("secretEnv SURELY_UNSET_VAR is unset or empty, so sh was "
                                      "not run")
    assert not (tmp_path / "ran").exists()


def test_the_program_runs_in_the_configs_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                ) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    chain = _chain(tmp_path, "  - {name: pwd, command: [sh, -c, 'cat >/dev/null; pwd >&2; "
                             "exit 2']}\n")
    assert chain.run(SessionSpawn()).reason == str(tmp_path)


# ------------------------------------------------------------------ the declaration


def test_abuse_1_a_relative_program_in_a_checkout_is_never_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The session's checkout holds hooks/check.sh and check.sh, and is the working directory
    with `.` on PATH: the entry resolves against the config's folder only, so loading fails."""
    checkout = tmp_path / "checkout"
    (checkout / "hooks").mkdir(parents=True)
    for rel in ("hooks/check.sh", "check.sh"):
        planted = checkout / rel
        planted.write_text("#!/bin/sh\ntouch \"$0.ran\"\n", encoding="utf-8")
        planted.chmod(0o755)
    monkeypatch.chdir(checkout)
    monkeypatch.setenv("PATH", f".:{checkout}/..:" + os.environ["PATH"])
    loop = tmp_path / "loop"
    loop.mkdir()
    with pytest.raises(HooksConfigError) as info:
        _chain(loop, "  - {name: check, command: [hooks/check.sh]}\n")
    assert str(info.value) == (
        f"hooks[0] ('check') → command: no file at {loop}/hooks/check.sh (a relative program "
        "resolves against the folder of cli-config.yaml, never the working directory)")
    with pytest.raises(HooksConfigError, match=r"no program 'check.sh' on PATH; write its path "
                                               r"\(./check.sh is the file beside"):
        _chain(loop, "  - {name: check, command: [check.sh]}\n")
    assert not list(checkout.rglob("*.ran"))


def test_a_program_that_is_not_executable_fails_the_load_naming_the_entry(tmp_path: Path
                                                                          ) -> None:
    (tmp_path / "check.sh").write_text("#!/bin/sh\n", encoding="utf-8")
    with pytest.raises(HooksConfigError) as info:
        _chain(tmp_path, "  - {name: check, command: [./check.sh]}\n")
    assert str(info.value) == (f"hooks[0] ('check') → command: {tmp_path}/check.sh is not "
                               "executable; chmod +x it, or name its interpreter first "
                               "(command: [sh, ./check.sh])")
    assert not (tmp_path / "check.sh").stat().st_mode & stat.S_IXUSR


@pytest.mark.parametrize(("entry", "says"), [
    ("{name: c, command: []}", "→ command: expected a non-empty list [program, arg, …], got []"),
    ("{name: c, command: 'sh -c x'}", "→ command: expected a non-empty list"),
    ("{name: c, command: ['  ']}", "→ command: the program (its first item) is empty"),
    ("{name: c, command: [sh], timeoutSeconds: 0}", "→ timeoutSeconds: expected a number"),
    ("{name: c, command: [sh], env: {1A: x}}", "→ env: expected an environment variable name"),
    ("{name: c, command: [sh], passEnv: [A], secretEnv: [A]}",
     "→ secretEnv: A is also in passEnv; give each variable one source"),
    ("{name: c, command: [sh], tokenEnv: A}", "→ tokenEnv: not allowed on a command entry"),
])
def test_a_malformed_command_entry_fails_the_load_naming_entry_and_key(
    tmp_path: Path, entry: str, says: str
) -> None:
    with pytest.raises(HooksConfigError) as info:
        _chain(tmp_path, f"  - {entry}\n")
    assert str(info.value).startswith("hooks[0] ('c') " + says), str(info.value)


def test_the_json_schema_takes_a_command_entry_and_refuses_a_string_command() -> None:
    good = {"loop": "acme", "hooks": [{"name": "c", "command": ["sh", "-c", "exit 0"],
                                       "timeoutSeconds": 3, "env": {"A": "b"},
                                       "passEnv": ["PATH"], "secretEnv": ["T"]}]}
    jsonschema.validate(good, config_schema())
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"loop": "acme", "hooks": [{"name": "c", "command": "sh"}]},
                            config_schema())


# ------------------------------------------------------------------ everywhere a kind appears


def test_hooks_serve_declared_runs_a_command_entry(tmp_path: Path) -> None:
    from serving_helpers import Served, post

    (tmp_path / "cli-config.yaml").write_text(
        "loop: acme\nstateDir: state\nhooks:\n  - name: gate\n    command: [sh, -c, 'cat "
        ">/dev/null; echo no PR sessions >&2; exit 2']\n", encoding="utf-8")
    served = Served(["hooks", "serve", "--declared", "--config", "cli-config.yaml", "--port",
                     "0"], tmp_path)
    try:
        call = {"jsonrpc": "2.0", "method": "session_spawn", "params": {"prompt": "p"}, "id": 1}
        assert post(served.url, call)[1]["result"] == {"proceed": False,
                                                       "reason": "no PR sessions"}
    finally:
        served.kill()


def test_hooks_run_command_runs_one_program_with_no_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from the_loop.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("THE_LOOP_CLI_CONFIG", str(tmp_path / "none.yaml"))
    (tmp_path / "ctx.json").write_text('{"prompt": "Fix it."}', encoding="utf-8")
    assert main(["hooks", "run", "session_spawn", "--context", "ctx.json", "--json",
                 "--command", "sh", "-c", "cat >/dev/null; echo '{\"prompt\": \"ACME\"}'"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["context"]["prompt"] == "ACME"
    assert [(s["hook"], s["status"]) for s in data["trace"]] == [("command", "changed")]
    assert main(["hooks", "run", "session_spawn", "--command", "./missing.sh"]) == 2
    assert capsys.readouterr().err == (
        f"the-loop: --command: no file at {tmp_path}/missing.sh (a relative program resolves "
        "against the folder of cli-config.yaml, never the working directory)\n")


def test_a_secret_env_variable_is_a_secret_of_the_loop_never_given_to_a_harness(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loop redacts its value wherever it writes (comments included) and keeps it out
    of every harness's environment, as it does a tokenEnv's."""
    from the_loop.runtime.harness import harness_env
    from the_loop.runtime.settings import secret_names

    names = secret_names({"hooks": [{"name": "c", "command": ["sh"], "secretEnv": ["API_TOK"],
                                     "passEnv": ["TEAM"]},
                                    {"name": "u", "url": "https://h.example/",
                                     "tokenEnv": "URL_TOK"}]})
    assert names == {"API_TOK", "URL_TOK"}
    monkeypatch.setenv("API_TOK", "tok-123456")
    assert "API_TOK" not in harness_env(("API_TOK",), names)


def test_the_group_is_killed_only_while_the_program_is_unreaped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reaped program's pid may already belong to another process group (pids are
    reused): every group kill happens while its pid is still the program's."""
    from the_loop.hooks.executors import process

    calls: list[bool] = []
    real = os.killpg

    def killpg(pgid: int, sig: int) -> None:
        try:
            os.waitid(os.P_PID, pgid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            calls.append(True)
        except ChildProcessError:
            calls.append(False)  # reaped: this pgid is no longer the program's
        real(pgid, sig)

    monkeypatch.setattr(process.os, "killpg", killpg)
    for script in ("cat >/dev/null; echo null", "sleep 5"):
        process.run(["/bin/sh", "-c", script], b"{}", cwd=str(tmp_path), env={}, timeout=0.3)
    assert calls and all(calls), calls
