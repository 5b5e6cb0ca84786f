"""The executor registry (issue 21.1): every kind says everything the loop asks of it, a new
kind is one record the declaration, the schema, the chain and the decision log accept, and
replay refuses what it cannot tell is safe to call.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import re
import sqlite3
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from runtime_helpers import LoopDir
from the_loop.cli import main
from the_loop.config_schema import config_schema
from the_loop.configspec import NON_EMPTY_PATTERN, Field, ListOf, Str
from the_loop.decisions.looplog import DecisionLog
from the_loop.events import EventLog
from the_loop.hooks import Chain, HooksConfigError, load_chain
from the_loop.hooks.declaring.entry import HookEntry
from the_loop.hooks.engine.chain import Link
from the_loop.hooks.engine.executor import Decisions
from the_loop.hooks.engine.points import SessionSpawn
from the_loop.hooks.executors import registry
from the_loop.hooks.executors.kind import CALL, RECORDED, KeyDoc, Kind

REQUIRED = ("name", "keys", "build", "classes", "default_points", "handler", "replay",
            "logged_as", "about", "runs_at", "docs")


class Echo:
    """A fake executor kind: at session_spawn it puts its text before the prompt."""

    def __init__(self, text: str) -> None:
        self.text = text

    def points(self) -> tuple[str, ...]:
        return ("session_spawn",)

    def handler(self, point: str) -> Callable[[Any], Decisions]:
        return lambda ctx: Decisions(values={"prompt": f"{self.text} {ctx.prompt}"})


class Stray:
    """An executor whose class no kind lists (what a kind's build might hand back by mistake)."""

    def __init__(self, text: str) -> None:
        self.echo = Echo(text)

    def points(self) -> tuple[str, ...]:
        return self.echo.points()

    def handler(self, point: str) -> Callable[[Any], Decisions]:
        return self.echo.handler(point)


def _echo_kind(**changes: Any) -> Kind:
    fields: dict[str, Any] = {
        "name": "echo",
        "keys": {"echo": {"echo": Field(Str(pattern=NON_EMPTY_PATTERN, expected="some text",
                                            description="the text put before the prompt"))}},
        "build": lambda entry, names: Echo(entry.options["echo"]),
        "classes": (f"{__name__}.Echo",),
        "default_points": lambda executor: executor.points(),
        "handler": lambda executor, point: executor.handler(point),
        "replay": CALL,
        "logged_as": "echo",
        "about": "a fixed text before the prompt",
        "runs_at": "session_spawn",
        "docs": {"echo": KeyDoc("string", "—", "the text put before the prompt")},
    }
    return Kind(**{**fields, **changes})


@pytest.fixture
def with_kind() -> Iterator[Callable[[Kind], None]]:
    removals: list[Callable[[], None]] = []
    yield lambda kind: removals.append(registry.register(kind))
    for remove in removals:
        remove()


def _config(tmp_path: Path, hooks: str) -> Path:
    path = tmp_path / "cli-config.yaml"
    path.write_text(f"loop: acme\nstateDir: state\nhooks:\n{hooks}", encoding="utf-8")
    return path


# ------------------------------------------------------------------ the records


def test_every_built_in_kind_names_classes_that_exist_and_a_replay_mode_replay_knows() -> None:
    assert {key: k.name for key, k in registry.BY_KEY.items()} == {
        key: k.name for k in registry.KINDS.values() for key in k.keys}
    for kind in registry.KINDS.values():
        assert kind.replay in (CALL, RECORDED), kind.name
        assert kind.logged_as == kind.name  # one vocabulary: the log says the kind's name
        for qualified in kind.classes:
            module, _, name = qualified.rpartition(".")
            assert isinstance(getattr(importlib.import_module(module), name), type), qualified
    assert registry.KINDS["remote"].replay == RECORDED  # replay never calls the network
    assert registry.KINDS["command"].replay == RECORDED  # nor a program with side effects


@pytest.mark.parametrize("missing", REQUIRED)
def test_a_kind_registered_without_a_field_is_refused_naming_it(missing: str) -> None:
    empty = {f.name: f.type for f in dataclasses.fields(Kind)}[missing]
    blank: Any = "" if "str" in str(empty) else () if "tuple" in str(empty) else (
        {} if "dict" in str(empty) else None)
    with pytest.raises(TypeError, match=f"lacks {missing}; every kind says each of them"):
        _echo_kind(**{missing: blank})


def test_a_kind_whose_keys_clash_with_a_registered_one_is_refused() -> None:
    with pytest.raises(ValueError, match=r"the declaration key 'url' \(kind 'remote'\) already "
                                         "registered; choose another"):
        registry.register(_echo_kind(name="other", keys={"url": {"url": Field(Str())}},
                                     docs={"url": KeyDoc("URL", "—", "another url")}))


# ------------------------------------------------------------------ adding a kind


def test_a_kind_added_in_process_is_accepted_by_the_loader_the_schema_and_the_listing(
    tmp_path: Path, with_kind: Callable[[Kind], None], capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config(tmp_path, "  - {name: greet, echo: 'Hello.'}\n")
    with pytest.raises(HooksConfigError, match=r"hooks\[0\] \('greet'\) → echo: unknown key"):
        load_chain(config)
    with_kind(_echo_kind())
    chain = load_chain(config, log=EventLog())
    assert chain.run(SessionSpawn(prompt="Fix it.")).prompt == "Hello. Fix it."
    jsonschema.validate({"loop": "acme", "hooks": [{"name": "greet", "echo": "Hello."}]},
                        config_schema())
    assert main(["--config", str(config), "hooks", "--json"]) == 0
    [listed] = json.loads(capsys.readouterr().out)["hooks"]
    assert (listed["name"], listed["kind"], listed["target"]) == ("greet", "echo", "Hello.")


def test_a_kind_whose_target_is_a_list_is_listed_as_its_record_shows_it(
    tmp_path: Path, with_kind: Callable[[Kind], None], capsys: pytest.CaptureFixture[str]
) -> None:
    """`the-loop hooks` asks the kind how to show a target (a list broke its columns)."""
    words = ListOf(item=Str(pattern=NON_EMPTY_PATTERN, expected="a word"), expected="words")
    with_kind(_echo_kind(keys={"echo": {"echo": Field(words)}},
                         build=lambda entry, names: Echo(" ".join(entry.options["echo"])),
                         shown=lambda words: " + ".join(words)))
    config = _config(tmp_path, "  - {name: greet, echo: [Hello, there]}\n")
    assert main(["--config", str(config), "hooks"]) == 0
    assert re.search(r"^  greet +echo +Hello \+ there +\(default\) +no +yes$",
                     capsys.readouterr().out, re.M)
    assert main(["--config", str(config), "hooks", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["hooks"][0]["target"] == "Hello + there"


def test_a_new_kinds_keys_are_checked_like_any_others(
    tmp_path: Path, with_kind: Callable[[Kind], None]
) -> None:
    with_kind(_echo_kind())
    with pytest.raises(HooksConfigError,
                       match=r"hooks\[0\] \('greet'\) → echo: expected some text"):
        load_chain(_config(tmp_path, "  - {name: greet, echo: ''}\n"))
    with pytest.raises(HooksConfigError, match="not allowed on a echo entry"):
        load_chain(_config(tmp_path, "  - {name: greet, echo: hi, tokenEnv: X}\n"))


# ------------------------------------------------------------------ the decision log


def test_the_decision_log_names_each_kind_and_never_calls_an_unknown_one_local(
    tmp_path: Path
) -> None:
    conn = sqlite3.connect(str(tmp_path / "loop.db"), isolation_level=None)
    log = DecisionLog(conn, keep_days=30, log=EventLog())
    chain = Chain([Link("stray", Stray("Hi."), frozenset({"session_spawn"}))])
    ctx = SessionSpawn(prompt="Fix it.")
    log.record(ctx, chain.invoke(ctx), chain)
    [(record,)] = conn.execute("SELECT record FROM decision_log").fetchall()
    [step] = json.loads(record)["steps"]
    assert (step["hook"], step["kind"]) == ("stray", "unknown")


# ------------------------------------------------------------------ replay


def _replay(ld: LoopDir) -> tuple[int, str]:
    code, _, err = ld.run("policy", "replay")
    return code, err


def test_replay_refuses_a_kind_whose_replay_mode_it_does_not_know(
    ld: LoopDir, with_kind: Callable[[Kind], None]
) -> None:
    with_kind(_echo_kind(replay="simulated"))
    ld.write_config("hooks:\n  - {name: greet, echo: 'Hello.'}\n")
    code, err = _replay(ld)
    assert code == 1
    assert ("policy replay: hook 'greet' is of kind 'echo', whose replay mode 'simulated' "
            "replay does not know (it knows 'call': replay runs it, and 'recorded': its "
            "recorded answer stands in unless --call-all); nothing was replayed") in err


def test_replay_refuses_an_executor_of_no_registered_kind(
    ld: LoopDir, with_kind: Callable[[Kind], None]
) -> None:
    def build(entry: HookEntry, names: Mapping[str, str]) -> Stray:
        return Stray(entry.options["echo"])

    with_kind(_echo_kind(build=build))
    ld.write_config("hooks:\n  - {name: greet, echo: 'Hello.'}\n")
    code, err = _replay(ld)
    assert code == 1
    assert ("policy replay: hook 'greet' is a Stray, which is no registered executor kind, so "
            "replay cannot tell whether calling it is safe") in err


def test_a_kind_claiming_a_registered_kinds_class_is_refused() -> None:
    """Two kinds for one class would leave it with none once either is removed."""
    with pytest.raises(ValueError, match=r"the class the_loop.hooks.executors.policy."
                                         r"PolicyExecutor \(kind 'policy'\) already registered"):
        registry.register(_echo_kind(classes=("the_loop.hooks.executors.policy.PolicyExecutor",)))
