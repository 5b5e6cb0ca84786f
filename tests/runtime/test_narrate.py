"""The daemon's terminal lines are one table over the event catalog (issue 33.3): every line
names a catalog event and fills from that event's own fields, and a field a caller controls
stays one printable line."""

from __future__ import annotations

import re

import pytest

from the_loop.events import EVENT_TYPES
from the_loop.runtime.narrate import LINE_LIMIT, LINES, line_of

#: Placeholders line_of fills itself rather than reading a field of that name.
DERIVED = {"ref", "ref_or_dash", "respawn", "what", "found", "armed_by"}


@pytest.mark.parametrize("event", sorted(LINES))
def test_every_narrated_event_is_in_the_catalog_and_fills_every_placeholder(event: str) -> None:
    assert event in EVENT_TYPES, f"LINES narrates {event!r}, which the event catalog lacks"
    fields = set(re.findall(r"{(\w+)}", LINES[event])) - DERIVED
    record = {"event": event, "work_item": "acme/app#7", **{f: f"<{f}>" for f in fields}}
    line = line_of(record)
    for field in fields:
        assert f"<{field}>" in line, f"{event}'s line does not show its {field}"
    if "{ref" in LINES[event]:
        assert "acme/app#7" in line


def test_an_event_not_in_the_table_prints_nothing_and_a_hostile_field_stays_one_cut_line() -> None:
    assert line_of({"event": "hooks.loaded", "work_item": "acme/app#7"}) == ""
    line = line_of({"event": "input.refused", "work_item": "acme/app#7", "actor": "eve",
                    "hook": "gate", "reason": "line one\n\x1b[31mline two" + "x" * 1000})
    assert "\n" not in line and "\x1b" not in line
    assert len(line) < 2 * LINE_LIMIT + 100
    assert line.startswith('acme/app#7: input from eve REFUSED by hook `gate`: "line one\\n')


def test_a_step_failure_without_an_item_names_the_cycle() -> None:
    assert line_of({"event": "poll.failed", "error": "database is locked"}) == (
        "-: poll.failed cycle: database is locked")


def test_an_arming_names_the_login_or_else_how_it_was_armed() -> None:
    assert line_of({"event": "loop.armed", "work_item": "acme/app#7", "actor": "ann",
                    "source": "command"}) == "acme/app#7: armed by ann"
    assert line_of({"event": "loop.armed", "work_item": "acme/app#7", "actor": "",
                    "source": "label"}) == "acme/app#7: armed by its label"
