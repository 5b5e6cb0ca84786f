"""maxSessions (issue 24.5): a host runs at most that many sessions; the items beyond it wait,
are launched as sessions end, and on a shared database go to a host with room."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

from fault_helpers import hold, live_sessions
from hosts_helpers import Host
from runtime_helpers import LoopDir, pg_query, until


def armed(ld: LoopDir, n: int, max_sessions: int) -> list[str]:
    """`ld` with the holding harness and `maxSessions`, and `n` items started (not polled)."""
    hold(ld, f"maxSessions: {max_sessions}\n", policy=False)
    refs = [ld.add(f"Item {i}") for i in range(n)]
    for ref in refs:
        ld.start(ref)
    return refs


def poll(ld: LoopDir) -> dict[str, Any]:
    """One `poll --once`'s report."""
    return dict(json.loads(ld.cli("poll", "--once", "--json").stdout))


def test_a_host_runs_at_most_max_sessions_and_the_rest_wait(tmp_path: Path,
                                                            database: str) -> None:
    with LoopDir(tmp_path, database=database) as ld:
        refs = armed(ld, 4, 2)
        report = poll(ld)
        assert (report["launched"], report["waiting"]) == (2, 2)
        assert sum(live_sessions(ld).values()) == 2
        waiting = [r for r in refs if not ld.work(r)["session_id"]]
        assert len(waiting) == 2 and all(ld.work(r)["state"] == "running" for r in waiting)
        # One session dies: three items now want one free place (its own respawn and the
        # two waiting); the next poll launches one of them.
        [first] = ld.query("SELECT pid FROM sessions ORDER BY started LIMIT 1")
        os.killpg(int(first["pid"]), signal.SIGKILL)
        until(lambda: sum(live_sessions(ld).values()) == 1, what="one session ended")
        report = poll(ld)
        assert (report["launched"], report["waiting"]) == (1, 2)
        assert sum(live_sessions(ld).values()) == 2


def test_items_beyond_a_full_host_go_to_a_host_with_room(tmp_path: Path, pg_dsn: str) -> None:
    small = Host(tmp_path, "small", pg_dsn, work=30.0, max_sessions=1)
    large = Host(tmp_path, "large", pg_dsn, work=30.0, max_sessions=3)
    try:
        refs = [small.cli("items", "add", f"Item {i}").strip() for i in range(4)]
        for ref in refs:
            small.cli("start", ref)
        small.start()
        until(lambda: pg_query(pg_dsn, "SELECT id FROM sessions"), timeout=30,
              what="the small host's first session")
        large.start()
        until(lambda: len(pg_query(pg_dsn, "SELECT id FROM sessions")) == 4, timeout=60,
              what="four sessions")
        by_host = sorted(r["host"] for r in pg_query(pg_dsn, "SELECT host FROM sessions"))
        assert by_host == ["large", "large", "large", "small"]
    finally:
        small.stop()
        large.stop()


def test_two_processes_of_one_host_launching_at_once_keep_to_max_sessions(
        tmp_path: Path) -> None:
    """Each `poll --once` checks for room, then waits a second before it starts its
    session (a pause point): without the host's launch lock both found the one place free
    and two sessions ran under maxSessions: 1."""
    with LoopDir(tmp_path) as ld:
        refs = armed(ld, 2, 1)
        pause = {"THE_LOOP_PAUSEPOINT": "launch-room=1"}
        polls = [ld.popen("poll", "--once", "--json", env=pause) for _ in range(2)]
        reports = [json.loads(p.communicate(timeout=60)[0]) for p in polls]
        # Each poll tries both items (whichever it could claim): one session in all, and
        # whichever poll came second to an item found no room for it.
        assert sum(r["launched"] for r in reports) == 1
        assert all(r["waiting"] >= 1 or r["launched"] == 1 for r in reports)
        assert sum(live_sessions(ld).values()) == 1
        assert len(ld.query("SELECT id FROM sessions")) == 1
        waiting = [r for r in refs if not ld.work(r)["session_id"]]
        assert len(waiting) == 1 and ld.work(waiting[0])["state"] == "running"


def test_a_cycle_whose_snapshot_is_behind_still_keeps_to_max_sessions_and_asks_once(
        tmp_path: Path) -> None:
    """A cycle checks a launch's room against its own snapshot (issue 34: one statement
    less a launch). Here another process of the host starts the last session after that
    snapshot was read: the launch finds no room under the host's launch lock, and the
    cycle waits instead of launching, asks the database from then on (it does not try the
    launch again and again), and session_spawn, asked once, is not asked again."""
    with LoopDir(tmp_path) as ld:
        refs = armed(ld, 2, 1)
        late = ld.popen("poll", "--once", "--json", env={"THE_LOOP_PAUSEPOINT": "cycle-read=2"})
        until(lambda: ld.query("SELECT 1 FROM hosts"), what="the late poll's first beat")
        first = poll(ld)
        assert (first["launched"], first["waiting"]) == (1, 1)
        report = json.loads(late.communicate(timeout=60)[0])
        assert (report["launched"], report["waiting"]) == (0, 1)
        assert sum(live_sessions(ld).values()) == 1
        assert len(ld.query("SELECT id FROM sessions")) == 1
        [waiting] = [r for r in refs if not ld.work(r)["session_id"]]
        spawns = ld.query("SELECT COUNT(*) AS n FROM decision_log WHERE point='session_spawn' "
                          "AND work_item LIKE ?", f"%{waiting.split('#')[1]}")
        assert spawns[0]["n"] <= 1
        for _ in range(2):
            again = poll(ld)
            assert (again["launched"], again["waiting"]) == (0, 1)
        assert ld.query("SELECT COUNT(*) AS n FROM decision_log WHERE point='session_spawn' "
                        "AND work_item LIKE ?", f"%{waiting.split('#')[1]}") == spawns


def test_a_full_host_does_not_visit_the_items_whose_launch_waits_for_room(
        tmp_path: Path, database: str) -> None:
    """At maxSessions, a cycle leaves an item whose next step is a launch unclaimed (issue
    34: a backlog of waiting items cost a claim and a release each, every cycle); it is
    counted as waiting, and launched once a place is free."""
    with LoopDir(tmp_path, database=database) as ld:
        refs = armed(ld, 3, 1)
        first = poll(ld)
        assert (first["launched"], first["waiting"]) == (1, 2)
        waiting = [r for r in refs if not ld.work(r)["session_id"]]
        fences = {r: ld.work(r)["fence"] for r in waiting}
        again = poll(ld)
        assert (again["launched"], again["waiting"], again["busy"]) == (0, 2, 0)
        assert {r: ld.work(r)["fence"] for r in waiting} == fences  # never claimed
        [running] = ld.query("SELECT pid FROM sessions WHERE exited=0")
        os.killpg(int(running["pid"]), signal.SIGKILL)
        until(lambda: sum(live_sessions(ld).values()) == 0, what="the session to end")
        last = poll(ld)
        assert last["launched"] == 1 and sum(live_sessions(ld).values()) == 1
