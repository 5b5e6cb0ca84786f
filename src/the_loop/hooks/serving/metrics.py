"""The Prometheus metrics of a hook server (and of the loop's `serve`), one registry each.

Every label value comes from the catalog of points, the served policy's rule names or the
hook names of the declaration — never from what a caller sends: a call to a method or
point outside the catalog counts under the point `(other)`, so a caller cannot add series.

- `the_loop_served_calls_total{point,outcome}`: outcome `ok` (decided, no refusal),
  `refused` (answered proceed: false), `failed` (a hook failed: -32000), `invalid` (any
  other JSON-RPC error), `rejected` (refused at the HTTP level: 401, 413, …).
- `the_loop_served_call_seconds{point}`: a histogram of the time a call took.
- `the_loop_served_rule_matches_total{rule,mode}`: rules that matched (enforce, audit).
- `the_loop_served_refusals_total{rule}`: refusals, by the rule that refused.
- `the_loop_served_hook_failures_total{hook}`: hook failures, by hook.
- `the_loop_served_reloads_total`, `the_loop_served_reloads_failed_total`.
- `the_loop_served_revision_info{revision}`: the revision serving (value 1).
- `the_loop_served_decision_log_writes_failed_total`: decision records lost.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    Info,
    disable_created_metrics,
    generate_latest,
)

from the_loop.hooks.engine.points import POINTS

# A `_created` timestamp per series doubles a scrape for nothing an alert reads.
disable_created_metrics()  # type: ignore[no-untyped-call]

OTHER = "(other)"
OUTCOMES = ("ok", "refused", "failed", "invalid", "rejected")
BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
           0.5, 1.0, 2.5, 5.0, 10.0)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Metrics:
    """The counters and histograms above, in a registry of their own."""

    def __init__(self, prefix: str = "the_loop_served") -> None:
        self.registry = registry = CollectorRegistry(auto_describe=True)
        self.calls = Counter(f"{prefix}_calls", "calls answered, by point and outcome",
                             ("point", "outcome"), registry=registry)
        self.seconds = Histogram(f"{prefix}_call_seconds", "time to answer a call, by point",
                                 ("point",), buckets=BUCKETS, registry=registry)
        self.rules = Counter(f"{prefix}_rule_matches", "rules that matched, by rule and mode",
                             ("rule", "mode"), registry=registry)
        self.refusals = Counter(f"{prefix}_refusals", "refusals, by the rule that refused",
                                ("rule",), registry=registry)
        self.failures = Counter(f"{prefix}_hook_failures", "hook failures, by hook",
                                ("hook",), registry=registry)
        self.reloads = Counter(f"{prefix}_reloads", "policy reloads swapped in",
                               registry=registry)
        self.reloads_failed = Counter(f"{prefix}_reloads_failed",
                                      "policy reloads refused (the last good one kept)",
                                      registry=registry)
        self.revision = Info(f"{prefix}_revision", "the policy revision serving",
                             registry=registry)
        self.log_failed = Counter(f"{prefix}_decision_log_writes_failed",
                                  "decision records that could not be written",
                                  registry=registry)
        self._calls: dict[tuple[str, str], Any] = {}
        self._seconds: dict[str, Any] = {}
        self._rules: dict[tuple[str, str], Any] = {}  # rule names come from the policy only
        for point in (*POINTS, OTHER):  # every series exists from the start, at 0
            self._seconds[point] = self.seconds.labels(point)
            for outcome in OUTCOMES:
                self._calls[point, outcome] = self.calls.labels(point, outcome)

    def call(self, point: str, outcome: str, seconds: float) -> None:
        """Count one call; a point outside the catalog counts as `(other)`."""
        key = point if point in POINTS else OTHER
        self._calls[key, outcome].inc()
        self._seconds[key].observe(seconds)

    def matched(self, rule: str, mode: str) -> None:
        """Count one match of `rule` (a served rule's name) in `mode` (enforce, audit)."""
        child = self._rules.get((rule, mode))
        if child is None:  # `labels` costs a call more than the count: looked up once
            child = self._rules[rule, mode] = self.rules.labels(rule, mode)
        child.inc()

    def text(self) -> bytes:
        """The exposition in the Prometheus text format."""
        return generate_latest(self.registry)
