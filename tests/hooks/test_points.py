"""The catalog (R1.1, R2.1) and `the-loop hooks points` (R5.2); `--version`."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from the_loop import __version__
from the_loop.cli import main
from the_loop.hooks.engine.points import (
    DECISION,
    FACT,
    POINTS,
    SPECS,
    WORK_ITEM_FIELDS,
    SessionSpawn,
    WorkItem,
    context_from_json,
    context_to_json,
)

SECRET_WORDS = ("token", "secret", "password", "credential", "authorization", "env")


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


# -------------------------------------------------------------------------- catalog


@pytest.mark.parametrize("point", list(POINTS))
def test_r2_1_every_context_builds_with_defaults_and_is_json(point: str) -> None:
    cls = POINTS[point]
    ctx = cls()
    data = context_to_json(ctx)
    assert json.loads(json.dumps(data)) == data
    assert set(data) == {f.name for f in dataclasses.fields(cls)}
    assert context_to_json(context_from_json(point, data)) == data


@pytest.mark.parametrize("point", list(POINTS))
def test_r2_1_every_field_is_a_typed_fact_or_decision_with_a_doc(point: str) -> None:
    spec = SPECS[point]
    assert spec.when
    for f in dataclasses.fields(POINTS[point]):
        assert f.metadata["role"] in (FACT, DECISION) and f.metadata["doc"], f.name
    for fs in spec.fields:
        assert fs.type in ("str", "bool", "int", "list[str]", "WorkItem"), fs.name
    for fs in spec.facts:
        assert not any(word in fs.name for word in SECRET_WORDS), fs.name
    assert [f.name for f in spec.facts][:3] == ["work_item", "loop", "labels"]


def test_r2_1_a_context_builds_from_keywords_for_a_test() -> None:
    ctx = SessionSpawn(prompt="hi")
    assert (ctx.prompt, ctx.proceed, ctx.reason, ctx.labels) == ("hi", True, "", [])
    assert SessionSpawn().labels is not SessionSpawn().labels


def test_r2_1_the_work_item_record_is_frozen() -> None:
    item = WorkItem(ref="local:acme/app#3", number=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        item.ref = "other"  # type: ignore[misc]
    assert list(item.to_json()) == list(WORK_ITEM_FIELDS)
    assert WorkItem.from_json(item.to_json()) == item


def test_context_from_json_names_an_unknown_field_and_lists_the_valid_ones() -> None:
    with pytest.raises(ValueError) as info:
        context_from_json("session_spawn", {"promt": "x"})
    names = ", ".join(f.name for f in SPECS["session_spawn"].fields)
    assert str(info.value) == (
        f"session_spawn has no field 'promt' (did you mean 'prompt'?); valid fields: {names}"
    )


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"proceed": "false"}, "session_spawn.proceed must be bool (got 'false' that is str)"),
        ({"proceed": 0}, "session_spawn.proceed must be bool (got 0 that is int)"),
        ({"prompt": 1}, "session_spawn.prompt must be str (got 1 that is int)"),
        ({"labels": "a"}, "session_spawn.labels must be a list of strings (got 'a')"),
        ({"labels": [1]}, "session_spawn.labels must be a list of strings (got [1])"),
        ({"work_item": {"number": "3"}},
         "session_spawn.work_item: number must be int (got '3' that is str)"),
        ({"work_item": {"nmber": 3}}, "session_spawn.work_item: unknown field(s) nmber; valid: "
         + ", ".join(WORK_ITEM_FIELDS)),
    ],
)
def test_context_from_json_never_coerces(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as info:
        context_from_json("session_spawn", data)
    assert str(info.value) == message


# ------------------------------------------------------------------ hooks points CLI


def test_r5_2_hooks_points_lists_when_facts_and_decisions(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = cli(capsys, "hooks", "points")
    assert code == 0
    for spec in SPECS.values():
        block = out.split(f"{spec.name}  ({spec.context.__name__})", 1)[1].split("\n\n", 1)[0]
        assert f"fires: {spec.when}" in block
        for f in spec.facts:
            assert f"    {f.name:<11} {f.type:<9} {f.doc}" in block
        for d in spec.decisions:
            assert f"    {d.name:<11} {d.type:<5} default {json.dumps(d.default):<6} " \
                   f"{d.applied}" in block
    assert out.index("work_item_start") < out.index("session_spawn  ") < out.index(
        "work_item_complete"
    )


def test_r5_2_hooks_points_json_is_the_catalog_as_data(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = cli(capsys, "hooks", "points", "--json")
    assert code == 0
    data = json.loads(out)
    assert [p["point"] for p in data] == list(POINTS)
    spawn = data[1]
    assert spawn["context"] == "SessionSpawn" and spawn["when"] == SPECS["session_spawn"].when
    assert {"name": "labels", "type": "list[str]", "doc": "the work item's labels"} in spawn[
        "facts"
    ]
    prompt = next(d for d in spawn["decisions"] if d["name"] == "prompt")
    assert prompt == {
        "name": "prompt", "type": "str", "default": "",
        "doc": "the prompt the harness receives on stdin",
        "applied": "replaces the text handed to the harness on launch",
    }


def test_r5_2_hooks_points_one_point(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "hooks", "points", "--point", "phase_changed")
    assert code == 0
    assert out.startswith("phase_changed  (PhaseChanged)") and "session_spawn" not in out
    code, out, _ = cli(capsys, "hooks", "points", "--point", "phase_changed", "--json")
    assert code == 0 and json.loads(out)["point"] == "phase_changed"


@pytest.mark.parametrize(
    ("name", "hint"),
    [("sesion_spawn", "did you mean 'session_spawn'?"), ("hooks.decided", "event type")],
)
def test_r5_2_hooks_points_unknown_point_exits_2_naming_the_valid_ones(
    capsys: pytest.CaptureFixture[str], name: str, hint: str
) -> None:
    code, out, err = cli(capsys, "hooks", "points", "--point", name)
    assert code == 2 and out == ""
    assert err.startswith(f"the-loop: {name!r} is not a lifecycle point")
    assert hint in err
    assert err.rstrip().endswith("Valid points: " + ", ".join(POINTS))


# ------------------------------------------------------------------------- version


def test_version_from_the_console_script_and_python_m() -> None:
    script = Path(sys.executable).parent / "the-loop"
    env = {k: v for k, v in os.environ.items() if k != "THE_LOOP_CLI_CONFIG"}
    for argv in ([str(script), "--version"], [sys.executable, "-m", "the_loop", "--version"]):
        result = subprocess.run(argv, capture_output=True, text=True, env=env, check=False,
                                timeout=60)
        assert (result.returncode, result.stdout) == (0, f"the-loop {__version__}\n"), argv


def test_no_command_prints_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys)
    assert code == 2 and "hooks" in out
