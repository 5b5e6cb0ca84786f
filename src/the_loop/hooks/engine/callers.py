"""What each caller of a hook sends, in this catalog's names: the dialects a policy can be
checked against (`the-loop policy check --dialect D`).

- `the-loop`: this loop's runtime — every catalog fact but those only the other loop sends
  (`sent_by: other-loop`), and the values the catalog lists (`FieldSpec.values`);
- `other-loop`: the open-source the-loop (GitHub MadaraUchiha-314/the-loop), as its requests
  read through `hooks.engine.dialect` (tests/data/upstream-wire/params.json holds their
  shape; a test keeps `OTHER_LOOP_FACTS` equal to it), and the values it sends where they
  differ from ours (`OTHER_LOOP_VALUES`).

`sends(dialect, point)` gives dotted names (`labels`, `work_item.fork`), as `unknown_facts`
and `policy.reads` do.
"""

from __future__ import annotations

from the_loop.hooks.engine.points import SPECS, WORK_ITEM_FIELDS

DIALECTS = ("the-loop", "other-loop")

#: Per point: the facts the other loop's requests carry, in our names.
OTHER_LOOP_FACTS: dict[str, tuple[str, ...]] = {
    "work_item_start": ("work_item", "loop", "command", "actor", "harness", "instance"),
    "session_spawn": ("work_item", "endpoint", "harness", "cwd", "model", "effort",
                      "harness_args", "respawn", "loop"),
    "session_spawned": ("work_item", "endpoint", "harness", "session_id", "tmux_target", "cwd",
                        "model", "effort", "harness_args", "respawn"),
    "waiting_for_input": ("work_item", "kind", "node", "actor", "loop"),
    "input_received": ("work_item", "kind", "actor", "source", "control", "event", "endpoint",
                       "loop"),
    "phase_changed": ("work_item", "loop", "from_node", "to_node", "from_phase", "to_phase",
                      "outcome", "actor", "terminal"),
    "work_item_complete": ("work_item", "state", "reason", "source", "actor", "loop"),
}
#: The work-item fields the other loop's records carry (its `provider` is our `tracker`).
OTHER_LOOP_RECORD = ("ref", "tracker", "host", "owner", "repo", "repository", "number", "kind",
                     "url", "id")
#: (point, fact) → the values the other loop sends where its set differs from ours: how an
#: input came in, how a closure was seen, who changed the phase.
OTHER_LOOP_VALUES: dict[tuple[str, str], tuple[str, ...]] = {
    ("input_received", "source"): ("comment", "verb"),
    ("work_item_complete", "source"): ("webhook", "poll"),
    ("phase_changed", "actor"): ("human", "agent"),
}


def _dotted(point: str, names: tuple[str, ...], record: tuple[str, ...]) -> frozenset[str]:
    """`names` and their records' fields, dotted, and the point's decisions (a rule reads
    what the hooks before it decided; every caller sends them)."""
    out: set[str] = {d.name for d in SPECS[point].decisions}
    for name in names:
        out.add(name)
        spec = SPECS[point].field(name)
        if spec is not None and spec.type == "WorkItem":
            out.update(f"{name}.{f}" for f in record)
    return frozenset(out)


_SENDS: dict[str, dict[str, frozenset[str]]] = {
    "the-loop": {
        point: _dotted(point, tuple(f.name for f in spec.facts if f.sent_by == "both"),
                       WORK_ITEM_FIELDS)
        for point, spec in SPECS.items()
    },
    "other-loop": {
        point: _dotted(point, (*names, "unknown_facts"), OTHER_LOOP_RECORD)
        for point, names in OTHER_LOOP_FACTS.items()
    },
}


def sends(dialect: str, point: str) -> frozenset[str]:
    """The facts `dialect`'s caller sends at `point`, dotted (`work_item.fork`)."""
    return _SENDS[dialect][point]


def values_sent(dialect: str, point: str, fact: str) -> tuple[str, ...]:
    """The values `dialect`'s caller sends for `fact` at `point` (empty: not a closed set)."""
    if dialect == "other-loop":
        return OTHER_LOOP_VALUES.get((point, fact), ())
    spec = SPECS[point].field(fact)
    return spec.values if spec is not None else ()
