"""The tolerant reader a hook server uses for `params` (issue 14.2), rule by rule."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from any_loop_data import PARAMS
from the_loop.hooks.engine.dialect import read_params
from the_loop.hooks.engine.points import POINTS, SPECS, WorkItem
from the_loop.hooks.serving.jsonrpc import CallRecord, handle_request
from the_loop.sdk.hooks import LifecycleHooks, SessionSpawn


def test_unknown_keys_in_params_and_in_a_work_item_are_ignored_and_listed() -> None:
    ctx, ignored = read_params("session_spawn", {
        "prompt": "p", "added_in_v9": {"any": ["shape"]},
        "work_item": {"ref": "local:acme/app#1", "labels_v2": 3},
    })
    assert isinstance(ctx, SessionSpawn) and ctx.prompt == "p"
    assert ctx.work_item == WorkItem(ref="local:acme/app#1")
    assert ignored == ["added_in_v9", "work_item.labels_v2"]


def test_provider_is_read_as_tracker_and_ours_wins_when_both_are_sent() -> None:
    ctx, ignored = read_params("work_item_start", {"work_item": {"provider": "github"}})
    assert ctx.work_item.tracker == "github" and ignored == []
    ctx, ignored = read_params("work_item_start",
                               {"work_item": {"provider": "github", "tracker": "local"}})
    assert ctx.work_item.tracker == "local" and ignored == ["work_item.provider"]


def test_an_empty_kind_means_our_default() -> None:
    ctx, _ = read_params("waiting_for_input", {"kind": "", "work_item": {"kind": ""}})
    assert ctx.kind == "question" and ctx.work_item.kind == "issue"  # type: ignore[attr-defined]
    ctx, _ = read_params("input_received", {"kind": ""})
    assert ctx.kind == "comment"  # type: ignore[attr-defined]


@pytest.mark.parametrize(("point", "theirs", "ours", "value"), [
    ("input_received", "command", "control", "stop"),
    ("session_spawned", "harness_session_id", "session_id", "s-1"),
])
def test_a_field_with_another_name_there_maps_to_ours(
    point: str, theirs: str, ours: str, value: str
) -> None:
    ctx, ignored = read_params(point, {theirs: value})
    assert getattr(ctx, ours) == value and ignored == []


def test_work_item_completes_kind_is_the_work_items_kind_when_the_record_does_not_say() -> None:
    ctx, ignored = read_params("work_item_complete",
                               {"kind": "pull-request", "work_item": {"kind": ""}})
    assert ctx.work_item.kind == "pull-request" and ignored == []
    ctx, _ = read_params("work_item_complete",
                         {"kind": "pull-request", "work_item": {"kind": "issue"}})
    assert ctx.work_item.kind == "issue"


@pytest.mark.parametrize(("params", "says"), [
    ({"work_item": {"provider": 7}}, "session_spawn.work_item: tracker must be str"),
    ({"work_item": {"number": "7"}}, "number must be int"),
    ({"respawn": "no"}, "session_spawn.respawn must be bool"),
    ({"proceed": 0}, "session_spawn.proceed must be bool"),
])
def test_a_known_field_of_the_wrong_type_is_still_an_error(params: Any, says: str) -> None:
    with pytest.raises(ValueError) as info:
        read_params("session_spawn", params)
    assert says in str(info.value)


@pytest.mark.parametrize("point", list(POINTS))
def test_every_request_shape_of_the_other_loop_is_read(point: str) -> None:
    ctx, ignored = read_params(point, PARAMS[point])
    assert type(ctx) is POINTS[point]
    ours = {f.name for f in SPECS[point].fields}
    assert set(ignored).isdisjoint(ours)


class Echo(LifecycleHooks):
    def session_spawn(self, ctx: SessionSpawn) -> SessionSpawn:
        ctx.prompt = f"{ctx.work_item.tracker}:{ctx.prompt}"
        return ctx


def test_the_server_answers_and_reports_the_ignored_keys_to_its_host() -> None:
    calls: list[CallRecord] = []
    body = json.dumps({"jsonrpc": "2.0", "id": 3, "method": "session_spawn", "params": {
        "prompt": "p", "tenant": "acme", "work_item": {"provider": "github", "x": 1}}})
    answer = json.loads(handle_request(Echo(), body.encode(), on_call=calls.append))
    assert answer == {"jsonrpc": "2.0", "result": {"prompt": "github:p"}, "id": 3}
    assert [(c.point, c.status, c.ignored) for c in calls] == [
        ("session_spawn", "ok", ("tenant", "work_item.x"))]
    bad = json.dumps({"jsonrpc": "2.0", "id": 4, "method": "session_spawn",
                      "params": {"respawn": 1}})
    handle_request(Echo(), bad.encode(), on_call=calls.append)
    assert calls[-1].status == "error -32602"


def test_ignored_keys_reach_the_log_printable_and_bounded() -> None:
    calls: list[CallRecord] = []
    params: dict[str, Any] = {f"k{i}": i for i in range(50)}
    params["evil\nthe-loop: fake line"] = 1
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "phase_changed", "params": params})
    handle_request(Echo(), body.encode(), on_call=calls.append)
    listed = calls[0].ignored
    assert len(listed) == 21 and listed[-1] == "… 31 more"
    assert all("\n" not in name for name in listed)


def test_the_dialect_table_in_any_loop_md_names_every_key_their_requests_carry_that_we_ignore(
) -> None:
    """docs/any-loop.md's table says, per point, what becomes of each key only the other
    loop sends; every key our reader ignores in their requests has its row there."""
    text = (Path(__file__).parents[2] / "docs" / "any-loop.md").read_text(encoding="utf-8")
    table = text.split("## The dialect", 1)[1].split("\n\n| the other loop sends", 1)[1]
    documented: dict[str, set[str]] = {point: set() for point in PARAMS}
    for row in table.split("\n\n", 1)[0].splitlines()[2:]:
        keys, points, _ = row.strip("|").split("|")
        names = re.findall(r"`([a-z_.]+)", keys)
        for point in re.findall(r"`([a-z_]+)`", points) if "every" not in points else PARAMS:
            documented[point].update(names)
    for point, params in PARAMS.items():
        _, ignored = read_params(point, params)
        assert set(ignored) <= documented[point], (point, set(ignored) - documented[point])
