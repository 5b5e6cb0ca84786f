"""A person closing a ticket stops its session; a failing poll cycle never stops the poller."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
from pathlib import Path

import pytest

from runtime_helpers import HARNESSES, LoopDir, alive, until
from the_loop.config import read_config
from the_loop.runtime import poller
from the_loop.runtime.harness import session_alive
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


RAISES_EVERYWHERE = '''
from the_loop.sdk.hooks import LifecycleHooks


class Boom(LifecycleHooks):
    pass


for _point in ("work_item_start", "session_spawn", "session_spawned", "waiting_for_input",
               "input_received", "phase_changed", "work_item_complete"):
    def _raise(self, ctx, _p=_point):
        raise RuntimeError(f"boom at {_p}")
    setattr(Boom, _point, _raise)
'''


def test_abuse_7_r6_2_a_hook_that_raises_everywhere_never_stops_the_work(
        tmp_path: Path) -> None:
    """Every point's hook raises: each failure is recorded and the item still goes from
    arming through its session, the gate and approval to close."""
    with LoopDir(tmp_path, harness="demo") as ld:
        ld.write("hooks/boom.py", RAISES_EVERYWHERE)
        ld.write_config("hooks:\n  - {name: boom, path: hooks/boom.py}\n", harness="demo")
        ref = ld.add()
        ld.start(ref)
        ld.poll()
        until(lambda: ld.poll() and ld.work(ref)["state"] == "gate", timeout=20,
              what="the gate")
        ld.reply(ref, "/approve")
        assert ld.work(ref)["state"] == "done"
        assert ld.item(ref)["state"] == "closed"
        failed = {r["point"] for r in ld.events("hooks.failed") if r["hook"] == "boom"}
        assert failed == {"work_item_start", "session_spawn", "session_spawned",
                          "waiting_for_input", "input_received", "phase_changed",
                          "work_item_complete"}


#: A harness whose child escapes its process group (a new session of its own) while keeping
#: the session's lock descriptor, then both wait; the child's pid goes to argv[1].
ESCAPING_HARNESS = '''\
import os, sys, time
sys.stdin.read()
if os.fork() == 0:
    os.setsid()
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(120)
'''


@pytest.mark.parametrize("state_dir", ["linked/.the-loop", "sub/../.the-loop"])
def test_stop_ends_an_escaped_child_when_state_dir_is_a_symlink_or_dotdot(
        tmp_path: Path, state_dir: str) -> None:
    """stateDir reached through a symlink or `..`: `/stop` still finds every process that
    holds the session's lock (here a child that left the harness's process group), ends
    it, and the item is stopped with no session left alive."""
    (tmp_path / "real").mkdir()
    (tmp_path / "linked").symlink_to(tmp_path / "real")
    (tmp_path / "sub").mkdir()
    with LoopDir(tmp_path, harness="sleep") as ld:
        script = ld.write("escaping_harness.py", ESCAPING_HARNESS)
        child_file = tmp_path / "child.pid"
        text = ld.config.read_text(encoding="utf-8").replace(
            "stateDir: .the-loop", f"stateDir: {state_dir}").replace(
            HARNESSES["sleep"], f"[python3, {json.dumps(str(script))}, "
                                f"{json.dumps(str(child_file))}]")
        ld.config.write_text(text, encoding="utf-8")
        ld.state = tmp_path / state_dir
        ref = ld.add()
        ld.start(ref)
        ld.cli("poll", "--once")
        child = int(until(lambda: child_file.exists() and child_file.read_text(),
                          what="the escaped child"))
        try:
            assert ld.reply(ref, "/stop") == f"{ref}: stopped"
            assert not alive(child), "the escaped child outlived /stop"
            assert ld.work(ref)["state"] == "stopped"
            [sid] = [r["id"] for r in ld.query("SELECT id FROM sessions")]
            assert not session_alive(ld.state / "sessions", sid, 0)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
