"""The `hooks:` declaration (R3, R4.1, abuse cases 1, 6, 8): strict load, errors that help."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from the_loop.config import read_config
from the_loop.errors import HooksConfigError
from the_loop.events import read_events
from the_loop.hooks import load_chain
from the_loop.hooks.declaring import loading
from the_loop.hooks.declaring.declaration import HOOK_ENTRY, parse_hooks
from the_loop.hooks.declaring.loading import chain_from_config, chain_once
from the_loop.hooks.engine.chain import Chain
from the_loop.hooks.engine.points import POINTS, SessionSpawn, WorkItemStart

WriteConfig = Callable[..., Path]

PREFIX_HOOK = """
from the_loop.hooks.engine.executor import LifecycleHooks


class PrefixHooks(LifecycleHooks):
    def __init__(self, prefix="ACME: "):
        self.prefix = prefix

    def session_spawn(self, ctx):
        ctx.prompt = self.prefix + ctx.prompt
        return ctx

    def phase_changed(self, ctx):
        return None
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


@pytest.fixture(autouse=True)
def fresh_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test is its own process as far as `chain_once` is concerned."""
    monkeypatch.setattr(loading, "_CACHE", {})


def load_error(write_config: WriteConfig, hooks_yaml: str) -> str:
    cfg = write_config("hooks:\n" + textwrap.indent(textwrap.dedent(hooks_yaml), "  "))
    with pytest.raises(HooksConfigError) as info:
        load_chain(cfg)
    return str(info.value)


# --------------------------------------------------------------- malformed: the table

GOOD_FIRST = "- {name: first, module: acme.first}\n"
POINT_LIST = ", ".join(POINTS)
#: The declaration keys and every allowed key, as the executor registry gives them.
KEYS = ", ".join(HOOK_ENTRY.variants)
ALLOWED = ", ".join(HOOK_ENTRY.allowed())

MALFORMED = [
    # (the bad entry, at index 1 after a good one), the key the message names, what it says
    ("- {module: acme.x}", "hooks[1]", "name",
     "missing; every entry needs a name matching ^[a-z][a-z0-9-]*$"),
    ("- {name: Prefix, module: acme.x}", "hooks[1] ('Prefix')", "name",
     "expected a name matching ^[a-z][a-z0-9-]*$ (lower-case letters, digits and dashes, "
     "starting with a letter), got 'Prefix' (str)"),
    ("- {name: 7, module: acme.x}", "hooks[1]", "name",
     "expected a name matching ^[a-z][a-z0-9-]*$"),
    ("- {name: first, module: acme.y}", "hooks[1] ('first')", "name",
     "duplicate of hooks[0]; names must be unique"),
    ("- {name: bare}", "hooks[1] ('bare')", "/".join(HOOK_ENTRY.variants),
     f"expected exactly one of {KEYS}; got none"),
    ("- {name: both, module: acme.x, path: x.py}", "hooks[1] ('both')",
     "/".join(HOOK_ENTRY.variants), f"expected exactly one of {KEYS}; got module and path"),
    ("- {name: typo, module: acme.x, requird: true}", "hooks[1] ('typo')", "requird",
     f"unknown key (did you mean 'required'?). Allowed keys: {ALLOWED}"),
    ("- {name: typo, url: 'https://h.example/', timeout: 5}", "hooks[1] ('typo')", "timeout",
     "unknown key (did you mean 'timeoutSeconds'?)"),
    ("- {name: ev, module: acme.x, on: [hooks.decided]}", "hooks[1] ('ev')", "on",
     f"'hooks.decided' is not a lifecycle point (it looks like an event type; events are "
     f"records, not hook points). Valid points: {POINT_LIST}"),
    ("- {name: ty, module: acme.x, on: [sesion_spawn]}", "hooks[1] ('ty')", "on",
     f"'sesion_spawn' is not a lifecycle point; did you mean 'session_spawn'? "
     f"Valid points: {POINT_LIST}"),
    ("- {name: em, module: acme.x, on: []}", "hooks[1] ('em')", "on",
     f"expected a point or a non-empty list of points, got [] (list). Valid points: "
     f"{POINT_LIST}"),
    ("- {name: nu, module: acme.x, on: }", "hooks[1] ('nu')", "on",
     "expected a point or a non-empty list of points, got None (NoneType)"),
    ("- {name: tw, module: acme.x, on: [session_spawn, session_spawn]}", "hooks[1] ('tw')",
     "on", "'session_spawn' is listed twice"),
    ("- {name: nested, module: acme.x, on: [[session_spawn]]}", "hooks[1] ('nested')", "on",
     "['session_spawn'] is not a lifecycle point"),
    ("- {name: lo, path: lo.py, tokenEnv: TOKEN}", "hooks[1] ('lo')", "tokenEnv",
     "not allowed on a path entry (keys for a path entry besides name, on, required, "
     "enabled: executor, with, timeoutSeconds)"),
    ("- {name: lo, module: acme.x, headers: {X-Team: a}}", "hooks[1] ('lo')", "headers",
     "not allowed on a module entry"),
    ("- {name: lo, module: acme.x, timeoutSeconds: 0}", "hooks[1] ('lo')", "timeoutSeconds",
     "expected a number of seconds > 0 and ≤ 300, got 0 (int)"),
    ("- {name: re, url: 'https://h.example/', executor: Hooks}", "hooks[1] ('re')", "executor",
     "not allowed on a url entry (keys for a url entry besides name, on, required, enabled: "
     "tokenEnv, headers, timeoutSeconds)"),
    ("- {name: re, url: 'https://h.example/', with: {a: 1}}", "hooks[1] ('re')", "with",
     "not allowed on a url entry"),
    ("- {name: po, policy: policies, executor: X}", "hooks[1] ('po')", "executor",
     "not allowed on a policy entry (keys for a policy entry besides name, on, required, "
     "enabled: none)"),
    ("- {name: rq, module: acme.x, required: yes}", "hooks[1] ('rq')", "required",
     "expected true or false, got 'yes' (str)"),
    ("- {name: en, module: acme.x, enabled: 1}", "hooks[1] ('en')", "enabled",
     "expected true or false, got 1 (int)"),
    ("- {name: mo, module: acme/hooks.py}", "hooks[1] ('mo')", "module",
     "expected a dotted module name like acme.hooks, got 'acme/hooks.py' (for a file, use "
     "path:)"),
    ("- {name: pa, path: ''}", "hooks[1] ('pa')", "path",
     "expected a non-empty string, got '' (str)"),
    ("- {name: pa, path: [a.py]}", "hooks[1] ('pa')", "path",
     "expected a non-empty string, got ['a.py'] (list)"),
    ("- {name: ur, url: 'ftp://h.example/x'}", "hooks[1] ('ur')", "url",
     "expected https://host/path (or http:// to a loopback host), got 'ftp://h.example/x'"),
    ("- {name: ur, url: 'http://hooks.example/x', tokenEnv: T}", "hooks[1] ('ur')", "url",
     "plain http:// is only allowed to a loopback host (127.0.0.0/8, ::1, localhost) and a "
     "bearer token must never cross a network in clear; use https://hooks.example/x"),
    ("- {name: ur, url: 'https://user:hunter22@h.example/'}", "hooks[1] ('ur')", "url",
     "credentials in the URL are not allowed (URL not shown); put the token in an "
     "environment variable and name it with tokenEnv"),
    ("- {name: tk, url: 'https://h.example/', tokenEnv: $TOKEN}", "hooks[1] ('tk')",
     "tokenEnv", "expected the NAME of an environment variable (letters, digits and _, e.g. "
     "COMPLIANCE_TOKEN), got a string that is not a variable name"),
    ("- {name: hd, url: 'https://h.example/', headers: {Authorization: Bearer x}}",
     "hooks[1] ('hd')", "headers", "'Authorization' is not allowed here: put the secret in an "
     "environment variable and name it with tokenEnv"),
    ("- {name: hd, url: 'https://h.example/', headers: 'X-Team: a'}", "hooks[1] ('hd')",
     "headers", "expected a mapping of header name to value, got 'X-Team: a' (str)"),
    ("- {name: hd, url: 'https://h.example/', headers: {X-Team: 5}}", "hooks[1] ('hd')",
     "headers", "X-Team: expected a one-line string value, got 5 (int)"),
    ("- {name: hd, url: 'https://h.example/', headers: {'X Team': a}}", "hooks[1] ('hd')",
     "headers", "'X Team' is not a valid HTTP header name"),
    ("- {name: to, url: 'https://h.example/', timeoutSeconds: 0}", "hooks[1] ('to')",
     "timeoutSeconds", "expected a number of seconds > 0 and ≤ 300, got 0 (int)"),
    ("- {name: to, url: 'https://h.example/', timeoutSeconds: '10'}", "hooks[1] ('to')",
     "timeoutSeconds", "expected a number of seconds > 0 and ≤ 300, got '10' (str)"),
    ("- {name: to, url: 'https://h.example/', timeoutSeconds: 301}", "hooks[1] ('to')",
     "timeoutSeconds", "got 301 (int)"),
    ("- {name: ex, module: acme.x, executor: my-class}", "hooks[1] ('ex')", "executor",
     "expected a class name in the module, got 'my-class' (str)"),
    ("- {name: wi, module: acme.x, with: [a, b]}", "hooks[1] ('wi')", "with",
     "expected a mapping of constructor keyword arguments, got ['a', 'b'] (list)"),
    ("- {name: wi, module: acme.x, with: {'bad key': 1}}", "hooks[1] ('wi')", "with",
     "'bad key' is not a valid keyword argument name"),
]


@pytest.mark.parametrize(
    ("entry", "where", "key", "says"), MALFORMED, ids=[f"{i:02d}-{c[2]}" for i, c in
                                                       enumerate(MALFORMED)],
)
def test_r3_4_malformed_declaration_fails_naming_entry_and_key(
    write_config: WriteConfig, entry: str, where: str, key: str, says: str
) -> None:
    message = load_error(write_config, GOOD_FIRST + entry)
    assert message.startswith(f"{where} → {key}: "), message
    assert says in message, message


def test_r3_4_the_table_covers_at_least_25_cases_and_every_key() -> None:
    assert len(MALFORMED) >= 25
    keys = {key for _, _, key, _ in MALFORMED}
    assert {"name", "on", "required", "enabled", "module", "path", "url", "executor", "with",
            "tokenEnv", "headers", "timeoutSeconds"} <= keys


@pytest.mark.parametrize(
    ("hooks_yaml", "says"),
    [
        ("{name: a, module: acme.x}", "hooks: expected a list of entries, got {'name': 'a', "
         "'module': 'acme.x'} (dict). Write `hooks:` followed by `- name: …` items"),
        ("[acme.hooks]", f"hooks[0]: expected a mapping with name and one of {KEYS}, got "
         "'acme.hooks' (str)"),
    ],
)
def test_r3_4_hooks_that_is_not_a_list_of_entries_fails(
    write_config: WriteConfig, hooks_yaml: str, says: str
) -> None:
    cfg = write_config(f"hooks: {hooks_yaml}\n")
    with pytest.raises(HooksConfigError) as info:
        load_chain(cfg)
    assert str(info.value) == says


@pytest.mark.parametrize("text", ["", "loop: acme\n", "hooks:\n", "hooks: []\n"])
def test_r3_1_an_absent_or_empty_list_changes_nothing(
    write_config: WriteConfig, text: str
) -> None:
    chain = load_chain(write_config(text or "\n"))
    assert chain.links == ()
    ctx = SessionSpawn(prompt="p")
    assert chain.run(ctx) is ctx


# -------------------------------------------------------------------- on: spelling


def test_r3_3_bare_on_key_loads(tmp_path: Path, write_config: WriteConfig) -> None:
    write(tmp_path / "hooks" / "prefix.py", PREFIX_HOOK)
    cfg = write_config("""
        hooks:
          - name: prefix
            path: hooks/prefix.py
            on: [session_spawn]
          - name: quoted
            path: hooks/prefix.py
            "on": session_spawn
    """)
    chain = load_chain(cfg)
    assert chain.names("session_spawn") == ["prefix", "quoted"]
    assert chain.names("phase_changed") == []


def test_r3_3_on_given_in_both_spellings_is_refused(write_config: WriteConfig) -> None:
    cfg = write_config("""
        hooks:
          - name: prefix
            module: acme.prefix
            on: [session_spawn]
            "on": [phase_changed]
    """)
    with pytest.raises(HooksConfigError) as info:
        load_chain(cfg)
    assert str(info.value) == (
        f"{cfg}: not valid YAML at line 6, column 5: found the key 'on' twice"
    )


def test_r3_3_a_yaml_1_1_boolean_on_key_is_read_as_on_and_refused_beside_on() -> None:
    """Embedders who parse with plain PyYAML hand the loader `True` for a bare `on:`."""
    [entry] = parse_hooks([{"name": "a", "module": "acme.a", True: ["session_spawn"]}], Path("/"))
    assert entry.on == ("session_spawn",)
    with pytest.raises(HooksConfigError) as info:
        parse_hooks([{"name": "a", "module": "m", True: ["session_spawn"], "on": []}], Path("/"))
    assert str(info.value) == (
        "hooks[0] ('a') → on: given twice (as `on` and as a YAML 1.1 boolean key); keep one"
    )


# ------------------------------------------------------------- building: import errors

BAD_MODULES = [
    ("import nothing_of_that_name\n", "path",
     "cannot import 'hooks/bad.py': ModuleNotFoundError: No module named "
     "'nothing_of_that_name'"),
    ("raise RuntimeError('boom at import')\n", "path",
     "cannot import 'hooks/bad.py': RuntimeError: boom at import"),
    ("import sys\nsys.exit(4)\n", "path",
     "cannot import 'hooks/bad.py': the hook called sys.exit(4) (at "),
    ("def broken(:\n", "path", "cannot import 'hooks/bad.py': SyntaxError: "),
    ("X = 1\n", "path", "'hooks/bad.py' defines no LifecycleHooks subclass; subclass "
     "the_loop.sdk.hooks.LifecycleHooks"),
    ("from the_loop.hooks.engine.executor import LifecycleHooks\n"
     "class A(LifecycleHooks): pass\nclass B(LifecycleHooks): pass\n", "executor",
     "'hooks/bad.py' defines several LifecycleHooks subclasses (A, B); name one with "
     "executor:"),
    ("from the_loop.hooks.engine.executor import LifecycleHooks\n"
     "class A(LifecycleHooks):\n    def __init__(self):\n        raise ValueError('no db')\n",
     "", "constructing A(**with) failed: ValueError: no db"),
    ("from the_loop.hooks.engine.executor import LifecycleHooks\n"
     "class A(LifecycleHooks):\n    def __init__(self):\n        raise SystemExit(1)\n",
     "", "constructing A(**with) failed: the hook called sys.exit(1) (at "),
]


@pytest.mark.parametrize(("source", "key", "says"), BAD_MODULES,
                         ids=["missing-import", "raises", "sys-exit", "syntax", "no-subclass",
                              "several", "ctor-raises", "ctor-exits"])
def test_r3_5_a_module_that_cannot_become_an_executor_fails_naming_entry_and_cause(
    tmp_path: Path, write_config: WriteConfig, source: str, key: str, says: str
) -> None:
    write(tmp_path / "hooks" / "bad.py", source)
    cfg = write_config("hooks:\n  - name: bad\n    path: hooks/bad.py\n")
    with pytest.raises(HooksConfigError) as info:
        load_chain(cfg)
    where = "hooks[0] ('bad')" + (f" → {key}" if key else "")
    assert str(info.value).startswith(where + ": "), str(info.value)
    assert says in str(info.value)
    assert info.value.entry == "bad"


@pytest.mark.parametrize(
    ("executor", "with_", "says"),
    [
        ("helper", "", "'helper' is not a LifecycleHooks subclass (got function)"),
        ("Missing", "", "'hooks/two.py' has no attribute 'Missing'"),
        ("A", "{nope: 1}", "constructing A(**with) failed: TypeError: "),
    ],
)
def test_r3_5_executor_must_name_a_subclass_that_constructs(
    tmp_path: Path, write_config: WriteConfig, executor: str, with_: str, says: str
) -> None:
    write(tmp_path / "hooks" / "two.py", """
        from the_loop.hooks.engine.executor import LifecycleHooks
        class A(LifecycleHooks):
            def session_spawn(self, ctx):
                return None
        class B(LifecycleHooks):
            pass
        def helper():
            pass
    """)
    extra = f"    with: {with_}\n" if with_ else ""
    cfg = write_config(
        f"hooks:\n  - name: two\n    path: hooks/two.py\n    executor: {executor}\n{extra}"
    )
    with pytest.raises(HooksConfigError) as info:
        load_chain(cfg)
    assert str(info.value).startswith("hooks[0] ('two')")
    assert says in str(info.value)


def test_r3_2_executor_picks_one_of_several_and_with_reaches_the_constructor(
    tmp_path: Path, write_config: WriteConfig
) -> None:
    write(tmp_path / "hooks" / "prefix.py", PREFIX_HOOK + "\nclass Other(PrefixHooks):\n    pass\n")
    cfg = write_config("""
        hooks:
          - name: prefix
            path: hooks/prefix.py
            executor: PrefixHooks
            with: {prefix: "[house] "}
    """)
    assert load_chain(cfg).run(SessionSpawn(prompt="go")).prompt == "[house] go"


def test_r3_2_remote_keys_and_the_defaults_of_an_entry() -> None:
    remote, local = parse_hooks([
        {"name": "compliance", "url": "https://compliance.acme.example/hooks",
         "tokenEnv": "COMPLIANCE_TOKEN", "headers": {"X-Team": "platform"}},
        {"name": "prefix", "path": "hooks/prefix.py"},
    ], Path("/srv/loop"))
    assert (remote.kind, remote.declared_as, remote.resolved, remote.token_env, remote.headers,
            remote.timeout) == (
        "remote", "url", "https://compliance.acme.example/hooks", "COMPLIANCE_TOKEN",
        {"X-Team": "platform"}, 10.0,
    )
    assert (local.kind, local.declared_as, local.resolved, local.executor, local.with_) == (
        "local", "path", "/srv/loop/hooks/prefix.py", "", {},
    )
    for entry in (remote, local):
        assert (entry.on, entry.required, entry.enabled) == (None, False, True)


def test_r3_1_module_imports_an_installed_dotted_module(
    tmp_path: Path, write_config: WriteConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path / "site" / "acme_t3" / "__init__.py", "")
    write(tmp_path / "site" / "acme_t3" / "hooks.py", PREFIX_HOOK)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    cfg = write_config("hooks:\n  - {name: acme, module: acme_t3.hooks}\n")
    assert load_chain(cfg).run(SessionSpawn(prompt="x")).prompt == "ACME: x"


def test_r3_5_a_module_that_is_not_installed_fails_naming_the_entry(
    write_config: WriteConfig,
) -> None:
    message = load_error(write_config, "- {name: tele, module: acme_not_installed.telemetry}")
    assert message == (
        "hooks[0] ('tele') → module: cannot import 'acme_not_installed.telemetry': "
        "ModuleNotFoundError: No module named 'acme_not_installed'"
    )


def test_r3_1_a_missing_path_file_names_where_it_was_looked_for(
    tmp_path: Path, write_config: WriteConfig
) -> None:
    message = load_error(write_config, "- {name: gone, path: hooks/gone.py}")
    assert message == (
        f"hooks[0] ('gone') → path: no file at {tmp_path / 'hooks' / 'gone.py'} (relative "
        "paths resolve against the folder of cli-config.yaml)"
    )


def test_r3_1_path_may_be_absolute_or_home_relative(
    tmp_path: Path, write_config: WriteConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    write(home / "hooks" / "p.py", PREFIX_HOOK)
    absolute = write(tmp_path / "elsewhere" / "p.py", PREFIX_HOOK)
    monkeypatch.setenv("HOME", str(home))
    cfg = write_config(f"""
        hooks:
          - {{name: from-home, path: ~/hooks/p.py, with: {{prefix: "h "}}}}
          - {{name: absolute, path: {absolute}, with: {{prefix: "a "}}}}
    """, folder=tmp_path / "config")
    assert load_chain(cfg).run(SessionSpawn(prompt="x")).prompt == "a h x"


# ------------------------------------------------------------------- on narrows only


def test_r3_3_on_defaults_to_the_points_the_class_overrides(
    tmp_path: Path, write_config: WriteConfig
) -> None:
    write(tmp_path / "p.py", PREFIX_HOOK)
    chain = load_chain(write_config("hooks:\n  - {name: p, path: p.py}\n"))
    assert [p for p in POINTS if chain.names(p)] == ["session_spawn", "phase_changed"]


def test_r3_3_on_narrows_the_overridden_points(
    tmp_path: Path, write_config: WriteConfig
) -> None:
    write(tmp_path / "p.py", PREFIX_HOOK)
    chain = load_chain(write_config("hooks:\n  - {name: p, path: p.py, on: phase_changed}\n"))
    assert [p for p in POINTS if chain.names(p)] == ["phase_changed"]
    assert chain.run(SessionSpawn(prompt="x")).prompt == "x"


def test_r3_3_on_never_widens(tmp_path: Path, write_config: WriteConfig) -> None:
    write(tmp_path / "p.py", PREFIX_HOOK)
    message = load_error(write_config, "- {name: p, path: p.py, on: [session_spawn, "
                                       "work_item_start]}")
    assert message == (
        "hooks[0] ('p') → on: work_item_start not handled by PrefixHooks (it overrides: "
        "session_spawn, phase_changed); `on` narrows the points a class overrides, it cannot "
        "add one"
    )


# -------------------------------------------------------------------------- disabled


def test_r3_3_disabled_entries_are_listed_but_never_loaded(
    tmp_path: Path, write_config: WriteConfig
) -> None:
    write(tmp_path / "boom.py", "raise RuntimeError('imported!')\n")
    cfg = write_config("""
        hooks:
          - {name: off, path: boom.py, enabled: false}
          - {name: gone, module: acme_not_installed.x, enabled: false}
    """)
    chain = load_chain(cfg)
    assert chain.links == ()
    entries = parse_hooks(read_config(cfg).hooks, tmp_path)
    assert [(e.name, e.enabled) for e in entries] == [("off", False), ("gone", False)]


# ---------------------------------------------------------------- load and load once


def test_r3_6_load_chain_raises_hooks_config_error_and_records_load_failed(
    tmp_path: Path, write_config: WriteConfig
) -> None:
    cfg = write_config("stateDir: state\nhooks:\n  - {name: bad, module: 'no such'}\n")
    with pytest.raises(HooksConfigError) as info:
        load_chain(cfg)
    [failed] = [r for r in read_events(tmp_path / "state" / "events.jsonl")
                if r["event"] == "hooks.load_failed"]
    assert failed["error"] == str(info.value) and failed["config"] == str(cfg)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (None, "no such file. Pass --config PATH, set $THE_LOOP_CLI_CONFIG, or run "
               "`the-loop init` to write ./.the-loop/cli-config.yaml"),
        ("hooks: [\n", "not valid YAML at line 2, column 1"),
        ("- a list\n", "expected a mapping of keys at the top level, got list"),
    ],
)
def test_r3_6_an_unreadable_declaration_raises_hooks_config_error(
    tmp_path: Path, text: str | None, says: str
) -> None:
    cfg = tmp_path / "cli-config.yaml"
    if text is not None:
        cfg.write_text(text, encoding="utf-8")
    with pytest.raises(HooksConfigError) as info:
        load_chain(cfg)
    assert str(info.value).startswith(f"{cfg}: {says}")


def test_r5_3_hooks_loaded_names_the_hooks_and_their_points(
    tmp_path: Path, write_config: WriteConfig
) -> None:
    write(tmp_path / "p.py", PREFIX_HOOK)
    cfg = write_config("""
        stateDir: state
        hooks:
          - {name: p, path: p.py}
          - {name: q, path: p.py, on: session_spawn}
          - {name: r, path: p.py, enabled: false}
    """)
    load_chain(cfg)
    [loaded] = list(read_events(tmp_path / "state" / "events.jsonl"))
    assert loaded["event"] == "hooks.loaded"
    assert loaded["hooks"] == ["p", "q"]
    assert loaded["points"] == {"session_spawn": ["p", "q"], "phase_changed": ["p"]}


def test_r3_7_a_process_loads_at_most_once(tmp_path: Path, write_config: WriteConfig) -> None:
    counter = tmp_path / "imports.txt"
    write(tmp_path / "counted.py", f"""
        with open({str(counter)!r}, "a") as fh:
            fh.write("imported\\n")
        {PREFIX_HOOK}
    """.replace("\n        ", "\n", 1))
    cfg = write_config("stateDir: state\nhooks:\n  - {name: counted, path: counted.py}\n")
    config = read_config(cfg)
    first = chain_once(config, strict=True)
    assert chain_once(config, strict=False) is first
    assert chain_once(read_config(cfg), strict=True) is first
    assert counter.read_text(encoding="utf-8") == "imported\n"
    events = [r["event"] for r in read_events(tmp_path / "state" / "events.jsonl")]
    assert events == ["hooks.loaded"]


def test_r3_6_a_strict_caller_after_a_failed_lenient_load_still_refuses(
    write_config: WriteConfig,
) -> None:
    config = read_config(write_config("hooks:\n  - {name: bad, module: acme_not_installed}\n"))
    empty = chain_once(config, strict=False)
    assert isinstance(empty, Chain) and empty.links == ()
    with pytest.raises(HooksConfigError, match="acme_not_installed"):
        chain_once(config, strict=True)
    assert chain_once(config, strict=False) is empty


PROCESS = """
import json, sys
from pathlib import Path
from the_loop.config import read_config
from the_loop.errors import HooksConfigError
from the_loop.hooks.declaring.loading import chain_once
from the_loop.hooks.engine.points import WorkItemStart

config = read_config(Path(sys.argv[1]))
try:
    chain = chain_once(config, strict=sys.argv[2] == "daemon")
except HooksConfigError as exc:
    print(f"refusing to start: {exc}", file=sys.stderr)
    sys.exit(1)
out = chain.run(WorkItemStart())
print(json.dumps({"hooks": [link.name for link in chain.links], "proceed": out.proceed}))
"""


@pytest.fixture
def broken_declaration(tmp_path: Path, write_config: WriteConfig) -> Path:
    write(tmp_path / "hooks" / "gate.py", "raise ImportError('gate needs a licence server')\n")
    return write_config("""
        stateDir: state
        hooks:
          - name: gate
            path: hooks/gate.py
            required: true
    """)


def test_abuse_6_a_daemon_refuses_to_start_on_a_declaration_that_fails(
    tmp_path: Path, broken_declaration: Path
) -> None:
    result = subprocess.run(
        [sys.executable, "-c", PROCESS, str(broken_declaration), "daemon"],
        capture_output=True, text=True, check=False, timeout=60, cwd=tmp_path,
    )
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr == (
        "refusing to start: hooks[0] ('gate') → path: cannot import 'hooks/gate.py': "
        "ImportError: gate needs a licence server (at hooks/gate.py:1)\n"
    )


def test_embedding_api_load_chain_then_run(tmp_path: Path, write_config: WriteConfig) -> None:
    write(tmp_path / "refuse.py", """
        from the_loop.hooks.engine.executor import LifecycleHooks
        class Refuse(LifecycleHooks):
            def work_item_start(self, ctx):
                ctx.proceed = False
                ctx.reason = "frozen for the release"
                return ctx
    """)
    chain = load_chain(write_config("hooks:\n  - {name: freeze, path: refuse.py}\n"))
    out = chain.run(WorkItemStart())
    assert (type(out), out.proceed, out.reason) == (WorkItemStart, False, "frozen for the release")


def test_chain_from_config_without_a_file_is_empty() -> None:
    from the_loop.config import Config

    assert chain_from_config(Config(None, {})).links == ()


def test_load_is_all_or_nothing(tmp_path: Path, write_config: WriteConfig) -> None:
    """A good entry before a bad one is never half-loaded: no chain at all."""
    write(tmp_path / "good.py", PREFIX_HOOK)
    cfg = write_config("""
        hooks:
          - {name: good, path: good.py}
          - {name: bad, path: missing.py}
    """)
    with pytest.raises(HooksConfigError, match=r"hooks\[1\] \('bad'\)"):
        load_chain(cfg)



@pytest.mark.parametrize("url", ["http://hooks.example/x", "http://10.0.0.5:8080/hooks"])
def test_abuse_4_cleartext_url_to_another_host_with_a_token_fails_to_load(
    tmp_path: Path, url: str
) -> None:
    config = write(tmp_path / "cli-config.yaml", f"""
        hooks:
          - {{name: compliance, url: '{url}', tokenEnv: COMPLIANCE_TOKEN}}
    """)
    with pytest.raises(HooksConfigError) as info:
        load_chain(config)
    assert str(info.value).startswith("hooks[0] ('compliance') → url: plain http:// is only "
                                      "allowed to a loopback host")
    assert "bearer token must never cross a network in clear" in str(info.value)
