"""A loop on a shared PostgreSQL database records its decision log there, once (issues 24.4,
32.2): `policy replay` run on any host sees the points every host fired, each row names the
host that fired it, and no host keeps a copy of its own; a copy an earlier version kept in
a host's loop.db moves into the shared table."""

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
    shared = pg_query(pg_dsn, "SELECT work_item, point, host FROM decision_log ORDER BY id")
    starts = [(r["work_item"], r["host"]) for r in shared if r["point"] == "work_item_start"]
    assert starts == [(first, "host-a"), (second, "host-b")]
    for ld in (a, b):  # one write per point: no host keeps a copy of its own
        assert not (ld.state / "loop.db").exists() or not sqlite3.connect(
            ld.state / "loop.db").execute("SELECT 1 FROM sqlite_master WHERE "
                                          "name = 'decision_log'").fetchall()
    # A change judged on host a counts host b's point too: refusing every start changes both.
    a.write("policies/rules.yaml", RULES.replace("""    when: "contains(labels, 'frozen')"\n""",
                                                 ""))
    report = json.loads(a.cli("policy", "replay", "--json").stdout)
    assert (report["replayed"], report["changed"]) == (len(shared), 2), report
    one = json.loads(a.cli("policy", "replay", "--json", "--work-item", second).stdout)
    assert one["replayed"] == len([r for r in shared if r["work_item"] == second]), one


FIXTURES = Path(__file__).parent.parent / "data" / "decision-logs"


def test_a_hosts_own_copy_written_by_an_earlier_version_moves_into_the_shared_table(
        tmp_path: Path, pg_dsn: str) -> None:
    """loop-main.db is a loop.db's decision log as the version before 32.2 wrote it; the
    shared table holds two of its rows already (that version wrote both copies)."""
    import shutil

    ld = _host(tmp_path / "a", pg_dsn)
    ld.state.mkdir(parents=True, exist_ok=True)
    shutil.copy(FIXTURES / "loop-main.db", ld.state / "loop.db")
    with sqlite3.connect(ld.state / "loop.db") as conn:
        old = conn.execute("SELECT at, point, work_item, record FROM decision_log "
                           "ORDER BY id").fetchall()
    import psycopg

    with psycopg.connect(pg_dsn, autocommit=True) as pg:  # the old version's shared table,
        pg.execute("CREATE TABLE decision_log(id BIGSERIAL PRIMARY KEY, at DOUBLE PRECISION "
                   "NOT NULL, point TEXT NOT NULL, work_item TEXT NOT NULL, record TEXT "
                   "NOT NULL)")
        for row in old[:2]:  # holding what that version wrote to both copies
            pg.execute("INSERT INTO decision_log(at, point, work_item, record) VALUES "
                       "(%s, %s, %s, %s)", row)
    done = ld.cli("reply", old[0][2], "hello", ok=False)  # any command of the loop
    assert f"moved {len(old) - 2} recorded point(s)" in done.stderr
    shared = pg_query(pg_dsn, "SELECT at, point, work_item, record, refused FROM decision_log "
                              "ORDER BY at")
    assert [(r["at"], r["point"], r["work_item"], r["record"]) for r in shared] == [
        tuple(r) for r in old]  # nothing lost, nothing twice
    assert [r["refused"] for r in shared][:1] == [1]  # the frozen start, summarised
    report = json.loads(ld.cli("policy", "replay", "--json").stdout)
    assert report["replayed"] == len(old)
    assert "moved" not in ld.cli("reply", old[0][2], "again", ok=False).stderr  # once
