"""The event catalog and the append-only JSONL event log (one write per line, multi-process safe).

Events are records of what happened. They are never hook points: `EVENT_TYPES` and the
catalog in `the_loop.hooks.engine.points` are disjoint, and a test keeps them so.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

#: event type → what it records. Every event the code emits must be listed here.
EVENT_TYPES: dict[str, str] = {
    # hooks engine
    "hooks.loaded": "the declaration loaded; fields: hooks (names), points",
    "hooks.load_failed": "the declaration could not load; fields: error",
    "hooks.decided": "an executor changed decisions; fields: point, hook, changed, rules",
    "hooks.failed": "an executor failed and was skipped; fields: point, hook, error",
    "hooks.refused": "a proceed: false was applied; fields: point, hook, reason, reason_by "
                     "(when another hook gave the reason)",
    "hooks.dropped": "an executor's answer carried facts or unknown keys that were ignored; "
                     "fields: point, hook, dropped",
    "hooks.slow": "a hook has been running for hooks/engine/slow.py's SLOW_SECONDS (5 s) "
                  "and is still running; fields: point, hook, work_item, seconds, "
                  "still_running",
    "hooks.ignored": "a decision the loop does not apply at this moment was changed and "
                     "ignored; fields: point, hook, fields, why",
    "hooks.audit": "audit-mode policy rules matched and would have decided; fields: point, "
                   "hook, rules, would",
    # delivery runtime
    "lifecycle.point": "a lifecycle point fired; fields: point, work_item, hooks, steps "
                       "(what each hook did), decisions (the final ones the loop applies)",
    "loop.armed": "a work item was armed; fields: work_item, actor, source",
    "loop.disarmed": "a work item was disarmed; fields: work_item, why",
    "loop.started": "a work item's start went ahead; fields: work_item",
    "loop.start_refused": "a work item's start was refused; fields: work_item, hook, reason",
    "poll.cycle": "the poller finished a cycle; fields: started, inputs, closed",
    "poll.failed": "a poll cycle failed and the poller went on; fields: error",
    "poll.stopped": "the poller stopped; fields: why",
    "step.failed": "a step of a work item failed and will be retried (or, the third time, "
    "blocks the item); fields: work_item, step, error, attempts",
    "session.respawned": "a running item had no live session and a new one was queued; "
    "fields: work_item, session_id, why",
    "workspace.prepared": "a work item's workspace exists; fields: work_item, path, git",
    "session.launched": "a harness process was launched; fields: work_item, session_id, pid",
    "session.refused": "a launch was refused; fields: work_item, hook, reason",
    "session.exited": "a harness process ended; fields: session_id, code",
    "session.fenced": "this host was away past its lease and another took the item over: "
                      "its session is ended, nothing written; fields: session_id, work_item",
    "claim.fenced": "another owner took a work item over while this process worked on it "
                    "(a newer fencing number): nothing more is written; fields: work_item, "
                    "error",
    "host.lost": "a host's heartbeat lapsed: its sessions are over and its items taken over; "
                 "fields: host, work_item, sessions",
    "session.failed": "a session could not start (its workspace or its harness command "
                      "failed); the item is blocked; fields: work_item, error",
    "session.announced": "the session-started comment was posted; fields: session_id",
    "launch.waiting": "a launch found this host full when it came to start (another process "
                      "of the host took the last place under maxSessions): the step waits "
                      "for room; fields: work_item, step, max_sessions",
    "launch.deferred": "a launch waited longer than it does for its host's launch lock (a "
                       "process that keeps it): the step waits for the next cycle; fields: "
                       "work_item, step, error",
    "question.posted": "an agent's question was posted; fields: work_item, session_id",
    "gate.entered": "a human gate was entered; fields: work_item, node",
    "input.delivered": "a person's input was delivered or run; fields: work_item, kind",
    "input.refused": "a person's input was dropped; fields: work_item, hook, reason",
    "input.refusal_overridden": "a hook refused a /stop or a /reject, which no hook may "
                                "refuse: it went ahead; fields: work_item, control, hook, "
                                "reason, actor",
    "phase.changed": "the graph advanced; fields: work_item, from_node, to_node",
    "phase.published": "a phase message went to the channels; fields: work_item, to_phase",
    "item.completed": "a work item closed; fields: work_item, source",
    "item.announced": "the closure was announced on the channels; fields: work_item",
    "channel.failed": "a channel could not be told; fields: channel, error",
    "serve.started": "the control plane started; fields: url",
    "serve.stopped": "the control plane stopped",
    "demo.step": "a step of the scripted demo; fields: step",
    "decisions.failed": "a fired point could not be written to the decision log (the loop "
                        "went on); fields: point, work_item, error",
}

_REDACTED = "[redacted]"
_ENCODER = json.JSONEncoder(ensure_ascii=False, default=str, separators=(",", ":"))


class EventLog:
    """Appends events to `<stateDir>/events.jsonl`, or keeps them in memory when no path.

    Each event is one JSON object on one line written with a single `os.write` on a file
    opened with O_APPEND, so lines from several processes never interleave. `secrets`
    returns values that must never be written; any occurrence is replaced.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        source: str = "the-loop",
        secrets: Callable[[], Iterable[str]] | None = None,
        keep: int = 10_000,
    ) -> None:
        self.path = Path(path) if path is not None else None
        self.keep = keep  # records kept in `memory` (0: none, for a server's log)
        self.source = source
        self.memory: list[dict[str, Any]] = []
        self._secrets = secrets
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._file: tuple[int, tuple[int, int]] | None = None
        self.failed_writes = 0
        #: called with each record after it is written (a daemon's terminal narrator)
        self.on_emit: Callable[[dict[str, Any]], None] | None = None

    def emit(self, event: str, **fields: Any) -> dict[str, Any]:
        """Record one event; returns the record as written."""
        if event not in EVENT_TYPES:
            raise ValueError(f"{event!r} is not in EVENT_TYPES")
        record: dict[str, Any] = {
            "ts": time.time(), "event": event, "source": self.source, "pid": self._pid,
        }
        record.update(fields)
        line = ""  # encoded only when a secret may hide in it or a file is written
        if self._secrets is not None:
            line = _ENCODER.encode(record)
            found = self.secrets_in(line)
            if found:
                record = _redact(record, found)
                line = _ENCODER.encode(record)
        if self.path is not None and not line:
            line = _ENCODER.encode(record)
        with self._lock:
            if self.keep:
                self.memory.append(record)
                if len(self.memory) > self.keep:
                    del self.memory[:max(1, self.keep // 2)]
            if self.path is not None:
                try:
                    os.write(self._fd(), (line + "\n").encode("utf-8"))
                except OSError as exc:
                    self._write_failed(exc)
        if self.on_emit is not None:
            with contextlib.suppress(Exception):
                self.on_emit(record)
        return record

    def add_secrets(self, more: Callable[[], Iterable[str]]) -> None:
        """Also replace what `more` returns, besides the secrets the log already knows."""
        given = self._secrets
        self._secrets = lambda: [*more(), *(given() if given is not None else ())]

    def known_secrets(self) -> list[str]:
        """Every secret this log replaces (four characters or more), read now."""
        if self._secrets is None:
            return []
        return [secret for secret in self._secrets() if secret and len(secret) >= 4]

    def secrets_in(self, text: str) -> list[str]:
        """The secrets this log knows (four characters or more) that occur in `text`, raw or
        JSON-escaped: what `emit` replaces, for other stores that follow the same rules."""
        held = self._secrets() if self._secrets is not None else ()
        if not held:  # a server with no token: no walk, once per record
            return []
        return [
            secret for secret in held
            if secret and len(secret) >= 4
            and (secret in text or json.dumps(secret, ensure_ascii=False)[1:-1] in text)
        ]

    def _write_failed(self, exc: OSError) -> None:
        """A full or broken disk costs the log a line, never the loop its work: the database
        stays the source of truth. Counted, and said on stderr (first, then every 100th)."""
        self.failed_writes += 1
        if self.failed_writes == 1 or self.failed_writes % 100 == 0:
            why = exc.strerror or type(exc).__name__
            sys.stderr.write(f"the-loop: cannot write the event log {self.path} ({why}); "
                             f"{self.failed_writes} event(s) lost so far, the loop goes on "
                             "(free space or fix the folder's permissions)\n")
            sys.stderr.flush()

    def _fd(self) -> int:
        """The log file, opened O_APPEND once and reopened when it was moved or removed
        (log rotation), so each event is one write to the file that is at the path now."""
        assert self.path is not None
        try:
            current = os.stat(self.path)
        except FileNotFoundError:
            current = None
        if self._file is not None and current is not None and (
            current.st_ino, current.st_dev) == self._file[1]:
            return self._file[0]
        if self._file is not None:
            os.close(self._file[0])
            self._file = None
        self.path.parent.mkdir(parents=True, mode=0o700, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        st = os.fstat(fd)
        self._file = (fd, (st.st_ino, st.st_dev))
        return fd

    def open_now(self) -> None:
        """Open the log file now (creating its folder); raises `OSError` when it cannot be
        written, for a caller that would rather refuse to start than lose every event."""
        with self._lock:
            if self.path is not None:
                self._fd()

    def close(self) -> None:
        """Close the log file (it reopens on the next event)."""
        with self._lock:
            if self._file is not None:
                os.close(self._file[0])
                self._file = None

    def __del__(self) -> None:
        file = getattr(self, "_file", None)
        if file is not None:
            with contextlib.suppress(OSError):
                os.close(file[0])

    def of(self, event: str) -> list[dict[str, Any]]:
        """In-memory records of one type (for tests and traces)."""
        return [r for r in self.memory if r["event"] == event]


def redact(value: Any, secrets: list[str]) -> Any:
    """`value` with every occurrence of each secret replaced, in keys and strings alike."""
    return _redact(value, secrets)


def _redact(value: Any, secrets: list[str]) -> Any:
    """`value` with every occurrence of each secret replaced, in keys and strings alike."""
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, _REDACTED)
        return value
    if isinstance(value, dict):
        return {_redact(str(k), secrets): _redact(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redact(v, secrets) for v in value]
    if isinstance(value, int | float | bool) or value is None:
        return value
    return _redact(str(value), secrets)


def read_events(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """Every well-formed event in a log file, in order; a torn last line is skipped."""
    p = Path(path)
    if not p.exists():
        return
    with p.open("r", encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict):
                yield record


class EventTail:
    """Reads a log file incrementally: each `new()` returns the events appended since the
    last call, reading only the new bytes (a line still being written waits for its end)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.offset = 0
        self.unreadable = 0  # complete lines that were not a JSON object

    def new(self) -> list[dict[str, Any]]:
        try:
            with self.path.open("rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n") + 1
        self.offset += end
        out: list[dict[str, Any]] = []
        for line in data[:end].splitlines():
            try:
                record = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError):
                record = None
            if isinstance(record, dict):
                out.append(record)
            else:
                self.unreadable += 1
        return out
