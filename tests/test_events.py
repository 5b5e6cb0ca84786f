"""The event log (R5.3) and the wall between events and points (R1.3, abuse case 8)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import the_loop
from the_loop.config import read_config
from the_loop.errors import HooksConfigError
from the_loop.events import EVENT_TYPES, EventLog, read_events
from the_loop.hooks.declaring.declaration import parse_hooks
from the_loop.hooks.declaring.loading import chain_from_config
from the_loop.hooks.engine.chain import Chain, Link
from the_loop.hooks.engine.executor import LifecycleHooks
from the_loop.hooks.engine.points import POINTS, SessionSpawn, context_from_json

SRC = Path(the_loop.__file__).parent
# `log.emit("…")`, or the chain's guarded `self._record("…")`. An event name is dotted
# (`hooks.decided`); other `.emit("…")` calls (the policy compiler emits lines of code) pass
# strings that are not.
EMIT = re.compile(r"""\.(?:emit|_record)\(\s*["']([a-z][a-z0-9_]*(?:\.[a-z0-9_]+)+)["']""")


def emitted_event_names() -> dict[str, list[str]]:
    """Every literal event name passed to `.emit(` anywhere under src/, with where."""
    found: dict[str, list[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        for name in EMIT.findall(path.read_text(encoding="utf-8")):
            found.setdefault(name, []).append(str(path.relative_to(SRC)))
    return found


def test_r5_3_every_event_the_code_emits_is_in_event_types() -> None:
    found = emitted_event_names()
    assert {"hooks.decided", "hooks.failed", "hooks.refused", "hooks.loaded",
            "hooks.load_failed"} <= set(found)
    missing = {name: where for name, where in found.items() if name not in EVENT_TYPES}
    assert missing == {}, f"emitted but not in EVENT_TYPES: {missing}"


def test_r5_3_the_hook_events_are_catalogued() -> None:
    for name in ("hooks.loaded", "hooks.load_failed", "hooks.decided", "hooks.failed",
                 "hooks.refused", "hooks.dropped"):
        assert EVENT_TYPES[name]


def test_r1_3_event_types_and_points_are_disjoint() -> None:
    assert set(EVENT_TYPES).isdisjoint(POINTS)
    assert all("." in name for name in EVENT_TYPES)
    assert all("." not in name for name in POINTS)


@pytest.mark.parametrize("event", sorted(EVENT_TYPES))
def test_abuse_8_no_event_type_is_accepted_as_a_point(event: str) -> None:
    with pytest.raises(HooksConfigError) as info:
        parse_hooks([{"name": "telemetry", "module": "acme.hooks", "on": [event]}], Path("/"))
    message = str(info.value)
    assert message.startswith("hooks[0] ('telemetry') → on: ")
    assert f"{event!r} is not a lifecycle point" in message
    assert "events are records, not hook points" in message
    assert "Valid points: " + ", ".join(POINTS) in message


def test_r1_3_hooks_decided_under_on_names_the_valid_points() -> None:
    with pytest.raises(HooksConfigError) as info:
        parse_hooks([{"name": "t", "path": "t.py", "on": ["hooks.decided"]}], Path("/"))
    assert str(info.value) == (
        "hooks[0] ('t') → on: 'hooks.decided' is not a lifecycle point (it looks like an "
        "event type; events are records, not hook points). Valid points: "
        + ", ".join(POINTS)
    )


def test_r1_3_an_event_type_is_not_a_context() -> None:
    with pytest.raises(KeyError):
        context_from_json("hooks.decided", {})


def test_emit_refuses_an_event_type_not_in_the_catalog() -> None:
    with pytest.raises(ValueError, match=r"'hooks\.made_up' is not in EVENT_TYPES"):
        EventLog().emit("hooks.made_up")


def test_r5_3_a_record_carries_ts_event_source_pid_and_fields(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "state" / "events.jsonl", source="test")
    log.emit("hooks.failed", point="session_spawn", hook="h", error="boom")
    [record] = list(read_events(tmp_path / "state" / "events.jsonl"))
    assert record["event"] == "hooks.failed" and record["source"] == "test"
    assert isinstance(record["ts"], float) and isinstance(record["pid"], int)
    assert (record["point"], record["hook"], record["error"]) == ("session_spawn", "h", "boom")


def test_a_torn_last_line_is_skipped_when_reading(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    EventLog(path).emit("hooks.loaded", hooks=[])
    with path.open("a", encoding="utf-8") as fh:
        fh.write('{"ts": 1, "event": "hooks.lo')
    assert [r["event"] for r in read_events(path)] == ["hooks.loaded"]


WRITER = """
import sys
from the_loop.events import EventLog
log = EventLog(sys.argv[1], source="writer-" + sys.argv[2])
pad = sys.argv[2] * 3000   # long lines: a torn or interleaved write would show
for i in range(int(sys.argv[3])):
    log.emit("hooks.decided", point="session_spawn", hook="w" + sys.argv[2], seq=i,
             changed=["prompt"], pad=pad)
"""


def test_r5_3_the_log_is_one_write_per_line_and_safe_across_processes(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    writers, per_writer = 4, 500
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(n), str(per_writer)])
        for n in range(writers)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0] * writers
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == writers * per_writer
    records = [json.loads(line) for line in lines]  # every line parses on its own
    for n in range(writers):
        mine = [r for r in records if r["source"] == f"writer-{n}"]
        assert [r["seq"] for r in mine] == list(range(per_writer))
        assert all(r["pad"] == str(n) * 3000 for r in mine)


def test_secrets_are_redacted_from_events(tmp_path: Path) -> None:
    secret = "s3cr3t-t0ken-value"
    log = EventLog(tmp_path / "events.jsonl", secrets=lambda: [secret, ""])
    record = log.emit("hooks.failed", point="p", hook="h", error=f"401 with {secret} sent")
    assert secret not in json.dumps(record)
    assert record["error"] == "401 with [redacted] sent"
    assert secret not in (tmp_path / "events.jsonl").read_text(encoding="utf-8")


def test_no_declared_token_value_reaches_the_event_log(
    tmp_path: Path, write_config: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hook that puts a declared tokenEnv's value in its error: the log shows [redacted]."""
    token = "tok-9f8e7d6c5b4a"
    monkeypatch.setenv("COMPLIANCE_TOKEN", token)
    (tmp_path / "leaky.py").write_text(
        "import os\nfrom the_loop.hooks.engine.executor import LifecycleHooks\n"
        "class Leaky(LifecycleHooks):\n"
        "    def session_spawn(self, ctx):\n"
        "        raise RuntimeError('token is ' + os.environ['COMPLIANCE_TOKEN'])\n",
        encoding="utf-8",
    )
    cfg = write_config("""
        stateDir: state
        hooks:
          - name: leaky
            path: leaky.py
          - name: compliance
            url: https://compliance.example/hooks
            tokenEnv: COMPLIANCE_TOKEN
            enabled: false
    """)
    chain = chain_from_config(read_config(cfg))
    chain.run(SessionSpawn())
    text = (tmp_path / "state" / "events.jsonl").read_text(encoding="utf-8")
    assert "hooks.failed" in text and "token is [redacted]" in text
    assert token not in text


def test_an_embedded_chain_without_a_path_keeps_events_in_memory() -> None:
    class Refuse(LifecycleHooks):
        def session_spawn(self, ctx: SessionSpawn) -> SessionSpawn:
            ctx.proceed, ctx.reason = False, "no"
            return ctx

    chain = Chain([Link("refuse", Refuse(), frozenset({"session_spawn"}))])
    chain.run(SessionSpawn())
    assert [r["event"] for r in chain.log.memory] == ["hooks.decided", "hooks.refused"]
    assert chain.log.path is None


def test_a_secret_with_json_escaped_characters_is_redacted_without_breaking_the_line(
    tmp_path: Path,
) -> None:
    secret = 'ab"cd\\ef'
    log = EventLog(tmp_path / "events.jsonl", secrets=lambda: [secret])
    record = log.emit("hooks.failed", point="session_spawn", hook="h",
                      error=f"sent {secret}", nested={f"key {secret}": [secret]})
    assert record["error"] == "sent [redacted]"
    assert record["nested"] == {"key [redacted]": ["[redacted]"]}
    text = (tmp_path / "events.jsonl").read_text()
    assert 'ab\\"cd' not in text and "[redacted]" in text
    assert json.loads(text)["error"] == "sent [redacted]"


def test_event_tail_returns_only_new_events_and_waits_for_a_torn_line(tmp_path: Path) -> None:
    from the_loop.events import EventTail

    path = tmp_path / "events.jsonl"
    tail = EventTail(path)
    assert tail.new() == []  # no file yet
    log = EventLog(path)
    log.emit("hooks.loaded", hooks=["a"])
    assert [r["hooks"] for r in tail.new()] == [["a"]]
    assert tail.new() == []
    with path.open("a", encoding="utf-8") as fh:
        fh.write('{"event": "hooks.loaded", "hoo')  # a writer mid-line
    assert tail.new() == []
    with path.open("a", encoding="utf-8") as fh:
        fh.write('ks": ["b"]}\n')
    assert [r["hooks"] for r in tail.new()] == [["b"]]
