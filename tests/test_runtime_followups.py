"""A person closing a ticket stops its session; a failing poll cycle never stops the poller."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from runtime_helpers import LoopDir, alive, until
from the_loop.config import read_config
from the_loop.runtime import poller
from the_loop.runtime.service import Loop


def test_closing_the_ticket_terminates_its_running_session(tmp_path: Path) -> None:
    with LoopDir(tmp_path, harness="sleep") as ld:
        ref = ld.add()
        ld.start(ref)
        ld.cli("poll", "--once")  # not ld.poll(): that waits for the sessions to end
        [pid] = ld.session_pids()
        assert alive(pid)
        ld.cli("items", "close", ref, "--actor", "dave")
        ld.cli("poll", "--once")
        until(lambda: not alive(pid), timeout=10, what="the session to end")
        assert ld.work(ref)["state"] == "done"


def test_a_poll_cycle_that_fails_is_recorded_and_the_poller_keeps_going(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ld = LoopDir(tmp_path)
    loop = Loop(read_config(ld.config), strict_hooks=True, source="test")
    calls: list[int] = []
    stop = threading.Event()

    def flaky(_: Loop) -> poller.Report:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("tracker went away")
        stop.set()
        return poller.Report()

    monkeypatch.setattr(poller, "poll_once", flaky)
    thread = threading.Thread(target=poller.run_forever, args=(loop, 0.01, stop))
    thread.start()
    thread.join(timeout=10)
    loop.close()
    assert not thread.is_alive()
    assert len(calls) == 2
    [failed] = ld.events("poll.failed")
    assert failed["error"] == "RuntimeError: tracker went away"
