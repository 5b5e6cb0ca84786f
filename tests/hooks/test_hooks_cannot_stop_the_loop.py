"""Issue 11 rule 3: a hook can never stop the loop; only a real Ctrl-C of our process can.

Every exception a hook raises — any `BaseException` — is that hook's failure in the chain,
in `handle_request` and in a running `the-loop poll` daemon.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hook_helpers import at, line_of
from runtime_helpers import LoopDir, until
from the_loop.errors import MAX_ERROR
from the_loop.events import EventLog
from the_loop.hooks import install_interrupt, load_chain
from the_loop.hooks.engine.chain import Chain, Link
from the_loop.hooks.engine.executor import Decisions, LifecycleHooks
from the_loop.hooks.engine.points import SessionSpawn, WorkItemStart
from the_loop.hooks.serving.jsonrpc import handle_request
from the_loop.hooks.serving.wire import HOOK_RAISED
from the_loop.interrupt import on_sigint


class Custom(BaseException):
    """A BaseException subclass of a hook author's own."""


def _raise_generator_exit() -> None:
    raise GeneratorExit


BASE_EXCEPTIONS = [
    pytest.param(asyncio.CancelledError("task gone"), "CancelledError: task gone",
                 id="CancelledError"),
    pytest.param(Custom("mine"), "Custom: mine", id="custom-BaseException"),
    pytest.param(GeneratorExit(), "GeneratorExit", id="GeneratorExit"),
    pytest.param(KeyboardInterrupt(), "KeyboardInterrupt", id="KeyboardInterrupt-it-raised"),
    pytest.param(SystemExit(7), "the hook called sys.exit(7)", id="SystemExit"),
]


class MemoryLog(EventLog):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[dict[str, Any]] = []

    def emit(self, event: str, **fields: Any) -> dict[str, Any]:
        record = {"event": event, **fields}
        self.records.append(record)
        return record

    def of(self, event: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r["event"] == event]


class _Fn:
    """An executor from a function, at one point."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def points(self) -> tuple[str, ...]:
        return ("work_item_start", "session_spawn")

    def handler(self, point: str) -> Any:
        return self.fn


def _chain(*fns: Any, required: bool = False) -> tuple[Chain, MemoryLog]:
    log = MemoryLog()
    links = [Link(f"h{i + 1}", _Fn(fn), frozenset({"work_item_start", "session_spawn"}),
                  required) for i, fn in enumerate(fns)]
    return Chain(links, log=log), log


@pytest.mark.parametrize(("exc", "message"), BASE_EXCEPTIONS)
def test_rule3_any_base_exception_a_hook_raises_is_its_failure(
        exc: BaseException, message: str) -> None:
    """The chain records hooks.failed, runs the next hook and returns; it never raises."""
    def boom(ctx: Any) -> None:
        raise exc

    c, log = _chain(boom, lambda ctx: Decisions({"prompt": "second ran"}))
    out = c.run(SessionSpawn(prompt="p"))
    assert out.prompt == "second ran"
    assert [(r["hook"], r["error"]) for r in log.of("hooks.failed")] == [
        ("h1", message + at(boom))]


@pytest.mark.parametrize(("exc", "message"), BASE_EXCEPTIONS)
def test_rule3_a_required_hook_raising_any_base_exception_refuses(
        exc: BaseException, message: str) -> None:
    def boom(ctx: Any) -> None:
        raise exc

    c, log = _chain(boom, required=True)
    out = c.run(WorkItemStart())
    assert out.proceed is False
    assert out.reason == f"required hook 'h1' failed: {message}"
    assert log.of("hooks.refused")[0]["hook"] == "h1"


def test_rule3_a_hostile_answer_raising_cancelled_error_is_that_hooks_failure() -> None:
    """An answer whose fact compares by raising CancelledError fails the hook, not the loop."""
    class Evil(list[str]):
        def __eq__(self, other: object) -> bool:
            raise asyncio.CancelledError("from __eq__")

        __ne__ = __eq__  # type: ignore[assignment]

    def answer(ctx: SessionSpawn) -> SessionSpawn:
        ctx.labels = Evil(["x"])
        return ctx

    c, log = _chain(answer)
    out = c.run(SessionSpawn(prompt="p"))
    assert out.prompt == "p"
    assert "CancelledError: from __eq__" in log.of("hooks.failed")[0]["error"]


def test_rule3_an_exception_with_a_huge_message_is_quoted_only_in_part() -> None:
    def boom(ctx: Any) -> None:
        raise ValueError("x" * 5_000_000)

    c, log = _chain(boom)
    c.run(SessionSpawn())
    error = log.of("hooks.failed")[0]["error"]
    assert error.startswith("ValueError: xxx")
    # The message is cut; where it was raised comes after the cut, whole.
    message, site = error[:-len(at(boom))], error[-len(at(boom)):]
    assert site == at(boom)
    assert len(message) < MAX_ERROR + 60
    assert message.endswith(f"({5_000_000 + len('ValueError: ') - MAX_ERROR} more characters)")


class _Raises(LifecycleHooks):
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def session_spawn(self, ctx: SessionSpawn) -> SessionSpawn | None:
        raise self.exc


@pytest.mark.parametrize(("exc", "message"), BASE_EXCEPTIONS)
def test_rule3_handle_request_answers_an_error_for_any_base_exception(
        exc: BaseException, message: str) -> None:
    body = json.dumps({"jsonrpc": "2.0", "method": "session_spawn",
                       "params": {"prompt": "p"}, "id": 1}).encode()
    answer = json.loads(handle_request(_Raises(exc), body))
    assert answer["error"]["code"] == HOOK_RAISED
    assert answer["error"]["message"] == f"hook _Raises raised at session_spawn: {message}"


# ----------------------------------------------------------- a real interrupt still works

SELF_INTERRUPT = """
import os, signal, time
from the_loop.sdk.hooks import LifecycleHooks


class Hooks(LifecycleHooks):
    def __init__(self, how):
        self.how = how

    def session_spawn(self, ctx):
        if self.how == "real":
            os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C of the process
            time.sleep(30)
        raise KeyboardInterrupt("the hook's own")
"""


def _hooks_run(tmp_path: Path, how: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "hook.py").write_text(SELF_INTERRUPT, encoding="utf-8")
    config = tmp_path / "cli-config.yaml"
    config.write_text(
        "loop: acme\nstateDir: state\nhooks:\n"
        f"  - {{name: ctrl-c, path: hook.py, with: {{how: {how}}}}}\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("THE_LOOP_")}
    return subprocess.run(
        [sys.executable, "-m", "the_loop", "--config", str(config), "hooks", "run",
         "session_spawn", "--context", "-", "--json"],
        input='{"prompt": "hi"}', text=True, capture_output=True, timeout=60, env=env,
        cwd=tmp_path, check=False,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def test_rule3_a_keyboard_interrupt_the_hook_raises_itself_does_not_stop_the_command(
        tmp_path: Path) -> None:
    done = _hooks_run(tmp_path, "own")
    assert done.returncode == 0, done.stderr
    trace = json.loads(done.stdout)["trace"]
    assert [(s["hook"], s["status"], s["error"]) for s in trace] == [
        ("ctrl-c", "failed", "KeyboardInterrupt: the hook's own (at hook.py:"
         f"{line_of(SELF_INTERRUPT, 'raise KeyboardInterrupt')})")]


def test_rule3_a_real_ctrl_c_of_our_own_process_still_stops_the_command(
        tmp_path: Path) -> None:
    done = _hooks_run(tmp_path, "real")
    assert done.returncode == 130, (done.stdout, done.stderr)
    assert done.stderr.strip() == "the-loop: interrupted"
    assert done.stdout == ""


# ------------------------------------------------------------ a real `the-loop poll` daemon

STOPPER = """
import asyncio
from the_loop.sdk.hooks import LifecycleHooks


class Custom(BaseException):
    pass


class Stopper(LifecycleHooks):
    def work_item_start(self, ctx):
        if "cancel" in ctx.labels:
            raise asyncio.CancelledError("a hook that uses asyncio")
        if "custom" in ctx.labels:
            raise Custom("a BaseException of its own")
        return None
"""


def test_rule3_a_poll_daemon_survives_hooks_raising_cancelled_error_and_base_exceptions(
        ld: LoopDir) -> None:
    """A real `the-loop poll` daemon: the hook's failures refuse their items (it is required),
    the daemon keeps running, and goes on to start the next work item."""
    ld.write("hooks/stopper.py", STOPPER)
    ld.write_config("hooks:\n  - {name: stopper, path: hooks/stopper.py, required: true}\n")
    cancel = ld.add("Cancelled", "--label", "cancel")
    custom = ld.add("Custom", "--label", "custom")
    plain = ld.add("Plain")
    ld.start(cancel)
    proc = ld.popen("poll", "--interval", "0.1")
    try:
        until(lambda: ld.events("hooks.refused"), timeout=30, what="the first refusal")
        assert proc.poll() is None, proc.communicate(timeout=10)
        ld.start(custom)
        until(lambda: len(ld.events("hooks.refused")) == 2, timeout=30, what="the second")
        assert proc.poll() is None, proc.communicate(timeout=10)
        ld.start(plain)
        until(lambda: ld.launches(), timeout=30, what="the next item's session")
        assert proc.poll() is None, proc.communicate(timeout=10)
    finally:
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    failed = [(r["work_item"], r["error"]) for r in ld.events("hooks.failed")]
    assert failed == [
        (cancel, "CancelledError: a hook that uses asyncio (at hooks/stopper.py:"
                 f"{line_of(STOPPER, 'raise asyncio.CancelledError')})"),
        (custom, "Custom: a BaseException of its own (at hooks/stopper.py:"
                 f"{line_of(STOPPER, 'raise Custom')})")]
    assert [r["work_item"] for r in ld.events("hooks.refused")] == [cancel, custom]
    # Only the plain item's session ran (a respawn after the recording harness exits may add a
    # second launch of it).
    assert {launch["env"]["THE_LOOP_WORK_ITEM"] for launch in ld.launches()} == {plain}
    assert not ld.events("poll.failed")
    assert ld.events("poll.stopped")[-1]["why"] == "SIGTERM"
    ld.wait_sessions()


def test_building_a_chain_installs_no_signal_handler_until_asked(tmp_path: Path) -> None:
    """An embedder gets no process side effect from a chain; `install_interrupt` is explicit."""
    before = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        config = tmp_path / "cli-config.yaml"
        config.write_text("loop: acme\nstateDir: state\nhooks: []\n", encoding="utf-8")
        Chain()
        load_chain(config, log=EventLog())
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        install_interrupt()
        assert signal.getsignal(signal.SIGINT) is on_sigint
    finally:
        signal.signal(signal.SIGINT, before)


REAL_CTRL_C_AT_START = """
import os, signal, time
from the_loop.sdk.hooks import LifecycleHooks


class CtrlC(LifecycleHooks):
    def work_item_start(self, ctx):
        os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C of `poll --once`
        time.sleep(30)
"""


def test_rule3_a_real_ctrl_c_during_poll_once_still_stops_it(ld: LoopDir) -> None:
    """The chain lets the real interrupt through, the poller's step runner too: exit 130."""
    ld.write("hooks/ctrlc.py", REAL_CTRL_C_AT_START)
    ld.write_config("hooks:\n  - {name: ctrl-c, path: hooks/ctrlc.py}\n")
    ld.start(ld.add("Interrupted"))
    done = subprocess.run(
        ld.argv("poll", "--once"), cwd=ld.root, env=ld.env(), text=True, capture_output=True,
        timeout=60, check=False,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert done.returncode == 130, (done.stdout, done.stderr)
    assert done.stderr.strip().splitlines()[-1] == "the-loop: interrupted"
    assert not ld.events("hooks.failed") and not ld.events("step.failed")
    assert ld.launches() == []


def test_rule6_a_huge_wrong_typed_decision_is_quoted_only_in_part() -> None:
    c, log = _chain(lambda ctx: Decisions({"proceed": "no" * 1_000_000}))
    assert c.run(WorkItemStart()).proceed is True
    error = log.of("hooks.failed")[0]["error"]
    assert error.startswith("decision 'proceed' must be bool (got 'nonono")
    assert "(2000000 characters) that is str); nothing from this hook was applied" in error
    assert len(error) < 300
