"""A failing Python hook's error names its file and line (issue 15 item 8).

The location is the line in the hook's own code, not in the-loop, the standard library or an
installed package, and it is printed wherever the failure is: `hooks run` (text and JSON),
the `hooks.failed` event, a required hook's refusal, a load error, and `hooks serve`'s own
log line (never the JSON-RPC answer: a caller learns what was raised, not the server's files).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from hook_helpers import line_of
from serving_helpers import Served, free_port, post
from the_loop.errors import HooksConfigError
from the_loop.events import EventLog
from the_loop.hooks.declaring.loading import load_chain
from the_loop.hooks.engine.chain import Chain, Link
from the_loop.hooks.engine.points import SessionSpawn
from the_loop.hooks.executors.remote import RemoteExecutor
from the_loop.sdk.hooks import LifecycleHooks

# A hook that fails in a helper function of its own, one that fails inside the standard library,
# and one that raises the same exception object on every call.
ACME = """\
import json
from the_loop.sdk.hooks import LifecycleHooks

STALE = LookupError("no such ticket")


def check_ticket(prompt):
    if "TICKET-" not in prompt:
        raise ValueError("the prompt names no ticket")


class Acme(LifecycleHooks):
    def session_spawn(self, ctx):
        check_ticket(ctx.prompt)


class Parse(LifecycleHooks):
    def session_spawn(self, ctx):
        data = json.loads(ctx.prompt)
        return data


class Cached(LifecycleHooks):
    calls = 0

    def session_spawn(self, ctx):
        Cached.calls += 1
        if Cached.calls == 1:
            raise STALE  # first
        raise STALE  # again
"""
CONFIG = """\
loop: acme
stateDir: state
hooks:
  - {name: acme, path: hooks/acme.py, executor: Acme}
  - {name: parse, path: hooks/acme.py, executor: Parse}
  - {name: cached, path: hooks/acme.py, executor: Cached}
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "hooks").mkdir()
    (tmp_path / "hooks" / "acme.py").write_text(ACME, encoding="utf-8")
    (tmp_path / "cli-config.yaml").write_text(CONFIG, encoding="utf-8")
    return tmp_path


def _at(source: str, text: str, file: str) -> str:
    return f" (at {file}:{line_of(source, text)})"


def test_issue15_a_failing_python_hook_names_its_file_and_line_in_hooks_run(
    project: Path, run_cli: Any
) -> None:
    """From the project folder: paths as the user would open them, lines where they raised."""
    run = run_cli("hooks", "run", "session_spawn", "--context", "-", "--json",
                  cwd=project, stdin='{"prompt": "fix the bug"}')
    assert run.returncode == 0, run.stderr
    errors = [step["error"] for step in json.loads(run.stdout)["trace"]]
    util_line = _at(ACME, "raise ValueError", "hooks/acme.py")
    assert errors[0] == "ValueError: the prompt names no ticket" + util_line
    # Inside json: the line of the hook that called it, not json/decoder.py.
    assert errors[1].startswith("JSONDecodeError: Expecting value")
    assert errors[1].endswith(_at(ACME, "json.loads(ctx.prompt)", "hooks/acme.py"))
    assert errors[2] == "LookupError: no such ticket" + _at(ACME, "raise STALE  # first",
                                                              "hooks/acme.py")

    # The text trace shows the same line the JSON does.
    text = run_cli("hooks", "run", "session_spawn", "--context", "-", cwd=project,
                   stdin='{"prompt": "fix the bug"}')
    assert text.returncode == 0, text.stderr
    assert f"ValueError: the prompt names no ticket{util_line}" in text.stdout


def test_issue15_the_same_exception_object_raised_twice_names_the_second_raise(
    project: Path
) -> None:
    """A cached exception keeps its old traceback; the line shown is where it was raised now."""
    log = EventLog()
    chain = load_chain(project / "cli-config.yaml", log=log)
    errors = []
    for _ in range(2):
        outcome = chain.invoke(SessionSpawn(prompt="p"))
        errors.append([s.error for s in outcome.steps if s.hook == "cached"])
    path = str((project / "hooks" / "acme.py").resolve())
    assert errors == [
        ["LookupError: no such ticket" + _at(ACME, "raise STALE  # first", path)],
        ["LookupError: no such ticket" + _at(ACME, "raise STALE  # again", path)],
    ]


def test_issue15_a_hook_class_whose_constructor_fails_names_the_line(tmp_path: Path) -> None:
    source = textwrap.dedent("""\
        from the_loop.sdk.hooks import LifecycleHooks

        class Db(LifecycleHooks):
            def __init__(self, dsn):
                self.conn = connect(dsn)

            def session_spawn(self, ctx):
                return None
    """)
    (tmp_path / "db.py").write_text(source, encoding="utf-8")
    config = tmp_path / "cli-config.yaml"
    config.write_text("hooks:\n  - {name: db, path: db.py, with: {dsn: x}}\n", encoding="utf-8")
    with pytest.raises(HooksConfigError) as info:
        load_chain(config)
    assert str(info.value) == (
        "hooks[0] ('db'): constructing Db(**with) failed: NameError: name 'connect' is not "
        f"defined (at {(tmp_path / 'db.py').resolve()}:{line_of(source, 'connect(dsn)')})"
    )


def test_issue15_a_failure_in_the_loops_own_code_names_no_hook_line() -> None:
    """A remote hook that cannot be reached fails in our client: no file of the hook to name."""
    remote = RemoteExecutor(name="gone", url=f"http://127.0.0.1:{free_port()}/", timeout=2)
    log = EventLog()
    chain = Chain([Link("gone", remote, frozenset({"session_spawn"}))], log=log)
    [step] = chain.invoke(SessionSpawn(prompt="p")).steps
    assert step.status == "failed" and step.error
    assert "(at " not in step.error


def test_issue15_hooks_serve_logs_where_a_served_hook_raised_but_never_tells_the_caller(
    project: Path
) -> None:
    served = Served(["hooks", "serve", "--path", "hooks/acme.py", "--executor", "Acme",
                     "--port", "0"], project)
    try:
        status, body = post(served.url, {"jsonrpc": "2.0", "method": "session_spawn",
                                          "params": {"prompt": "p"}, "id": 1})
    finally:
        code, err = served.stop()
    assert code == 0, err
    assert status == 200
    assert body["error"]["message"] == (
        "hook Acme raised at session_spawn: ValueError: the prompt names no ticket")
    [line] = [x for x in err.splitlines() if x.startswith("the-loop: session_spawn ")]
    assert line.endswith(" ms: hook Acme raised at session_spawn: ValueError: the prompt names "
                         "no ticket (raised at hooks/acme.py:"
                         f"{line_of(ACME, 'raise ValueError')})"), line


def test_issue15_a_hook_file_name_with_a_newline_cannot_split_a_log_line() -> None:
    """The file name is the hook's choice (`compile`); the location stays on one line."""
    source = ("from the_loop.sdk.hooks import LifecycleHooks\n"
              "class Odd(LifecycleHooks):\n"
              "    def session_spawn(self, ctx):\n"
              "        raise ValueError('x')\n")
    scope: dict[str, Any] = {}
    exec(compile(source, "/tmp/a\nforged: line", "exec"), scope)
    chain = Chain([Link("odd", scope["Odd"](), frozenset({"session_spawn"}))], log=EventLog())
    [step] = chain.invoke(SessionSpawn(prompt="p")).steps
    assert step.error == 'ValueError: x (at "/tmp/a\\nforged: line":4)'


def test_issue15_a_refusal_reason_says_what_was_raised_not_where(project: Path) -> None:
    """`hooks serve --declared`: a required hook that raises refuses; the caller's reason has
    no file of the server, the server's own stderr has the line."""
    (project / "cli-config.yaml").write_text(
        "loop: acme\nstateDir: state\nhooks:\n"
        "  - {name: acme, path: hooks/acme.py, executor: Acme, required: true}\n",
        encoding="utf-8")
    served = Served(["hooks", "serve", "--declared", "--port", "0"], project,
                    env={"THE_LOOP_CLI_CONFIG": str(project / "cli-config.yaml")})
    try:
        _, body = post(served.url, {"jsonrpc": "2.0", "method": "session_spawn",
                                    "params": {"prompt": "p"}, "id": 1})
    finally:
        code, err = served.stop()
    assert code == 0, err
    assert body["result"]["proceed"] is False
    assert body["result"]["reason"] == (
        "required hook 'acme' failed: ValueError: the prompt names no ticket")
    assert ("hooks.failed acme: ValueError: the prompt names no ticket (at hooks/acme.py:"
            f"{line_of(ACME, 'raise ValueError')})") in err


def test_issue15_a_virtualenv_inside_the_hooks_folder_is_not_the_hooks_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A project with its .venv under the hook's folder: a library's raise inside it is
    blamed on the hook's line that called the library."""
    import the_loop.hooks.engine.location as location

    lib = tmp_path / ".venv" / "site-packages"
    lib.mkdir(parents=True)
    (lib / "parser_lib.py").write_text("def parse(text):\n    raise ValueError('bad')\n",
                                       encoding="utf-8")
    monkeypatch.setattr(location, "_LIBRARIES", (str(lib.resolve()) + "/",))
    monkeypatch.syspath_prepend(str(lib))
    source = ("from the_loop.sdk.hooks import LifecycleHooks\nimport parser_lib\n\n"
              "class Uses(LifecycleHooks):\n    def session_spawn(self, ctx):\n"
              "        parser_lib.parse(ctx.prompt)\n")
    (tmp_path / "uses.py").write_text(source, encoding="utf-8")
    config = tmp_path / "cli-config.yaml"
    config.write_text("hooks:\n  - {name: uses, path: uses.py}\n", encoding="utf-8")
    [step] = load_chain(config).invoke(SessionSpawn(prompt="p")).steps
    assert step.error == (f"ValueError: bad (at {(tmp_path / 'uses.py').resolve()}:"
                          f"{line_of(source, 'parser_lib.parse(ctx.prompt)')})")


def test_issue15_a_class_whose_metaclass_hides_init_fails_its_entry_not_the_command(
    tmp_path: Path
) -> None:
    (tmp_path / "meta.py").write_text(textwrap.dedent("""\
        from the_loop.sdk.hooks import LifecycleHooks

        class Hide(type(LifecycleHooks)):
            def __getattribute__(cls, name):
                if name == "__init__":
                    raise RuntimeError("metaclass says no")
                return super().__getattribute__(name)

        class Meta(LifecycleHooks, metaclass=Hide):
            def __init__(self):
                raise ValueError("no db")

            def session_spawn(self, ctx):
                return None
    """), encoding="utf-8")
    config = tmp_path / "cli-config.yaml"
    config.write_text("hooks:\n  - {name: meta, path: meta.py}\n", encoding="utf-8")
    with pytest.raises(HooksConfigError) as info:
        load_chain(config)
    assert str(info.value).startswith(
        "hooks[0] ('meta'): constructing Meta(**with) failed: ValueError: no db")


def test_issue15_a_made_up_traceback_cannot_put_a_line_break_in_the_location() -> None:
    class Lying(Exception):
        @property  # type: ignore[misc]
        def __traceback__(self) -> Any:
            class Line(int):
                def __format__(self, spec: str) -> str:
                    return "1\nthe-loop: forged"

            code = type("C", (), {"co_filename": "/tmp/x.py"})()
            frame = type("F", (), {"f_code": code, "f_back": None})()
            return type("T", (), {"tb_frame": frame, "tb_lineno": Line(1), "tb_next": None})()

    class Raises(LifecycleHooks):
        def session_spawn(self, ctx: SessionSpawn) -> None:
            raise Lying("looks fine")

    [step] = Chain([Link("r", Raises(), frozenset({"session_spawn"}))],
                   log=EventLog()).invoke(SessionSpawn(prompt="p")).steps
    assert "\n" not in step.error and step.error.startswith("Lying: looks fine")
