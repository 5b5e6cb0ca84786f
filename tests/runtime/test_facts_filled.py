"""Every fact the runtime knows reaches the hooks (issue 33.4): a fact added to a point's
context but never filled in at its call site would read as its default in every rule, and
the suite stayed green. One real walk (`the-loop demo`: all seven points, questions, gates,
a respawn) is read back from its decision log; each fact of each point must take a value
other than its default at least once, or be one the runtime says it does not know
(`unknown_facts`), or be named below with the reason the walk cannot give it one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from test_demo import the_loop

from the_loop.decisions.reads import read_points
from the_loop.hooks.engine.points import SPECS, WORK_ITEM_FIELDS, WorkItem

#: (point, fact) the demo's walk cannot give a value, and why.
NOT_IN_THIS_WALK = {
    ("waiting_for_input", "session_id"): "filled at a question; '' at a gate is right",
    ("work_item_complete", "state"): "the item closes: its value is the default, 'closed'",
}
#: Work-item record fields whose value in the demo's walk is their default: a local tracker
#: has no host; the item is an issue (the default kind) with no author given, and an issue
#: has no branches, head repository, fork or draft.
RECORD_DEFAULT_HERE = {"host", "kind", "author", "base", "head", "head_repository", "fork",
                       "draft"}
EMPTY = WorkItem()


def test_every_fact_of_every_point_is_filled_in_a_real_walk(tmp_path: Path) -> None:
    folder = tmp_path / "demo"
    done = the_loop("demo", "--dir", str(folder), home=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    records = list(read_points(folder / ".the-loop" / "loop.db"))
    assert {r.point for r in records} == set(SPECS)
    left: list[str] = []
    for point, spec in SPECS.items():
        mine = [r for r in records if r.point == point]
        for fact in spec.facts:
            if fact.name == "unknown_facts" or (point, fact.name) in NOT_IN_THIS_WALK:
                continue
            if all(fact.name in r.context.get("unknown_facts", ()) for r in mine):
                continue  # the runtime says it does not know it (the other loop's own)
            if fact.type == "WorkItem":
                left += _unfilled_record_fields(point, fact.name, mine)
            elif all(r.context.get(fact.name, fact.default) == fact.default for r in mine):
                left.append(f"{point}.{fact.name} is always {fact.default!r}")
    assert not left, "facts never filled in at their call site:\n" + "\n".join(left)
    _spawned_where_spawn_said(records)


#: Facts the runtime knows though the point once listed them as the other loop's own
#: (`unknown_facts`): each must stay filled, never go back to "not known".
KNOWN_HERE = {("session_spawned", "cwd")}


def test_facts_the_runtime_knows_are_never_listed_as_unknown() -> None:
    listed = {(point, name) for point, spec in SPECS.items() for f in spec.facts
              if f.name == "unknown_facts" for name in f.default}
    assert not KNOWN_HERE & listed
    assert all(getattr(SPECS[p].field(n), "sent_by", "") == "both" for p, n in KNOWN_HERE)


def _spawned_where_spawn_said(records: list[Any]) -> None:
    """session_spawned's cwd is the folder session_spawn said the session runs in."""
    spawn_cwds = {(r.context["work_item"]["ref"], r.context["cwd"]) for r in records
                  if r.point == "session_spawn"}
    spawned = [r for r in records if r.point == "session_spawned"]
    assert spawned
    for r in spawned:
        assert "cwd" not in r.context.get("unknown_facts", ())
        assert (r.context["work_item"]["ref"], r.context.get("cwd")) in spawn_cwds


def _unfilled_record_fields(point: str, name: str, mine: list[Any]) -> list[str]:
    out = []
    for field in WORK_ITEM_FIELDS:
        if field in RECORD_DEFAULT_HERE:
            continue
        default = getattr(EMPTY, field)
        if all((r.context.get(name) or {}).get(field, default) == default for r in mine):
            out.append(f"{point}.{name}.{field} is always {default!r}")
    return out
