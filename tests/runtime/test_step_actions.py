"""Step kinds are one type (issue 21.3): every kind has a runner, an event and a narrated line;
a step of a kind the loop does not know is refused when queued, and one found stored (another
version's) waits without stopping the other items."""

from __future__ import annotations

import re
import sqlite3
import time
from pathlib import Path

import pytest

import the_loop.runtime
from runtime_helpers import LoopDir
from the_loop.errors import LoopError
from the_loop.events import EVENT_TYPES
from the_loop.runtime.db import Database
from the_loop.runtime.narrate import line_of
from the_loop.runtime.stepactions import SPECS, StepAction
from the_loop.runtime.steps import RUN
from the_loop.runtime.store import Store

RUNTIME = Path(the_loop.runtime.__file__).parent


def test_the_action_table_and_the_runners_name_the_same_actions() -> None:
    assert set(RUN) == set(StepAction) == set(SPECS)


@pytest.mark.parametrize("action", list(StepAction), ids=str)
def test_every_step_action_has_a_runner_an_event_and_a_narrated_line(action: StepAction) -> None:
    assert callable(RUN[action]), f"no runner for {action}"
    event = action.spec.event
    assert event in EVENT_TYPES, f"{action}'s event {event!r} is not in the catalog"
    line = line_of({"event": event, "work_item": "acme/app#7"})
    assert line.startswith("acme/app#7: "), f"{action}'s event {event!r} is not narrated"
    # The event is one the runtime really records (in a runner, or the advance it calls).
    source = "".join(p.read_text(encoding="utf-8") for p in RUNTIME.glob("*.py"))
    assert re.search(rf"\.emit\(\s*\"{re.escape(event)}\"", source), f"{event} is never emitted"
    assert action.spec.doing and action.spec.fields


def _steps(db: Database) -> list[str]:
    return [str(r["key"]) for r in db.conn.execute("SELECT key FROM steps")]


@pytest.mark.parametrize("action", ["bogus", "launch"])
def test_queueing_a_step_whose_action_is_not_a_step_action_is_refused_and_writes_nothing(
        tmp_path: Path, action: str) -> None:
    db = Database(tmp_path / "loop.db")
    try:
        store = Store(db)
        with pytest.raises(TypeError, match="a step's action is a StepAction"):
            store.queue("x:1", "acme/app#1", action, {})  # type: ignore[arg-type]
        assert _steps(db) == []
    finally:
        db.close()


def test_queueing_a_step_without_a_field_its_runner_reads_is_refused_and_writes_nothing(
        tmp_path: Path) -> None:
    db = Database(tmp_path / "loop.db")
    try:
        store = Store(db)
        with pytest.raises(LoopError, match="a launch step needs endpoint, respawn in its "
                                            "payload"):
            store.queue(StepAction.LAUNCH.key("enter:x"), "acme/app#1", StepAction.LAUNCH,
                        {"node": "write", "prompt": "p", "actor": "alice"})
        assert _steps(db) == []
        store.queue(StepAction.COMPLETE.key("acme/app#1", 1), "acme/app#1", StepAction.COMPLETE,
                    {"source": "tracker", "actor": "alice"})
        assert _steps(db) == ["complete:acme/app#1:1"]
    finally:
        db.close()


def test_a_stored_step_of_an_unknown_action_waits_and_the_other_items_go_on(
        tmp_path: Path) -> None:
    with LoopDir(tmp_path) as ld:
        a, b = ld.add("First"), ld.add("Second")
        ld.start(a)
        ld.start(b)
        with sqlite3.connect(ld.state / "loop.db") as conn:  # as a newer loop would queue it
            conn.execute("INSERT INTO steps(key, ref, kind, payload, created, updated) "
                         "VALUES (?, ?, 'teleport', '{}', ?, ?)",
                         (f"teleport:{a}", a, time.time(), time.time()))
        ld.poll()
        assert ld.work(b)["state"] == "running" and len(ld.launches()) == 1
        assert ld.work(a)["state"] == "running"  # started; its later steps wait their turn
        [failed] = ld.events("step.failed")
        assert failed["step"] == f"teleport:{a}" and failed["work_item"] == a
        assert "has action 'teleport', which this version of the loop does not know" in \
            failed["error"]
        pending = ld.query("SELECT key FROM steps WHERE state='pending' ORDER BY seq")
        assert pending[0]["key"] == f"teleport:{a}"
        assert ld.comments(a) == []  # nothing was given up: the item is not blocked
