"""Issue 11 rule 7 (one line and exit 1, never a traceback) and issue 13 item 3 (one error tree).

Each bad input goes through the real CLI in a fresh interpreter.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
from jmespath import exceptions as jmes_errors

import the_loop.errors as errors_module
from conftest import CliRun
from the_loop.cli.app import unexpected
from the_loop.errors import ExpressionError, LoopError
from the_loop.hooks.policy import expressions
from the_loop.hooks.policy.expressions import compile_policy_expression

SRC = Path(__file__).resolve().parents[2] / "src" / "the_loop"


def _one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


def _config(tmp_path: Path, data: bytes | str) -> Path:
    path = tmp_path / "cli-config.yaml"
    if isinstance(data, str):
        data = data.encode("utf-8")
    path.write_bytes(data)
    return path


# ------------------------------------------------------------------ cli-config.yaml

@pytest.mark.parametrize(("data", "says"), [
    (b"loop: caf\xe9\n", "cannot read: not UTF-8 text (byte 0xe9 at offset 9); save it as UTF-8"),
    (bytes(range(256)), "cannot read: not UTF-8 text (byte 0x80 at offset 128)"),
    (b"loop: acme\n\x00\x01\x02\n", "not valid YAML at offset 11: unacceptable character "
                                      "#x0000: control characters are not allowed"),
    (("loop: acme\nhooks:\n  - {name: a, url: 'https://h.example/x', timeoutSeconds: "
      + "9" * 5000 + "}\n").encode(),
     "not valid YAML at line 3, column 59: an integer of 5000 digits; at most 100"),
], ids=["latin-1", "binary", "control-characters", "5000-digit-integer"])
def test_rule7_an_unreadable_cli_config_is_one_line_naming_the_file(
        tmp_path: Path, run_cli: CliRun, data: bytes, says: str) -> None:
    config = _config(tmp_path, data)
    done = run_cli("--config", str(config), "hooks")
    assert done.returncode == 1
    line = _one_line(done.stderr)
    assert line.startswith(f"the-loop: {config}: ")
    assert says in line


def test_rule7_state_dir_pointing_at_a_file_is_one_line(tmp_path: Path, run_cli: CliRun) -> None:
    (tmp_path / "state").write_text("not a folder\n", encoding="utf-8")
    config = _config(tmp_path, "loop: acme\nstateDir: state\n")
    done = run_cli("--config", str(config), "poll", "--once")
    assert done.returncode == 1
    line = _one_line(done.stderr)
    assert str(tmp_path / "state") in line and "stateDir" in line


def test_rule7_on_a_list_of_lists_in_a_hooks_entry_is_one_line(
        tmp_path: Path, run_cli: CliRun) -> None:
    (tmp_path / "pol").mkdir()
    config = _config(tmp_path, "loop: acme\nhooks:\n  - {name: a, policy: pol, "
                               "on: [[session_spawn]]}\n")
    done = run_cli("--config", str(config), "hooks")
    assert done.returncode == 1
    assert _one_line(done.stderr) == (
        "the-loop: hooks[0] ('a') → on: ['session_spawn'] is not a lifecycle point. Valid "
        "points: work_item_start, session_spawn, session_spawned, waiting_for_input, "
        "input_received, phase_changed, work_item_complete")


# ------------------------------------------------------------------------ policy files

@pytest.mark.parametrize(("data", "says"), [
    (b"rules:\n  - {name: a, on: [[session_spawn]], set: {prompt: x}}\n",
     "rule 'a' → on: ['session_spawn'] is not a lifecycle point."),
    (b"rules:\n  - {name: a, on: [{x: 1}], set: {prompt: x}}\n",
     "rule 'a' → on: {'x': 1} is not a lifecycle point."),
    (b"\xff\xfe\x00r\x00u\x00l\x00e\x00s",
     "cannot read: not UTF-8 text (byte 0xff at offset 0)"),
    (b"rules:\n  - {name: a, on: session_spawn, set: {proceed: " + b"1" * 5000 + b"}}\n",
     "not valid YAML at line 2, column 49: an integer of 5000 digits"),
], ids=["on-list-of-lists", "on-list-of-mappings", "utf-16", "5000-digit-integer"])
def test_rule7_a_broken_rule_file_is_one_line_naming_the_file(
        tmp_path: Path, run_cli: CliRun, data: bytes, says: str) -> None:
    folder = tmp_path / "policies"
    folder.mkdir()
    (folder / "rules.yaml").write_bytes(data)
    done = run_cli("policy", "check", str(folder))
    assert done.returncode == 1
    line = _one_line(done.stderr)
    assert line.startswith(f"the-loop: {folder / 'rules.yaml'}: ")
    assert says in line


# --------------------------------------------------------------------------- items show

@pytest.mark.parametrize("ref", [
    "99999999999999999999999", "local:acme/app#99999999999999999999999", "9" * 5000,
])
def test_rule7_an_out_of_range_ref_is_one_line(tmp_path: Path, run_cli: CliRun, ref: str) -> None:
    config = _config(tmp_path, "loop: acme\nstateDir: state\n")
    assert run_cli("--config", str(config), "items", "add", "one").returncode == 0
    for command in (("items", "show", ref), ("items", "close", ref), ("start", ref)):
        done = run_cli("--config", str(config), *command)
        assert done.returncode == 1, command
        line = _one_line(done.stderr)
        assert "no work item has a number that large; list them with `the-loop items list`" \
            in line
        assert len(line) < 300


# ---------------------------------------------------------------------- the last guard

def test_rule7_the_last_guard_names_an_os_error_file_and_calls_anything_else_a_bug() -> None:
    assert unexpected(IsADirectoryError(21, "Is a directory", "/srv/x")) == (
        "/srv/x: Is a directory; check the path and its permissions")
    assert unexpected(ZeroDivisionError("division by zero")) == (
        "unexpected error: ZeroDivisionError: division by zero. This is a bug in the-loop; "
        "run again with THE_LOOP_DEBUG=1 for the traceback and report it")


# ---------------------------------------------------------------------- one error tree

def _error_classes() -> list[type[BaseException]]:
    return [obj for _, obj in inspect.getmembers(errors_module, inspect.isclass)
            if issubclass(obj, BaseException) and obj.__module__ == errors_module.__name__]


def test_i13_3_every_error_a_user_meets_is_a_loop_error_drawn_in_the_docstring() -> None:
    doc = errors_module.__doc__ or ""
    names = {cls.__name__ for cls in _error_classes()}
    assert {"ConfigError", "HooksConfigError", "PolicyError", "ExpressionError", "HookError",
            "TrackerError", "UsageError"} <= names
    for cls in _error_classes():
        assert issubclass(cls, LoopError), cls
        assert re.search(rf"[├└]── {cls.__name__}\b", doc) or cls is LoopError, cls.__name__
    from the_loop.hooks.engine.executor import HookError
    from the_loop.hooks.policy import PolicyError
    from the_loop.runtime.tracker import TrackerError

    assert HookError is errors_module.HookError
    assert PolicyError is errors_module.PolicyError
    assert TrackerError is errors_module.TrackerError


@pytest.mark.parametrize(("text", "reason"), [
    ("", "empty"), ("a ==", "incomplete"), ("a ~ b", "lexer"), ("a.]", "syntax"),
    ("length(a, b)", "arity"), ("not_null()", "variadic-arity"), ("nope(a)", "unknown-function"),
    ("regex_match('(a)\\1', a)", "bad-regex"), ("(" * 5000 + "a" + ")" * 5000, "too-deep"),
])
def test_i13_3_jmespath_errors_become_one_error_of_ours_where_compiled(
        text: str, reason: str) -> None:
    with pytest.raises(ExpressionError) as info:
        compile_policy_expression(text)
    assert info.value.reason == reason
    assert not isinstance(info.value, jmes_errors.JMESPathError)


def test_i13_3_a_bug_in_the_compiler_is_never_reported_as_a_syntax_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise AttributeError("a bug of ours")

    monkeypatch.setattr(expressions, "compile_expression", broken)
    with pytest.raises(AttributeError, match="a bug of ours"):
        compile_policy_expression("a == 'b'")


def test_i13_3_nothing_matches_exception_class_names_as_strings() -> None:
    pattern = re.compile(r"(type\([^)]*\)\.__name__|__class__\.__name__|\bkind)\s*(==|in)\s*"
                         r"[\"'(]\s*[\"']?[A-Z][A-Za-z]*(Error|Exception)")
    found = [f"{path.relative_to(SRC)}:{n}"
             for path in SRC.rglob("*.py")
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if pattern.search(line)]
    assert found == []
