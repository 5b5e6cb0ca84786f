"""Issue 30 item 4: a local hook's `timeoutSeconds` (a worker thread per call; at the
deadline the chain records hooks.failed and goes on, or refuses when required; the
abandoned thread is said, never joined) and `hooks.slow` for a hook still running."""

from __future__ import annotations

import textwrap
import time
from pathlib import Path

import pytest

from the_loop.errors import HooksConfigError
from the_loop.events import EventLog
from the_loop.hooks import load_chain
from the_loop.hooks.engine import slow
from the_loop.hooks.engine.points import SessionSpawn, WorkItem, WorkItemStart

ITEM = WorkItem(ref="local:acme/app#7")

HUNG = '''
import time
from pathlib import Path
from the_loop.sdk.hooks import LifecycleHooks


class Hung(LifecycleHooks):
    def __init__(self, release):
        self.release = Path(release)

    def work_item_start(self, ctx):
        for _ in range(400):  # until the test lets it go (at most 20 s)
            if self.release.exists():
                return None
            time.sleep(0.05)


class Boom(LifecycleHooks):
    def work_item_start(self, ctx):
        raise ValueError("compliance says no")


class Note(LifecycleHooks):
    def work_item_start(self, ctx):
        ctx.reason = "the next hook ran"
        return ctx
'''


def declared(tmp_path: Path, entries: str) -> Path:
    (tmp_path / "hooks").mkdir(exist_ok=True)
    (tmp_path / "hooks" / "hung.py").write_text(HUNG, encoding="utf-8")
    config = tmp_path / "cli-config.yaml"
    config.write_text("loop: acme\nstateDir: .the-loop\nhooks:\n"
                      + textwrap.dedent(entries), encoding="utf-8")
    return config


def test_r6_4_a_hung_local_hook_with_a_timeout_fails_at_its_deadline_and_the_rest_run(
        tmp_path: Path) -> None:
    release = tmp_path / "release"
    config = declared(tmp_path, f"""\
      - {{name: hung, path: hooks/hung.py, executor: Hung, with: {{release: '{release}'}},
         timeoutSeconds: 0.3}}
      - {{name: note, path: hooks/hung.py, executor: Note}}
    """)
    log = EventLog()
    chain = load_chain(config, log=log)
    began = time.monotonic()
    try:
        out = chain.invoke(WorkItemStart(work_item=ITEM))
        assert time.monotonic() - began < 5  # not the 20 s the hook would take
        [failed] = log.of("hooks.failed")
        assert failed["hook"] == "hung" and failed["error"] == (
            "did not answer within 0.3 s (timeoutSeconds); its thread is left to finish on "
            "its own, never joined (1 of this hook's threads still running)")
        assert out.context.proceed is True and out.context.reason == "the next hook ran"
        assert [s.status for s in out.steps] == ["failed", "changed"]
    finally:
        release.touch()


def test_r6_3_a_required_local_hook_past_its_timeout_refuses(tmp_path: Path) -> None:
    release = tmp_path / "release"
    config = declared(tmp_path, f"""\
      - {{name: hung, path: hooks/hung.py, executor: Hung, with: {{release: '{release}'}},
         timeoutSeconds: 0.2, required: true}}
    """)
    chain = load_chain(config, log=EventLog())
    try:
        out = chain.run(WorkItemStart(work_item=ITEM))
        assert out.proceed is False
        assert out.reason == ("required hook 'hung' failed: did not answer within 0.2 s "
                              "(timeoutSeconds); its thread is left to finish on its own, never "
                              "joined (1 of this hook's threads still running)")
        out = chain.run(WorkItemStart(work_item=ITEM))  # a second hung call: two left
        assert "(2 of this hook's threads still running)" in out.reason
    finally:
        release.touch()


def test_r6_1_a_local_hook_with_a_timeout_fails_at_its_own_line(tmp_path: Path) -> None:
    """What the hook raised on its worker thread is its failure, located in its own file."""
    config = declared(tmp_path, """\
      - {name: boom, path: hooks/hung.py, executor: Boom, timeoutSeconds: 5}
    """)
    log = EventLog()
    load_chain(config, log=log).run(WorkItemStart(work_item=ITEM))
    error = log.of("hooks.failed")[0]["error"]
    assert error.startswith("ValueError: compliance says no (at ")
    line = HUNG.splitlines().index('        raise ValueError("compliance says no")') + 1
    assert error.endswith(f"hooks/hung.py:{line})")


@pytest.mark.parametrize("value, message", [
    (0, "expected a number of seconds > 0 and ≤ 300"),
    ("'5'", "expected a number of seconds > 0 and ≤ 300"),
])
def test_r3_4_a_local_timeout_is_checked_at_load(tmp_path: Path, value: object,
                                                  message: str) -> None:
    config = declared(tmp_path, f"""\
      - {{name: note, path: hooks/hung.py, executor: Note, timeoutSeconds: {value}}}
    """)
    with pytest.raises(HooksConfigError) as err:
        load_chain(config, log=EventLog())
    assert str(err.value).startswith(f"hooks[0] ('note') → timeoutSeconds: {message}")


def test_r5_3_a_hook_still_running_is_recorded_as_slow_while_it_runs(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No timeout: the hook is never cut off, but `hooks.slow` says it is still running
    (the hook waits until the record exists, so it was made before the hook returned)."""
    monkeypatch.setattr(slow, "SLOW_SECONDS", 0.2)
    monkeypatch.setattr(slow, "LOOK_SECONDS", 0.05)
    log = EventLog()

    from the_loop.hooks.engine.chain import Chain, Link
    from the_loop.hooks.engine.executor import LifecycleHooks

    class Waits(LifecycleHooks):
        def session_spawn(self, ctx: SessionSpawn) -> None:
            deadline, before = time.monotonic() + 5, len(log.of("hooks.slow"))
            while len(log.of("hooks.slow")) == before and time.monotonic() < deadline:
                time.sleep(0.02)

    chain = Chain([Link("waits", Waits(), frozenset({"session_spawn"}))], log=log)
    chain.invoke(SessionSpawn(work_item=ITEM))
    [record] = log.of("hooks.slow")
    assert (record["hook"], record["point"], record["work_item"]) == (
        "waits", "session_spawn", ITEM.ref)
    assert record["still_running"] is True and record["seconds"] >= 0.2
    chain.invoke(SessionSpawn(work_item=ITEM))  # each slow call once: now two
    assert len(log.of("hooks.slow")) == 2
