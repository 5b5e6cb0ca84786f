"""What an operations team gets from a hook server: the decision log, metrics, health, readiness.

`Operations` is the one seam between the JSON-RPC core and all of it: every server (`hooks
serve`, the WSGI and ASGI apps) hands it each answered call through `record` (it is the
core's `on_call`), so whichever stack serves a call, the call is counted and logged the
same way. `record` costs the caller a few counter increments and, with a log, the record
built, masked and encoded by `decisions.served` (a few microseconds), then a queue put: the
log's own thread writes it (`decisions.writer`).
A call whose context was read is one record (its point, context as received, decisions
answered, each hook's step with the rules that matched, the revision, the caller, the time);
a request that named no point, or was refused before its context was read, is counted in
the metrics only: it decided nothing.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

from the_loop.decisions.build import refusing_rule
from the_loop.decisions.masking import Masker
from the_loop.decisions.served import ServedRecords
from the_loop.decisions.stores import is_url, open_store, shown
from the_loop.decisions.writer import LogWriter
from the_loop.hooks.serving.jsonrpc import CallRecord, OnCall
from the_loop.metrics import Metrics, declared_series


def _outcome(call: CallRecord) -> str:
    if call.status == "ok":
        return "refused" if call.refused else "ok"
    if call.status.startswith("http"):
        return "rejected"
    return "failed" if call.status == "error -32000" else "invalid"


def _name(executor: Any) -> str:
    return str(getattr(executor, "name", "") or type(executor).__name__)


class Operations:
    """The decision log, masking and metrics of one server (see the module doc)."""

    def __init__(self, *, log: str | None = None, masker: Masker | None = None,
                 forward: OnCall | None = None, metrics_public: bool = False,
                 keep_days: float = 0.0) -> None:
        self.metrics = Metrics()
        self.records = ServedRecords(masker or Masker())
        self.forward = forward
        self.metrics_public = metrics_public
        self.revision = ""
        self.reload_failure: dict[str, Any] | None = None
        self._named: tuple[Any, str, str] = (None, "", "")  # executor, its name and kind
        self.log_target = "" if not log else shown(log) if is_url(log) else str(
            Path(log).expanduser().absolute())  # a URL as host/dbname: never its parameters
        self.writer: LogWriter | None = None
        if log:
            store = open_store(log)
            store.prepare()  # raises: a log that cannot be opened refuses the start
            self.writer = LogWriter(store, log, on_failed=self.metrics.log_failed.inc,
                                    keep_days=keep_days)

    def serving(self, revision: str, executor: Any = None) -> None:
        """Say which revision serves (the info metric, /health, each record), and make the
        series of every rule and hook `executor` declares exist at 0 (`declared_series`)."""
        self.revision = revision
        self.metrics.serving(revision)
        if executor is not None:
            self.metrics.declare(*declared_series(executor))

    def record(self, call: CallRecord) -> None:
        """The core's `on_call`: count the call, queue its record, tell the next listener."""
        self.metrics.call(call.point, _outcome(call), call.ms / 1000.0)
        if call.executor is not None:
            self._count_rules(call)
            if self.writer is not None and call.context is not None:
                self._log(call)
        if self.forward is not None:
            with contextlib.suppress(Exception):
                if call.failure and call.context is not None:  # masked values stay masked
                    call = call._replace(failure=self.records.message(call, call.failure))
                self.forward(call)

    def _log(self, call: CallRecord) -> None:
        writer = self.writer
        assert writer is not None
        try:
            row = self.records.row(time.time(), call)
        except Exception as exc:  # a record that cannot be encoded is lost, counted
            writer.lost(1, f"a record could not be encoded: {type(exc).__name__}: {exc}")
            return
        writer.put(row)

    def _count_rules(self, call: CallRecord) -> None:
        m = self.metrics
        steps = call.detail.get("steps")
        if steps is None:  # one executor: its detail is its step
            for rule in call.detail.get("rules", ()):
                m.matched(rule, "enforce")
            for rule in call.detail.get("audit", ()):
                m.matched(rule, "audit")
            if call.failure:
                m.failures.labels(_name(call.executor)).inc()
            elif call.refused:
                m.refusals.labels(refusing_rule(call.executor, list(call.detail.get("rules", ()))
                                            )).inc()
            return
        links = {link.name: link.executor for link in call.executor.chain.links}
        for step in steps:
            for rule in step.get("rules", ()):
                m.matched(rule, "enforce")
            for rule in step.get("audit", ()):
                m.matched(rule, "audit")
            if step.get("status") == "failed":
                m.failures.labels(step["hook"]).inc()
            if call.refused and step["hook"] == call.detail.get("refused_by"):
                m.refusals.labels(refusing_rule(links.get(step["hook"]), step.get("rules", []))
                                  ).inc()

    def health(self) -> dict[str, Any]:
        """The fields `/health` and `/ready` add: revision, reload and decision-log state."""
        out: dict[str, Any] = {"revision": self.revision}
        if self.reload_failure is not None:
            out["reload"] = self.reload_failure
        if self.writer is not None:
            w = self.writer
            out["decision_log"] = {"target": self.log_target, "written": w.written,
                                   "keep_days": w.keep_seconds / 86_400.0, "pruned": w.pruned,
                                   "failed": w.failed, "error": w.error}
        return out

    def ready(self) -> str:
        """Why this process should not get calls now ("" when it should)."""
        if self.writer is not None and self.writer.error:
            return f"the decision log cannot be written: {self.writer.error}"
        return ""

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


__all__ = ["Operations"]
