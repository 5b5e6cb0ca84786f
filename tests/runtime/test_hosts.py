"""One loop on three simulated hosts sharing PostgreSQL (issue 24.3, 24.5): pollers with their
own host ids and folders, through a whole host killed at random moments, a host paused past
its lease and resumed (fenced out: it ends its session and writes nothing), and PostgreSQL
restarted mid-walk. After each: every item done once, every comment delivered once (a
resumed one to one session), no session id launched twice, nothing left running or pending.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from hosts_helpers import Host, all_done, broken
from runtime_helpers import pg_query, until


def walk(hosts: list[Host], n: int, *, comments: int = 0) -> list[str]:
    """Add `n` items, arm them, and write `comments` person's comments on the first items."""
    first = hosts[0]
    refs = [first.cli("items", "add", f"Item {i}").strip() for i in range(n)]
    for ref in refs:
        first.cli("start", ref, "--actor", "alice")
    for i, ref in enumerate(refs[:comments]):
        first.cli("items", "comment", ref, f"Note {i} for {ref}.", "--author", "bob")
    return refs


def settled(hosts: list[Host], refs: list[str], dsn: str) -> None:
    """Wait until every item is done and every session recorded as ended (a session's
    process ends a moment after its agent reports the node; a dead host's sessions are
    swept once its lease lapses), stop the hosts, and check that the run broke no promise
    and no poller printed a traceback or a failed cycle."""
    until(lambda: all_done(dsn, refs), timeout=90, what="every item done")
    until(lambda: not pg_query(dsn, "SELECT id FROM sessions WHERE exited=0"), timeout=30,
          what="every session recorded as ended")
    for h in hosts:
        h.stop()
    assert broken(hosts, refs, dsn) == []
    assert all("Traceback" not in h.errors() and "cycle failed" not in h.errors()
               for h in hosts), [h.errors() for h in hosts]


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[list[Host]]:
    made: list[Host] = []
    yield made
    for h in made:
        h.stop()


def test_three_hosts_share_twenty_items_through_hosts_killed_at_random_moments(
        tmp_path: Path, pg_dsn: str, hosts: list[Host]) -> None:
    rng = random.Random(int(os.environ.get("THE_LOOP_TEST_SEED", "24")))
    hosts += [Host(tmp_path, f"host-{i}", pg_dsn, work=0.3, expiry=1.5) for i in range(3)]
    refs = walk(hosts, 20, comments=6)
    for h in hosts:
        h.start()
    for kill, victim in enumerate((hosts[0], hosts[1]), 1):  # each dies at a random moment
        time.sleep(rng.uniform(0.3, 1.5))
        if all_done(pg_dsn, refs):
            break
        victim.kill()
        hosts[2].cli("items", "comment", refs[kill], f"Late note {kill}.", "--author", "eve")
        if victim is hosts[0]:  # it comes back once the others may have taken its items
            time.sleep(2.0)
            victim.start()
    # A session the dead host was running when the item finished is swept by a live host
    # once that host's lease has lapsed.
    settled(hosts, refs, pg_dsn)
    by_host = {r["host"] for r in pg_query(pg_dsn, "SELECT host FROM sessions")}
    assert len(by_host) >= 2, f"one host did all the work: {by_host}"


def test_a_host_paused_past_its_lease_is_fenced_out_when_it_wakes(
        tmp_path: Path, pg_dsn: str, hosts: list[Host]) -> None:
    """Host A pauses (SIGSTOP) in the middle of a launch — a hook is deciding it — with a
    session of another item running. B takes both over once A's lease lapses. A wakes: the
    launch it was in writes nothing (a newer owner holds the claim) and its old session is
    ended by A itself, its `graph complete` never counted."""
    slow = tmp_path / "slow_hook.py"
    slow.write_text(SLOW_HOOK.format(mark=str(tmp_path / "in-hook")), encoding="utf-8")
    a = Host(tmp_path, "host-a", pg_dsn, work=8.0, expiry=1.5,
             extra=f"hooks:\n  - {{name: slow, path: {slow}, on: [session_spawn]}}\n")
    b = Host(tmp_path, "host-b", pg_dsn, work=0.2, expiry=1.5)
    hosts += [a, b]
    running, deciding = walk(hosts, 2)
    a.start()
    until(lambda: (tmp_path / "in-hook").exists(), timeout=30, what="A deciding #2's launch")
    [old] = pg_query(pg_dsn, "SELECT id, pid FROM sessions WHERE ref=?", running)
    paused = a.signal(signal.SIGSTOP)
    assert int(old["pid"]) in paused
    b.start()
    until(lambda: all_done(pg_dsn, [running, deciding]), timeout=60, what="B finishing both")
    rows = "SELECT id, ref, host, lost, step, pid FROM sessions ORDER BY id"  # B reaps its own
    before = pg_query(pg_dsn, rows)
    work_before = pg_query(pg_dsn, "SELECT ref, state, node, session_id, host, fence FROM work "
                                   "ORDER BY ref")
    a.signal(signal.SIGCONT)
    until(lambda: a.events("claim.fenced") and a.events("session.fenced"), timeout=30,
          what="A fenced out of #2's launch and ending its old session of #1")
    until(lambda: not _alive(int(old["pid"])), timeout=15, what="A's old session ending")
    time.sleep(0.5)  # a few more of A's cycles: still nothing written
    assert pg_query(pg_dsn, rows) == before
    assert pg_query(pg_dsn, "SELECT ref, state, node, session_id, host, fence FROM work "
                            "ORDER BY ref") == work_before
    assert [e["work_item"] for e in a.events("claim.fenced")] == [deciding]
    assert [r["host"] for r in before if r["ref"] == deciding] == ["host-b"]
    assert [e["work_item"] for e in a.events("session.launched")] == [running]
    lost = [r for r in before if r["host"] == "host-a"]
    assert [(r["id"], r["lost"]) for r in lost] == [(old["id"], 1)]
    for h in hosts:
        h.stop()
    assert broken(hosts, [running, deciding], pg_dsn) == []
    assert all("cycle failed" not in h.errors() for h in hosts), [h.errors() for h in hosts]


SLOW_HOOK = '''\
import time
from the_loop.sdk.hooks import LifecycleHooks


class Slow(LifecycleHooks):
    def session_spawn(self, ctx):
        if ctx.work_item.ref.endswith("#2"):
            open({mark!r}, "w").close()
            time.sleep(4.0)
        return None
'''


def _alive(pid: int) -> bool:
    from runtime_helpers import alive

    return alive(pid)


PG_BIN = Path("/usr/lib/postgresql/15/bin")


@pytest.fixture
def own_cluster() -> Iterator[tuple[str, Callable[[], None]]]:
    """A PostgreSQL 15 cluster of this test's own (a restart must not disturb anyone else's
    server): initdb as the postgres user into a temporary folder, a unix socket there."""
    if os.geteuid() != 0 or not (PG_BIN / "initdb").exists() or shutil.which("runuser") is None:
        pytest.skip("restarting PostgreSQL needs root and PostgreSQL 15's initdb "
                    f"({PG_BIN}) to run a cluster of the test's own")
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="the-loop-pg-"))
    os.chmod(root, 0o755)
    data = root / "data"
    shutil.chown(root, "postgres", "postgres")
    as_pg = ["runuser", "-u", "postgres", "--"]
    subprocess.run([*as_pg, str(PG_BIN / "initdb"), "-D", str(data), "-A", "trust", "-U",
                    "root"], check=True, capture_output=True, timeout=120)
    ctl = [*as_pg, str(PG_BIN / "pg_ctl"), "-D", str(data), "-w", "-l", str(root / "log")]
    opts = ["-o", f"-k {root} -c listen_addresses=''"]
    subprocess.run([*ctl, *opts, "start"], check=True, capture_output=True, timeout=60)
    def restart() -> None:
        subprocess.run([*ctl, *opts, "-m", "fast", "restart"], check=True, capture_output=True,
                       timeout=60)

    try:
        yield f"postgresql:///postgres?host={root}", restart
    finally:
        subprocess.run([*ctl, "-m", "immediate", "stop"], capture_output=True, timeout=60)
        shutil.rmtree(root, ignore_errors=True)


def test_pollers_reconnect_when_postgresql_restarts_mid_walk_and_lose_nothing(
        tmp_path: Path, own_cluster: tuple[str, Callable[[], None]], hosts: list[Host]) -> None:
    dsn, restart = own_cluster
    hosts += [Host(tmp_path, f"host-{i}", dsn, work=0.5, expiry=3.0) for i in range(3)]
    refs = walk(hosts, 12, comments=3)
    for h in hosts:
        h.start()
    until(lambda: len(pg_query(dsn, "SELECT id FROM hosts")) == 3, timeout=60,
          what="every poller up (one starting while the server is down refuses to start)")
    until(lambda: pg_query(dsn, "SELECT id FROM sessions"), timeout=30, what="sessions")
    restart()
    until(lambda: all_done(dsn, refs), timeout=90, what="every item done after the restart")
    until(lambda: not pg_query(dsn, "SELECT id FROM sessions WHERE exited=0"), timeout=30,
          what="every session's end recorded")
    dead = [h.name for h in hosts if h.proc is None or h.proc.poll() is not None]
    assert not dead, f"pollers died: {dead}: {[h.errors()[-3000:] for h in hosts]}"
    for h in hosts:
        h.stop()
    assert broken(hosts, refs, dsn) == []


def test_every_error_a_restarting_server_gives_is_the_database_away_not_a_mistake(
        own_cluster: tuple[str, Callable[[], None]]) -> None:
    """Connections tried over and over while PostgreSQL restarts meet "no such file", "the
    database system is shutting down / starting up / not yet accepting connections", a
    connection closed under them, 57P01: each is the database away (retried), none the
    mistake a one-shot refuses at once for (libpq's refusals carry only words: `transient`
    reads them, and a restart's must never read as a missing database or role)."""
    import threading

    import psycopg

    from the_loop.sqldb import transient

    dsn, restart = own_cluster
    seen: dict[str, bool] = {}
    stop = threading.Event()

    def probe() -> None:
        while not stop.is_set():
            try:
                with psycopg.connect(dsn, connect_timeout=2) as conn:
                    conn.execute("SELECT pg_sleep(0.01)")
            except psycopg.Error as exc:
                seen[" ".join(str(exc).split())[:200]] = transient(exc)

    threads = [threading.Thread(target=probe) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        for _ in range(2):
            time.sleep(0.3)
            restart()
        time.sleep(0.3)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert seen, "no connection failed while the server restarted"
    assert [m for m, away in seen.items() if not away] == [], seen


def test_a_launch_recorded_by_one_host_is_not_launched_again_by_another(
        tmp_path: Path, pg_dsn: str) -> None:
    """Host A launched and recorded a session, then failed before marking its launch step
    done (the database restarting under it, say); host B, redoing the step, finds that
    session and launches nothing for the step."""
    from runtime_helpers import LoopDir

    with LoopDir(tmp_path, database=pg_dsn) as ld:
        ref = ld.add()
        ld.start(ref)
        ld.cli("poll", "--once", "--host-id", "host-a")
        ld.wait_sessions()
        [launch] = ld.query("SELECT key FROM steps WHERE kind='launch'")
        [first] = ld.query("SELECT id, host FROM sessions")
        assert first["host"] == "host-a"
        _write(pg_dsn, "UPDATE steps SET state='pending' WHERE key=?", launch["key"])
        _write(pg_dsn, "UPDATE sessions SET exited=1")  # A saw it end
        ld.cli("poll", "--once", "--host-id", "host-b")
        ld.wait_sessions()
        assert [r["state"] for r in ld.query("SELECT state FROM steps WHERE key=?",
                                             launch["key"])] == ["done"]
        assert [r["id"] for r in ld.query("SELECT id FROM sessions WHERE step=?",
                                          launch["key"])] == [first["id"]]
        # Its one other session is the respawn of a session that ended before its node did.
        assert sorted(r["step"].split(":")[0] for r in ld.query("SELECT step FROM sessions")) \
            == ["launch", "respawn"]


def _write(dsn: str, sql: str, *params: object) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.replace("?", "%s"), params)  # type: ignore[arg-type]


def test_eight_hosts_started_at_once_walk_every_item_with_none_stuck(
        tmp_path: Path, pg_dsn: str, hosts: list[Host]) -> None:
    """Eight pollers of eight hosts start in the same moment on one database, each opening
    the shared decision log while the others' visits are writing to it: every item is
    walked, none twice. (A visit that opened the log's table, or pruned it, on a second
    connection while its own batch held the table hung every host: each waited on a
    transaction its own process kept open, which the database cannot see as a deadlock.)"""
    hosts += [Host(tmp_path, f"host-{i}", pg_dsn, work=0.2, expiry=2.0) for i in range(8)]
    refs = walk(hosts, 24)  # three a host: the hang showed within a second of the start
    for h in hosts:
        h.start()
    settled(hosts, refs, pg_dsn)
