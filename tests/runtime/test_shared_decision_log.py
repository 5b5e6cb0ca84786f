"""A loop on a shared PostgreSQL database records its decision log there too (issue 24.4):
`policy replay` run on any host sees the points every host fired; each host keeps its own
copy in its stateDir (what its console reads)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from runtime_helpers import LoopDir, pg_query

POLICY = """\
hooks:
  - name: house-rules
    policy: policies
"""
RULES = """\
rules:
  - name: frozen-items
    on: work_item_start
    when: "contains(labels, 'frozen')"
    set: {proceed: false, reason: "frozen"}
"""


def _host(root: Path, dsn: str) -> LoopDir:
    ld = LoopDir(root, POLICY, database=dsn)
    ld.write("policies/rules.yaml", RULES)
    return ld


def test_replay_on_one_host_sees_the_points_every_host_recorded(tmp_path: Path,
                                                                pg_dsn: str) -> None:
    a, b = _host(tmp_path / "a", pg_dsn), _host(tmp_path / "b", pg_dsn)
    first = a.add("On host a")
    a.start(first)
    a.cli("poll", "--once", env={"THE_LOOP_HOST_ID": "host-a"})  # fires on host a ...
    second = b.add("On host b")
    b.start(second)
    b.cli("poll", "--once", env={"THE_LOOP_HOST_ID": "host-b"})  # ... and on host b
    shared = pg_query(pg_dsn, "SELECT work_item, point FROM decision_log ORDER BY id")
    starts = [r["work_item"] for r in shared if r["point"] == "work_item_start"]
    assert starts == [first, second]
    local = []
    for ld in (a, b):  # each host keeps its own copy too: together they are the shared log
        with sqlite3.connect(ld.state / "loop.db") as conn:
            local += conn.execute("SELECT work_item, point FROM decision_log").fetchall()
    assert sorted(local) == sorted((r["work_item"], r["point"]) for r in shared)
    # A change judged on host a counts host b's point too: refusing every start changes both.
    a.write("policies/rules.yaml", RULES.replace("""    when: "contains(labels, 'frozen')"\n""",
                                                 ""))
    report = json.loads(a.cli("policy", "replay", "--json").stdout)
    assert (report["replayed"], report["changed"]) == (len(shared), 2), report
    one = json.loads(a.cli("policy", "replay", "--json", "--work-item", second).stdout)
    assert one["replayed"] == len([r for r in shared if r["work_item"] == second]), one
