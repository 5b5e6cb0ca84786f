"""Issue 31, item 6: two real pollers on one PostgreSQL database with one host id (two state
folders, as two cloned machines or two containers with one fixed name would have) — the second
refuses to start and says how to set `--host-id`, `state check` reports the clash, and a
poller that finds its id taken later (it was paused past its lease) stops."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime_helpers import LoopDir, pg_query, until

LEASE = "lease: {expirySeconds: 2, heartbeatSeconds: 0.25}\n"


@pytest.fixture
def twins(tmp_path: Path, pg_dsn: str) -> Iterator[tuple[LoopDir, LoopDir]]:
    with LoopDir(tmp_path / "a", database=pg_dsn) as a, \
            LoopDir(tmp_path / "b", database=pg_dsn) as b:
        a.write_config(LEASE)
        b.write_config(LEASE)
        yield a, b


def test_issue31_item6_a_second_poller_with_the_same_host_id_refuses_to_start(
        twins: tuple[LoopDir, LoopDir], pg_dsn: str) -> None:
    a, b = twins
    first = a.popen("poll", "--interval", "0.2", "--quiet", "--host-id", "twin")
    try:
        until(lambda: pg_query(pg_dsn, "SELECT id FROM hosts WHERE id='twin'"), timeout=30,
              what="the first poller's heartbeat")
        started = time.monotonic()
        second = b.cli("poll", "--interval", "0.2", "--host-id", "twin", ok=False, timeout=30)
        assert second.returncode == 1, second.stdout + second.stderr
        assert time.monotonic() - started < 15
        err = second.stderr
        assert err.startswith("the-loop: refusing to start: host id 'twin' is in use by "
                              f"another live loop process (pid {first.pid} on "), err
        assert f"state folder {a.state}" in err
        assert ("two hosts with one id take each other's sessions for dead. Give each host "
                "its own id: --host-id ID, or $THE_LOOP_HOST_ID") in err
        code, out, _ = b.run("state", "check", "--host-id", "twin")
        assert code == 1 and "PROBLEM host-id: host id 'twin' is in use by another" in out, out
        code, out, _ = a.run("state", "check", "--host-id", "twin")
        assert "ok      host-id: 'twin' is this machine's and this state folder's" in out, out
        # Another id on the same database is no clash.
        assert b.cli("poll", "--once", "--host-id", "other").returncode == 0
    finally:
        first.send_signal(signal.SIGTERM)
        _, err = first.communicate(timeout=30)
    assert first.returncode == 0, err
    # Once the first has stopped, its row lapses and the id may be used from here.
    assert b.cli("poll", "--once", "--host-id", "twin", timeout=30).returncode == 0


def test_issue31_item6_a_poller_that_finds_its_id_taken_later_stops(
        twins: tuple[LoopDir, LoopDir], pg_dsn: str) -> None:
    """The first poller is paused past its lease; a second instance takes the id (the row
    had lapsed); when the first wakes, its heartbeat finds the live clash, says so and the
    poller exits 1 — the second keeps the id."""
    a, b = twins
    first = a.popen("poll", "--interval", "0.2", "--quiet", "--host-id", "twin")
    second = None
    try:
        until(lambda: pg_query(pg_dsn, "SELECT id FROM hosts WHERE id='twin'"), timeout=30,
              what="the first poller's heartbeat")
        first.send_signal(signal.SIGSTOP)
        time.sleep(2.5)  # past the 2 s lease
        second = b.popen("poll", "--interval", "0.2", "--quiet", "--host-id", "twin")
        until(lambda: str(b.state) in pg_query(pg_dsn, "SELECT owner FROM hosts WHERE "
                                                       "id='twin'")[0]["owner"],
              timeout=30, what="the second instance holding the id")
        first.send_signal(signal.SIGCONT)
        _, err = first.communicate(timeout=30)
        assert first.returncode == 1, err
        assert "the-loop: stopping: host id 'twin' is in use by another live loop process " \
               f"(pid {second.pid} on " in err
        assert second.poll() is None
    finally:
        for proc in (first, second):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.send_signal(signal.SIGTERM)
                proc.communicate(timeout=30)
