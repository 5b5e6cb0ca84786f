"""Replay reads the decision log exactly as the catalog and `json.loads` would (issue 16's
speed work): a recorded context rebuilds to the context `context_from_json` makes of it, or
fails with its error; a record decodes to `json.loads`'s value, or fails with its error."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from the_loop.decisions.encoding import context_json
from the_loop.decisions.looplog import DecisionLog
from the_loop.decisions.reads import read_points
from the_loop.errors import LoopError
from the_loop.events import EventLog
from the_loop.hooks.engine.points import POINTS, SPECS, WorkItem, context_from_json
from the_loop.runtime.replay import rebuild

ITEM = WorkItem(ref="local:acme/app#7", tracker="local", owner="acme", repo="app",
                repository="acme/app", number=7, kind="issue", url="local://acme/app/7", id="7")
SAMPLE = {"str": "x", "bool": True, "int": 3, "list[str]": ["a", "b"], "WorkItem": ITEM}
JSON_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.floats(0, 1),
                        st.text(max_size=3), st.lists(st.text(max_size=2), max_size=2),
                        st.just({}), st.just([1]))


def recorded(point: str) -> dict[str, Any]:
    """A point's context as the decision log stores it: every field set, nothing default."""
    spec = SPECS[point]
    ctx = spec.context(**{f.name: SAMPLE[f.type] for f in spec.fields})
    return json.loads(json.dumps(context_json(ctx)))


def outcome(fn: Any, *args: Any) -> tuple[str, Any]:
    try:
        return "ok", fn(*args)
    except (ValueError, TypeError, KeyError) as exc:
        return type(exc).__name__, str(exc)


def same_context(point: str, data: Any) -> None:
    """rebuild(point, data) is what the catalog's checked path makes of data, or its error."""
    got, want = outcome(rebuild, point, data), outcome(context_from_json, point, data)
    assert got[0] == want[0]
    if got[0] != "ok":
        assert got == want
        return
    assert type(got[1]) is POINTS[point]
    assert got[1] == want[1]
    assert {k: type(v) for k, v in vars(got[1]).items()} == {
        k: type(v) for k, v in vars(want[1]).items()}


@pytest.mark.parametrize("point", sorted(SPECS))
def test_a_recorded_context_rebuilds_to_the_context_the_catalog_builds(point: str) -> None:
    data = recorded(point)
    same_context(point, data)
    ctx = rebuild(point, data)
    assert list(vars(ctx)) == list(data)  # the record's own fields, in its order
    assert context_json(ctx) == data


@settings(max_examples=300, deadline=None)
@given(point=st.sampled_from(sorted(SPECS)), data=st.data())
def test_a_damaged_record_rebuilds_or_fails_exactly_as_the_catalog_says(
        point: str, data: st.DataObject) -> None:
    """Dropped, added, retyped or reordered fields; strings lists with a non-string; work
    items missing a field, with one too many, or one of the wrong type (a bool for a number)."""
    record = recorded(point)
    names = list(record)
    how = data.draw(st.sampled_from(["drop", "add", "retype", "reorder", "list", "item"]))
    if how == "drop":
        del record[data.draw(st.sampled_from(names))]
    elif how == "add":
        record[data.draw(st.sampled_from(["extra", "promt", "labels2"]))] = "x"
    elif how == "retype":
        record[data.draw(st.sampled_from(names))] = data.draw(JSON_VALUES)
    elif how == "reorder":
        order = data.draw(st.permutations(names))
        record = {name: record[name] for name in order}
    elif how == "list":
        record["labels"] = ["a", data.draw(JSON_VALUES)]
    else:
        item = dict(record["work_item"])
        change = data.draw(st.sampled_from(["drop", "add", "retype", "reorder"]))
        keys = list(item)
        if change == "drop":
            del item[data.draw(st.sampled_from(keys))]
        elif change == "add":
            item["title"] = "x"
        elif change == "retype":
            item[data.draw(st.sampled_from(keys))] = data.draw(JSON_VALUES)
        else:
            item = {k: item[k] for k in data.draw(st.permutations(keys))}
        record["work_item"] = item
    same_context(point, record)


def test_a_record_that_is_not_an_object_fails_as_the_catalog_says() -> None:
    for data in ([1, 2], "x", None, 3):
        same_context("session_spawn", data)


def log_with(tmp_path: Path, *records: str | bytes) -> Path:
    db = tmp_path / "loop.db"
    conn = sqlite3.connect(str(db), isolation_level=None)
    DecisionLog(conn, keep_days=30, log=EventLog()).prune()
    for text in records:
        conn.execute("INSERT INTO decision_log(at, point, work_item, record) VALUES "
                     "(1, 'session_spawn', 'local:acme/app#7', ?)", (text,))
    conn.close()
    return db


def good_row() -> str:
    return json.dumps({"v": 2, "context": recorded("session_spawn"), "steps": [],
                       "decisions": {}, "refused_by": ""}, separators=(",", ":"))


@pytest.mark.parametrize("text", [
    " " + good_row() + "\n",  # whitespace around the object
    good_row().encode(),  # a BLOB, not TEXT
    good_row() + " x",  # trailing data
    good_row()[:-1],  # cut short
    "\ufeff" + good_row(),  # a byte-order mark
    '{"v": NaN}',  # json.loads's own extension
    "",
])
def test_a_row_decodes_as_json_loads_decodes_it(tmp_path: Path, text: str | bytes) -> None:
    """The same point or the same one-line problem as json.loads gives."""
    problems: list[str] = []
    got = list(read_points(log_with(tmp_path, text), problems=problems))
    try:
        rec = json.loads(text)
    except ValueError as exc:
        assert got == []
        assert problems == [f"{tmp_path / 'loop.db'}: decision log row 1 cannot be read "
                            f"({exc}); it was not written by this version of the-loop"]
        return
    if rec.get("v") != 2:
        assert len(problems) == 1 and not got
        return
    assert problems == []
    assert got[0].context == rec["context"]


@settings(max_examples=200, deadline=None)
@given(text=st.text(alphabet='{}[]":,0123456789.eE+- \tnulltruefalse\\xNa', max_size=30))
def test_any_text_decodes_to_json_loads_value_or_its_error(text: str) -> None:
    from the_loop.decisions.layout import decode as _decode  # the one place rows are decoded

    assert repr(outcome(_decode, text)) == repr(outcome(json.loads, text))  # NaN != NaN


def test_an_unreadable_row_without_a_problems_list_stops_the_read_by_name(
        tmp_path: Path) -> None:
    db = log_with(tmp_path, good_row(), good_row() + "]")
    with pytest.raises(LoopError, match="decision log row 2 cannot be read \\(Extra data"):
        list(read_points(db))
