"""`the-loop hooks` (R5.1), `hooks run` (the dry run), `hooks schema`, and abuse case 1."""

from __future__ import annotations

import json
import os
import re
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from the_loop.cli import main
from the_loop.errors import HooksConfigError
from the_loop.hooks.declaring.declaration import HOOK_ENTRY, parse_hooks
from the_loop.hooks.declaring.schema import hooks_schema
from the_loop.hooks.engine.points import POINTS, SPECS

WriteConfig = Callable[..., Path]

PREFIX_HOOK = """
from the_loop.hooks.engine.executor import LifecycleHooks


class PrefixHooks(LifecycleHooks):
    def __init__(self, prefix="ACME: "):
        self.prefix = prefix

    def session_spawn(self, ctx):
        ctx.prompt = self.prefix + ctx.prompt
        return ctx
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse usage errors
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def declared(tmp_path: Path, write_config: WriteConfig) -> Path:
    """A declaration whose module and path entries would fail to import if anything tried."""
    marker = tmp_path / "imported.txt"
    write(tmp_path / "hooks" / "boom.py", f"""
        with open({str(marker)!r}, "w") as fh:
            fh.write("imported")
        raise RuntimeError("this file must not be imported by a listing")
    """)
    return write_config("""
        hooks:
          - name: boom
            path: hooks/boom.py
            on: [session_spawn]
          - name: telemetry
            module: acme_not_installed.telemetry
          - name: compliance
            url: https://127.0.0.1:9/hooks
            tokenEnv: COMPLIANCE_TOKEN
            headers: {X-Team: platform}
            required: true
          - name: house-rules
            policy: policies
            enabled: false
    """)


# ------------------------------------------------------------------------ listing


def test_r5_1_hooks_lists_entries_without_importing_or_contacting(
    capsys: pytest.CaptureFixture[str], declared: Path, tmp_path: Path
) -> None:
    code, out, err = cli(capsys, "--config", str(declared), "hooks")
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        f"{declared}:",
        "  NAME         KIND    TARGET                        POINTS         REQUIRED  ENABLED",
        "  boom         local   hooks/boom.py                 session_spawn  no        yes",
        "  telemetry    local   acme_not_installed.telemetry  (default)      no        yes",
        "  compliance   remote  https://127.0.0.1:9/hooks     (default)      yes       yes",
        "  house-rules  policy  policies                      (default)      no        no",
    ]
    assert not (tmp_path / "imported.txt").exists()


def test_r5_1_hooks_json_lists_the_same_without_importing(
    capsys: pytest.CaptureFixture[str], declared: Path, tmp_path: Path
) -> None:
    code, out, _ = cli(capsys, "--config", str(declared), "hooks", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["config"] == str(declared)
    assert data["hooks"][0] == {
        "name": "boom", "kind": "local", "declared_as": "path", "target": "hooks/boom.py",
        "points": ["session_spawn"], "required": False, "enabled": True,
    }
    assert [(h["name"], h["kind"], h["declared_as"], h["enabled"]) for h in data["hooks"]] == [
        ("boom", "local", "path", True), ("telemetry", "local", "module", True),
        ("compliance", "remote", "url", True), ("house-rules", "policy", "policy", False),
    ]
    assert not (tmp_path / "imported.txt").exists()


def test_r5_1_listing_in_a_fresh_process_imports_nothing(
    run_cli: Any, declared: Path, tmp_path: Path
) -> None:
    result = run_cli("--config", str(declared), "hooks")
    assert result.returncode == 0, result.stderr
    assert "acme_not_installed.telemetry" in result.stdout
    assert not (tmp_path / "imported.txt").exists()


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("hooks:\n  - {name: a}\n",
         f"hooks[0] ('a') → {'/'.join(HOOK_ENTRY.variants)}: expected exactly one of "
         f"{', '.join(HOOK_ENTRY.variants)}; got none"),
        ("hooks: [\n", "not valid YAML at line 2, column 1"),
        ("hooks: []\nhook: []\n",
         "unknown top-level key 'hook' (did you mean 'hooks'?). Allowed keys: loop, stateDir, "),
    ],
)
def test_r5_1_hooks_exits_1_with_the_load_error(
    capsys: pytest.CaptureFixture[str], write_config: WriteConfig, text: str, says: str
) -> None:
    cfg = write_config(text)
    for argv in (("hooks",), ("hooks", "--json")):
        code, out, err = cli(capsys, "--config", str(cfg), *argv)
        assert (code, out) == (1, "")
        assert err.startswith("the-loop: ") and says in err


def test_r5_1_hooks_exits_1_when_the_config_file_is_missing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    missing = tmp_path / "nope.yaml"
    code, _, err = cli(capsys, "--config", str(missing), "hooks")
    assert code == 1
    assert err == (
        f"the-loop: {missing}: no such file. Pass --config PATH, set $THE_LOOP_CLI_CONFIG, or "
        "run `the-loop init` to write ./.the-loop/cli-config.yaml\n"
    )


def test_r5_1_hooks_with_no_config_anywhere_says_so(run_cli: Any, tmp_path: Path) -> None:
    result = run_cli("hooks")
    assert (result.returncode, result.stdout) == (
        0, "no cli-config.yaml found (pass --config PATH, or run `the-loop init` to write "
           "./.the-loop/cli-config.yaml); no hooks declared\n",
    )


def test_events_says_why_it_printed_nothing(run_cli: Any, tmp_path: Path) -> None:
    """On stderr, so stdout stays the records: no config; an empty log; a filter."""
    nothing = run_cli("events")
    assert (nothing.returncode, nothing.stdout) == (0, "")
    assert "no cli-config.yaml found, so no event log to read" in nothing.stderr
    assert list(tmp_path.iterdir()) == [tmp_path / "_home"]  # a read command creates nothing
    (tmp_path / "cli-config.yaml").write_text("loop: acme\nstateDir: state\n",
                                              encoding="utf-8")
    empty = run_cli("events", "--json")
    assert (empty.returncode, empty.stdout) == (0, "")
    assert empty.stderr == (f"the-loop: no events yet in {tmp_path / 'state' / 'events.jsonl'}: "
                            "the loop writes them as it works (`the-loop poll`, `the-loop "
                            "serve`); a dry run (`hooks run`) writes none\n")
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "events.jsonl").write_text(
        '{"ts": 1, "event": "loop.armed", "work_item": "local:acme/app#1"}\n', encoding="utf-8")
    filtered = run_cli("events", "--event", "hooks.*")
    assert (filtered.returncode, filtered.stdout) == (0, "")
    assert "none of the 1 event(s) in" in filtered.stderr
    shown = run_cli("events")
    assert "loop.armed" in shown.stdout and shown.stderr == ""
    # Lines someone else wrote: not events, or with a time that is not one.
    (tmp_path / "state" / "events.jsonl").write_text("garbage\n[1]\n", encoding="utf-8")
    junk = run_cli("events")
    assert junk.returncode == 0 and junk.stderr == (
        f"the-loop: 2 line(s) of {tmp_path / 'state' / 'events.jsonl'} are not events (not "
        "JSON objects); is it the-loop's event log?\n")
    (tmp_path / "state" / "events.jsonl").write_text(
        '{"event": "x", "ts": "soon", "work_item": "a\\nb"}\n{"event": "y", "ts": 1e300}\n',
        encoding="utf-8")
    odd = run_cli("events")
    assert odd.returncode == 0, odd.stderr
    assert odd.stdout.splitlines()[0].startswith('--:--:-- x')
    assert '"a\\nb"' in odd.stdout.splitlines()[0] and len(odd.stdout.splitlines()) == 2


# ------------------------------------------------------------------ abuse case 1


@pytest.fixture
def planted(tmp_path: Path) -> dict[str, Path]:
    """An operator's config folder, and a checkout with a planted file at the same path."""
    operator = tmp_path / "operator"
    checkout = tmp_path / "checkout"
    write(operator / "hooks" / "p.py", PREFIX_HOOK)
    write(operator / "cli-config.yaml", """
        hooks:
          - {name: prefix, path: hooks/p.py, with: {prefix: "OPERATOR: "}}
    """)
    marker = tmp_path / "planted-was-imported"
    write(checkout / "hooks" / "p.py", f"""
        with open({str(marker)!r}, "w") as fh:
            fh.write("pwned")
        from the_loop.hooks.engine.executor import LifecycleHooks
        class PrefixHooks(LifecycleHooks):
            def __init__(self, prefix=""):
                pass
            def session_spawn(self, ctx):
                ctx.prompt = "PLANTED: " + ctx.prompt
                return ctx
    """)
    return {"operator": operator, "checkout": checkout, "marker": marker}


@pytest.mark.parametrize("how", ["--config", "$THE_LOOP_CLI_CONFIG"])
def test_abuse_1_a_file_planted_under_the_working_directory_is_never_imported(
    run_cli: Any, planted: dict[str, Path], how: str
) -> None:
    cfg = planted["operator"] / "cli-config.yaml"
    args = ["--config", str(cfg)] if how == "--config" else []
    env = {"THE_LOOP_CLI_CONFIG": str(cfg)} if how != "--config" else {}
    result = run_cli(*args, "hooks", "run", "session_spawn", "--context", "-", "--json",
                     cwd=planted["checkout"], stdin='{"prompt": "go"}', env=env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["context"]["prompt"] == "OPERATOR: go"
    assert not planted["marker"].exists()


def test_abuse_1_without_the_operators_file_the_load_fails_and_the_plant_stays_cold(
    run_cli: Any, planted: dict[str, Path]
) -> None:
    (planted["operator"] / "hooks" / "p.py").unlink()
    cfg = planted["operator"] / "cli-config.yaml"
    result = run_cli("--config", str(cfg), "hooks", "run", "session_spawn",
                     cwd=planted["checkout"])
    assert result.returncode == 1
    assert result.stderr == (
        f"the-loop: hooks[0] ('prefix') → path: no file at {planted['operator']}/hooks/p.py "
        "(relative paths resolve against the folder of cli-config.yaml)\n"
    )
    assert not planted["marker"].exists()


# ------------------------------------------------------------------------ hooks run


@pytest.fixture
def prefix_config(tmp_path: Path, write_config: WriteConfig) -> Path:
    write(tmp_path / "hooks" / "prefix.py", PREFIX_HOOK)
    write(tmp_path / "hooks" / "broken.py", """
        from the_loop.hooks.engine.executor import LifecycleHooks
        class Broken(LifecycleHooks):
            def session_spawn(self, ctx):
                raise ConnectionError("compliance is down")
    """)
    return write_config("""
        stateDir: state
        hooks:
          - name: prefix
            path: hooks/prefix.py
            with: {prefix: "ACME: "}
          - name: compliance
            path: hooks/broken.py
            required: true
            enabled: false
    """)


def test_hooks_run_prints_the_trace_and_final_decisions(
    capsys: pytest.CaptureFixture[str], prefix_config: Path, tmp_path: Path
) -> None:
    ctx = write(tmp_path / "ctx.json", '{"prompt": "Fix the bug.", "labels": ["loop"]}')
    code, out, err = cli(capsys, "--config", str(prefix_config), "hooks", "run",
                         "session_spawn", "--context", str(ctx))
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == "session_spawn: 1 hook(s) run: prefix"
    assert re.fullmatch(
        r'  prefix +changed +\d+\.\d{3} ms  changed prompt="ACME: Fix the bug\."', lines[1]
    ), lines[1]
    assert lines[2:] == [
        "final decisions:",
        '  prompt = "ACME: Fix the bug."',
        "  proceed = true",
        '  reason = ""',
    ]
    assert not (tmp_path / "state" / "events.jsonl").exists()  # a dry run records nothing


def test_hooks_run_json_is_point_context_and_trace(
    run_cli: Any, prefix_config: Path
) -> None:
    result = run_cli("--config", str(prefix_config), "hooks", "run", "session_spawn",
                     "--context", "-", "--json", stdin='{"prompt": "Fix the bug."}')
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert list(data) == ["point", "context", "trace"]
    assert data["point"] == "session_spawn"
    assert list(data["context"]) == [f.name for f in SPECS["session_spawn"].fields]
    assert data["context"]["prompt"] == "ACME: Fix the bug."
    assert data["context"]["proceed"] is True and data["context"]["labels"] == []
    [step] = data["trace"]
    assert step["hook"] == "prefix" and step["status"] == "changed"
    assert step["changed"] == {"prompt": "ACME: Fix the bug."}
    assert step["error"] == "" and step["dropped"] == [] and step["ms"] >= 0


def test_hooks_run_exits_0_whatever_the_hooks_did(
    capsys: pytest.CaptureFixture[str], prefix_config: Path
) -> None:
    text = prefix_config.read_text(encoding="utf-8").replace("enabled: false", "enabled: true")
    prefix_config.write_text(text, encoding="utf-8")
    code, out, _ = cli(capsys, "--config", str(prefix_config), "hooks", "run", "session_spawn",
                       "--json")
    assert code == 0
    data = json.loads(out)
    assert [(s["hook"], s["status"]) for s in data["trace"]] == [
        ("prefix", "changed"), ("compliance", "failed"),
    ]
    # The failure names the hook's file and line (absolute: the working directory is elsewhere).
    site = f" (at {os.path.realpath(prefix_config.parent / 'hooks' / 'broken.py')}:5)"
    assert data["trace"][1]["error"] == "ConnectionError: compliance is down" + site
    assert data["context"]["proceed"] is False
    assert data["context"]["reason"] == (
        "required hook 'compliance' failed: ConnectionError: compliance is down"
    )


def test_hooks_run_without_context_uses_the_defaults(
    capsys: pytest.CaptureFixture[str], prefix_config: Path
) -> None:
    code, out, _ = cli(capsys, "--config", str(prefix_config), "hooks", "run",
                       "work_item_complete", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["trace"] == [] and data["context"]["announce"] is True


@pytest.mark.parametrize(
    ("argv", "stdin", "says"),
    [
        (["hooks.decided"], "", "'hooks.decided' is not a lifecycle point (it looks like an "
         "event type; events are records, not hook points). Valid points: " + ", ".join(POINTS)),
        (["session_spwn"], "", "did you mean 'session_spawn'? Valid points: "),
        (["session_spawn", "--context", "-"], '{"promt": "x"}',
         "--context: session_spawn has no field 'promt' (did you mean 'prompt'?); valid fields: "
         + ", ".join(f.name for f in SPECS["session_spawn"].fields)),
        (["session_spawn", "--context", "-"], '{"proceed": "no"}',
         "--context: session_spawn.proceed must be bool (got 'no' that is str)"),
        (["session_spawn", "--context", "-"], "[1, 2]",
         "--context: the context must be a JSON object, got list"),
        (["session_spawn", "--context", "-"], "{prompt: x}",
         "--context -: not JSON (line 1, column 2: Expecting property name enclosed in double "
         "quotes)"),
        (["session_spawn", "--context", "/nonexistent/ctx.json"], "",
         "--context /nonexistent/ctx.json: cannot read: No such file or directory"),
    ],
    ids=["event-type", "typo", "unknown-field", "wrong-type", "not-object", "not-json",
         "no-file"],
)
def test_hooks_run_exits_2_on_a_bad_point_or_context(
    run_cli: Any, prefix_config: Path, argv: list[str], stdin: str, says: str
) -> None:
    result = run_cli("--config", str(prefix_config), "hooks", "run", *argv, stdin=stdin)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.startswith("the-loop: ") and says in result.stderr, result.stderr


def test_hooks_run_exits_1_when_the_declaration_cannot_load(
    capsys: pytest.CaptureFixture[str], write_config: WriteConfig
) -> None:
    cfg = write_config("hooks:\n  - {name: gone, path: gone.py}\n")
    code, out, err = cli(capsys, "--config", str(cfg), "hooks", "run", "session_spawn")
    assert (code, out) == (1, "")
    assert err.startswith("the-loop: hooks[0] ('gone') → path: no file at ")


# ------------------------------------------------------------------------ the schema


def test_hooks_schema_prints_the_shipped_schema(capsys: pytest.CaptureFixture[str]) -> None:
    """The whole cli-config.yaml schema, whose `hooks` is the hooks section's schema."""
    code, out, _ = cli(capsys, "hooks", "schema")
    assert code == 0
    hooks = json.loads(out)["properties"]["hooks"]
    assert hooks.pop("description") == "the hooks chain (list of entries)"
    assert hooks == hooks_schema()["properties"]["hooks"]
    assert json.loads(out)["$schema"] == "https://json-schema.org/draft/2020-12/schema"


ANNOTATIONS = {"$schema", "$id", "title", "description", "default"}


def _type_ok(value: Any, name: str) -> bool:
    return {
        "string": isinstance(value, str), "boolean": isinstance(value, bool),
        "array": isinstance(value, list), "object": isinstance(value, dict),
        "null": value is None,
        "number": isinstance(value, int | float) and not isinstance(value, bool),
    }[name]


def _search(pattern: str, text: str) -> bool:
    # ECMA-262 `$` is the end of input; Python's `$` also matches before a final newline.
    if pattern.endswith("$") and not pattern.endswith("\\$"):
        pattern = pattern[:-1] + r"\Z"
    return re.search(pattern, text) is not None


def valid(value: Any, schema: dict[str, Any]) -> bool:
    """A tiny JSON Schema checker for exactly the keywords `hooks_schema()` uses."""
    unknown = set(schema) - ANNOTATIONS - {
        "type", "enum", "pattern", "minLength", "exclusiveMinimum", "maximum", "items",
        "minItems", "uniqueItems", "required", "properties", "additionalProperties",
        "propertyNames", "oneOf", "not",
    }
    assert not unknown, f"the test's checker does not know {unknown}"
    checks: list[bool] = []
    if "type" in schema:
        names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_type_ok(value, n) for n in names):
            return False
    if "enum" in schema:
        checks.append(any(type(value) is type(e) and value == e for e in schema["enum"]))
    if isinstance(value, str):
        if "pattern" in schema:
            checks.append(_search(schema["pattern"], value))
        if "minLength" in schema:
            checks.append(len(value) >= schema["minLength"])
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "exclusiveMinimum" in schema:
            checks.append(value > schema["exclusiveMinimum"])
        if "maximum" in schema:
            checks.append(value <= schema["maximum"])
    if isinstance(value, list):
        if "items" in schema:
            checks.append(all(valid(v, schema["items"]) for v in value))
        checks.append(len(value) >= schema.get("minItems", 0))
        if schema.get("uniqueItems"):
            dumped = [json.dumps(v, sort_keys=True) for v in value]
            checks.append(len(dumped) == len(set(dumped)))
    if isinstance(value, dict):
        props = schema.get("properties", {})
        checks.append(all(k in value for k in schema.get("required", ())))
        for key, item in value.items():
            if "propertyNames" in schema:
                checks.append(valid(key, schema["propertyNames"]))
            if key in props:
                checks.append(valid(item, props[key]))
            elif schema.get("additionalProperties") is False:
                checks.append(False)
            elif isinstance(schema.get("additionalProperties"), dict):
                checks.append(valid(item, schema["additionalProperties"]))
    if "oneOf" in schema:
        checks.append(sum(valid(value, s) for s in schema["oneOf"]) == 1)
    if "not" in schema:
        checks.append(not valid(value, schema["not"]))
    return all(checks)


def loader_accepts(hooks: Any) -> bool:
    try:
        parse_hooks(hooks, Path("/srv/loop"))
    except HooksConfigError:
        return False
    return True


GOOD: list[Any] = [
    None,
    [],
    [{"name": "prefix", "path": "hooks/prefix.py", "on": "session_spawn"}],
    [{"name": "prefix", "path": "~/hooks/p.py", "executor": "PrefixHooks",
      "with": {"prefix": "ACME: "}, "on": ["session_spawn", "phase_changed"]}],
    [{"name": "telemetry", "module": "acme_hooks.telemetry", "with": None}],
    [{"name": "compliance", "url": "https://compliance.acme.example/hooks",
      "tokenEnv": "COMPLIANCE_TOKEN", "headers": {"X-Team": "platform"},
      "timeoutSeconds": 5, "required": True, "enabled": True}],
    [{"name": "local", "url": "http://127.0.0.1:8765/", "timeoutSeconds": 0.5}],
    [{"name": "local", "url": "http://localhost/hooks", "tokenEnv": "T", "headers": None}],
    [{"name": "local", "url": "http://[::1]:9000/x"}],
    [{"name": "house-rules", "policy": "policies", "required": True}],
    [{"name": "a1", "module": "a"}, {"name": "b-2", "path": "/abs/b.py", "enabled": False}],
]

BAD: list[Any] = [
    {"name": "a", "module": "m"},
    ["acme.hooks"],
    [{"module": "acme.x"}],
    [{"name": "Prefix", "module": "acme.x"}],
    [{"name": "a\n", "module": "acme.x"}],
    [{"name": 7, "module": "acme.x"}],
    [{"name": "bare"}],
    [{"name": "both", "module": "acme.x", "path": "x.py"}],
    [{"name": "a", "module": "acme.x", "requird": True}],
    [{"name": "a", "module": "acme.x", "on": ["hooks.decided"]}],
    [{"name": "a", "module": "acme.x", "on": []}],
    [{"name": "a", "module": "acme.x", "on": None}],
    [{"name": "a", "module": "acme.x", "on": ["session_spawn", "session_spawn"]}],
    [{"name": "a", "module": "acme.x", "on": [["session_spawn"]]}],
    [{"name": "a", "path": "a.py", "tokenEnv": "T"}],
    [{"name": "a", "module": "acme.x", "headers": {"X-Team": "a"}}],
    [{"name": "a", "url": "https://h.example/", "executor": "X"}],
    [{"name": "a", "url": "https://h.example/", "with": {"a": 1}}],
    [{"name": "a", "policy": "p", "timeoutSeconds": 3}],
    [{"name": "a", "module": "acme.x", "required": "yes"}],
    [{"name": "a", "module": "acme.x", "enabled": 1}],
    [{"name": "a", "module": "acme/hooks.py"}],
    [{"name": "a", "path": ""}],
    [{"name": "a", "path": "   "}],
    [{"name": "a", "policy": ""}],
    [{"name": "a", "url": "ftp://h.example/x"}],
    [{"name": "a", "url": "https://"}],
    [{"name": "a", "url": "http://hooks.example/x"}],
    [{"name": "a", "url": "http://hooks.example/x", "tokenEnv": "T"}],
    [{"name": "a", "url": "https://user:pw@h.example/"}],
    [{"name": "a", "url": "https://h.example/", "tokenEnv": "$TOKEN"}],
    [{"name": "a", "url": "https://h.example/", "tokenEnv": ""}],
    [{"name": "a", "url": "https://h.example/", "headers": {"Authorization": "Bearer x"}}],
    [{"name": "a", "url": "https://h.example/", "headers": {"aUtHoRiZaTiOn": "x"}}],
    [{"name": "a", "url": "https://h.example/", "headers": {"Content-Type": "text/plain"}}],
    [{"name": "a", "url": "https://h.example/", "headers": "X-Team: a"}],
    [{"name": "a", "url": "https://h.example/", "headers": {"X-Team": 5}}],
    [{"name": "a", "url": "https://h.example/", "headers": {"X Team": "a"}}],
    [{"name": "a", "url": "https://h.example/", "headers": {"X-Team": "a\r\nX-Evil: 1"}}],
    [{"name": "a", "url": "https://h.example/", "timeoutSeconds": 0}],
    [{"name": "a", "url": "https://h.example/", "timeoutSeconds": "10"}],
    [{"name": "a", "url": "https://h.example/", "timeoutSeconds": 301}],
    [{"name": "a", "url": "https://h.example/", "timeoutSeconds": True}],
    [{"name": "a", "module": "acme.x", "executor": "my-class"}],
    [{"name": "a", "module": "acme.x", "executor": None}],
    [{"name": "a", "module": "acme.x", "with": ["a"]}],
    [{"name": "a", "module": "acme.x", "with": {"bad key": 1}}],
]

#: Rules the loader enforces across entries, which a JSON Schema cannot express.
LOADER_ONLY: list[Any] = [
    [{"name": "same", "module": "a"}, {"name": "same", "module": "b"}],
]


@pytest.mark.parametrize("hooks", GOOD, ids=lambda h: json.dumps(h)[:60])
def test_schema_and_loader_accept_the_same_good_declarations(hooks: Any) -> None:
    assert loader_accepts(hooks)
    assert valid({"hooks": hooks}, hooks_schema())


@pytest.mark.parametrize("hooks", BAD, ids=lambda h: json.dumps(h)[:60])
def test_schema_and_loader_refuse_the_same_bad_declarations(hooks: Any) -> None:
    assert not loader_accepts(hooks)
    assert not valid({"hooks": hooks}, hooks_schema())


@pytest.mark.parametrize("hooks", LOADER_ONLY)
def test_schema_leaves_cross_entry_rules_to_the_loader(hooks: Any) -> None:
    assert not loader_accepts(hooks)
    assert valid({"hooks": hooks}, hooks_schema())


def test_abuse_1_a_module_planted_in_the_working_directory_is_never_imported(
    spawn_cli: Any, tmp_path: Path
) -> None:
    """`python -m the_loop` puts the working directory on sys.path; a `module:` entry must
    still only import an installed module, not one a session planted in its checkout."""
    operator, checkout = tmp_path / "operator", tmp_path / "checkout"
    marker = tmp_path / "planted-module-was-imported"
    write(operator / "cli-config.yaml", """
        hooks:
          - {name: telemetry, module: acme_planted_hooks}
    """)
    write(checkout / "acme_planted_hooks.py", f"""
        open({str(marker)!r}, "w").close()
        from the_loop.hooks.engine.executor import LifecycleHooks
        class Planted(LifecycleHooks):
            def session_spawn(self, ctx):
                return None
    """)
    result = spawn_cli("--config", str(operator / "cli-config.yaml"), "hooks", "run",
                     "session_spawn", cwd=checkout)
    assert result.returncode == 1
    assert "hooks[0] ('telemetry') → module: cannot import 'acme_planted_hooks'" in result.stderr
    assert not marker.exists()


def test_the_documented_unknown_key_error_lists_every_top_level_key(
    run_cli: Any, tmp_path: Path
) -> None:
    """declaring-hooks.md shows the error for a misspelt top-level key word for word."""
    config = write(tmp_path / "srv" / "loop" / "cli-config.yaml", "hook: []\n")
    done = run_cli("--config", str(config), "hooks")
    said = done.stderr.removeprefix("the-loop: ").replace(str(config), "/srv/loop/cli-config.yaml")
    docs = (Path(__file__).parents[2] / "docs" / "declaring-hooks.md").read_text("utf-8")
    assert done.returncode == 1 and "decisionLog" in said
    assert said.strip() in docs.splitlines()


@pytest.mark.parametrize(("url", "loads"), [
    ("http://127.0.0.2:8765/hooks", True), ("http://127.255.0.1/hooks", True),
    ("http://10.0.0.5:8080/hooks", False),
])
def test_a_token_over_plain_http_is_refused_except_to_127_0_0_0_8_as_the_error_says(
    run_cli: Any, tmp_path: Path, url: str, loads: bool
) -> None:
    config = write(tmp_path / "cli-config.yaml", f"""
        hooks:
          - {{name: compliance, url: '{url}', tokenEnv: COMPLIANCE_TOKEN}}
    """)
    done = run_cli("--config", str(config), "hooks")
    assert done.returncode == (0 if loads else 1), done.stderr
    if not loads:
        assert "only allowed to a loopback host (127.0.0.0/8, ::1, localhost)" in done.stderr
