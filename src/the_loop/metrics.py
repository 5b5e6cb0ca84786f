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
- `the_loop_served_reloads_total`: reloads that swapped in a different revision;
  `the_loop_served_reloads_unchanged_total`: reloads that found the revision serving (a
  SIGHUP with nothing edited); `the_loop_served_reloads_failed_total`: refused reloads.
- `the_loop_served_revision_info{revision}`: the revision serving (value 1).
- `the_loop_served_decision_log_writes_failed_total`: decision records lost.
- prometheus-client's process and platform collectors (`process_*`, `python_info`,
  `python_gc_*`), as on every Prometheus target. Under several workers sharing one scrape
  (`PROMETHEUS_MULTIPROC_DIR`) only `python_info`: a process's own figures do not add up
  across processes (prometheus-client's multiprocess mode leaves them out likewise).

Every series a declared rule or hook can move exists from the start, at 0, and again after a
reload for what the new revision declares (`declare`): `rule_matches_total{rule,mode}` for
every rule, `refusals_total{rule}` for every enforce rule that sets `proceed: false` and
`(hook <name>)` for every hook (a hook's own refusal, or a required one failing), and
`hook_failures_total{hook}` for every hook. Prometheus's `increase()` needs a series before
its first increment to see that increment; a series that appears at 1 reads as no increase.
"""

from __future__ import annotations

import bisect
import contextlib
import glob
import itertools
import os
import threading
from collections.abc import Iterator
from typing import Any

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.utils import floatToGoString

from the_loop.hooks.engine.chain import Chain
from the_loop.hooks.engine.points import POINTS

# A `_created` timestamp per series doubles a scrape for nothing an alert reads.
disable_created_metrics()  # type: ignore[no-untyped-call]

OTHER = "(other)"
OUTCOMES = ("ok", "refused", "failed", "invalid", "rejected")
BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
           0.5, 1.0, 2.5, 5.0, 10.0)
#: Each bucket's `le` as the library writes it (0.0001, …, +Inf).
_BOUNDS = [*(floatToGoString(b) for b in BUCKETS), "+Inf"]  # type: ignore[no-untyped-call]
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _Hot:
    """The series every call moves (calls, call seconds, rule matches), counted in plain
    integers under one lock and handed to prometheus-client at each scrape as metric
    families: a call costs a lock and three additions instead of four locked values behind
    labelled children (a third of the metrics' share of a served call). The text format,
    and every series' name and labels, are the library's own."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.lock = threading.Lock()
        keys = (*POINTS, OTHER)
        self.calls = {(point, outcome): 0 for point in keys for outcome in OUTCOMES}
        self.buckets = {point: [0] * (len(BUCKETS) + 1) for point in keys}  # last: +Inf
        self.sums = dict.fromkeys(keys, 0.0)
        self.rules: dict[tuple[str, str], int] = {}  # rule names come from the policy only

    def call(self, key: str, outcome: str, seconds: float) -> None:
        at = bisect.bisect_left(BUCKETS, seconds)  # the first bound >= seconds: its bucket
        with self.lock:
            self.calls[key, outcome] += 1
            self.buckets[key][at] += 1
            self.sums[key] += seconds

    def matched(self, rule: str, mode: str) -> None:
        with self.lock:
            self.rules[rule, mode] = self.rules.get((rule, mode), 0) + 1

    def declare(self, rule: str, mode: str) -> None:
        with self.lock:
            self.rules.setdefault((rule, mode), 0)

    def collect(self) -> Iterator[Metric]:
        with self.lock:
            calls = dict(self.calls)
            buckets = {point: list(counts) for point, counts in self.buckets.items()}
            sums = dict(self.sums)
            rules = dict(self.rules)
        yield _counter(f"{self.prefix}_calls", "calls answered, by point and outcome",
                       ("point", "outcome"), calls)
        histogram = HistogramMetricFamily(f"{self.prefix}_call_seconds",
                                          "time to answer a call, by point", labels=("point",))
        for point, counts in buckets.items():
            running = list(itertools.accumulate(counts))
            histogram.add_metric((point,), list(zip(_BOUNDS, running, strict=True)),
                                 sums[point])
        yield histogram
        yield _counter(f"{self.prefix}_rule_matches", "rules that matched, by rule and mode",
                       ("rule", "mode"), rules)


def _counter(name: str, doc: str, labels: tuple[str, str],
             counts: dict[tuple[str, str], int]) -> CounterMetricFamily:
    family = CounterMetricFamily(name, doc, labels=labels)
    for values, n in counts.items():
        family.add_metric(values, n)
    return family


class _Shared:
    """The same series as prometheus-client's own counters and histogram, for a server whose
    workers share one scrape (`PROMETHEUS_MULTIPROC_DIR` set: the library keeps each value
    in a file of that folder, and a scrape adds up every worker's)."""

    def __init__(self, prefix: str, registry: CollectorRegistry) -> None:
        calls = Counter(f"{prefix}_calls", "calls answered, by point and outcome",
                        ("point", "outcome"), registry=registry)
        seconds = Histogram(f"{prefix}_call_seconds", "time to answer a call, by point",
                            ("point",), buckets=BUCKETS, registry=registry)
        self.rules = Counter(f"{prefix}_rule_matches", "rules that matched, by rule and mode",
                             ("rule", "mode"), registry=registry)
        keys = (*POINTS, OTHER)
        self.calls = {(k, o): calls.labels(k, o) for k in keys for o in OUTCOMES}
        self.seconds = {k: seconds.labels(k) for k in keys}
        self.children: dict[tuple[str, str], Any] = {}

    def call(self, key: str, outcome: str, seconds: float) -> None:
        self.calls[key, outcome].inc()
        self.seconds[key].observe(seconds)

    def matched(self, rule: str, mode: str) -> None:
        self.declare(rule, mode).inc()

    def declare(self, rule: str, mode: str) -> Any:
        child = self.children.get((rule, mode))
        if child is None:
            child = self.children[rule, mode] = self.rules.labels(rule, mode)
        return child


#: Where prometheus-client's multiprocess mode keeps each worker's values (either name).
_FOLDER_VARIABLES = ("PROMETHEUS_MULTIPROC_DIR", "prometheus_multiproc_dir")


class _Workers:
    """Every worker's values in the shared folder, added up (prometheus-client's own merge),
    leaving out a file a worker has created but not yet sized: the library makes it empty,
    then sizes it, and its reader fails on an empty one (a scrape while a worker starts was
    a 500)."""

    def collect(self) -> Iterator[Metric]:
        folder = next((os.environ[v] for v in _FOLDER_VARIABLES if os.environ.get(v)), "")
        files = []
        for name in glob.glob(os.path.join(folder, "*.db")):
            with contextlib.suppress(FileNotFoundError):  # a dead worker's, removed meanwhile
                if os.path.getsize(name):
                    files.append(name)
        merged: Iterator[Metric] = MultiProcessCollector.merge(  # type: ignore[no-untyped-call]
            files, accumulate=True)
        return merged


def shared_by_workers() -> bool:
    """Whether prometheus-client keeps its values in files workers share (the variable it
    reads, checked as it checks it)."""
    return bool(set(_FOLDER_VARIABLES) & os.environ.keys())


class Metrics:
    """The counters and histograms above, in a registry of their own."""

    def __init__(self, prefix: str = "the_loop_served") -> None:
        self.registry = registry = CollectorRegistry(auto_describe=True)
        self.shared = shared_by_workers()
        hot: _Hot | _Shared
        if self.shared:
            hot = _Shared(prefix, registry)
            self._revision: Info | Gauge = Gauge(
                f"{prefix}_revision_info", "the policy revision serving", ("revision",),
                registry=registry, multiprocess_mode="liveall")
        else:
            hot = _Hot(prefix)
            registry.register(hot)
            self._revision = Info(f"{prefix}_revision", "the policy revision serving",
                                  registry=registry)
            for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
                registry.register(collector)
        self._hot = hot
        self._serving = ""
        self.refusals = Counter(f"{prefix}_refusals", "refusals, by the rule that refused",
                                ("rule",), registry=registry)
        self.failures = Counter(f"{prefix}_hook_failures", "hook failures, by hook",
                                ("hook",), registry=registry)
        self.reloads = Counter(f"{prefix}_reloads",
                               "reloads that swapped in a different revision",
                               registry=registry)
        self.reloads_unchanged = Counter(f"{prefix}_reloads_unchanged",
                                         "reloads that found the revision already serving",
                                         registry=registry)
        self.reloads_failed = Counter(f"{prefix}_reloads_failed",
                                      "policy reloads refused (the last good one kept)",
                                      registry=registry)
        self.log_failed = Counter(f"{prefix}_decision_log_writes_failed",
                                  "decision records that could not be written",
                                  registry=registry)

    def call(self, point: str, outcome: str, seconds: float) -> None:
        """Count one call; a point outside the catalog counts as `(other)`."""
        self._hot.call(point if point in POINTS else OTHER, outcome, seconds)

    def matched(self, rule: str, mode: str) -> None:
        """Count one match of `rule` (a served rule's name) in `mode` (enforce, audit)."""
        self._hot.matched(rule, mode)

    def declare(self, rules: list[tuple[str, str]], refusers: list[str],
                hooks: list[str]) -> None:
        """Make every series these can move exist at 0 (one already counting keeps its
        count): (rule, mode) matches, refusals by rule (or `(hook name)`), failures by hook."""
        for rule, mode in rules:
            self._hot.declare(rule, mode)
        for rule in refusers:
            self.refusals.labels(rule)
        for hook in hooks:
            self.failures.labels(hook)

    def reloaded(self, *, changed: bool) -> None:
        """Count one reload that loaded: a new revision, or the one serving."""
        (self.reloads if changed else self.reloads_unchanged).inc()

    def serving(self, revision: str) -> None:
        """Say which revision serves (value 1; a worker's earlier one goes to 0)."""
        revision = revision or "(none)"
        if isinstance(self._revision, Info):
            self._revision.info({"revision": revision})
        else:
            if self._serving and self._serving != revision:
                self._revision.labels(self._serving).set(0)
            self._revision.labels(revision).set(1)
        self._serving = revision

    def text(self) -> bytes:
        """The exposition in the Prometheus text format (every worker's, when shared)."""
        if not self.shared:
            return generate_latest(self.registry)
        scrape = CollectorRegistry()
        scrape.register(_Workers())
        scrape.register(PLATFORM_COLLECTOR)  # the same in every worker
        return generate_latest(scrape)


def _name(executor: Any) -> str:
    return str(getattr(executor, "name", "") or type(executor).__name__)


def declared_series(executor: Any) -> tuple[list[tuple[str, str]], list[str], list[str]]:
    """What the served `executor` (or a `Chain`) declares, under the labels `record` counts
    it by: every
    policy rule and its mode; every rule that can refuse (enforce, `proceed: false`) and
    `(hook <name>)` for each hook (its own refusal or a required failure); every hook."""
    chain = executor if isinstance(executor, Chain) else getattr(executor, "chain", None)
    members = ([(link.name, link.executor) for link in chain.links] if chain is not None
               else [(_name(executor), executor)])
    rules: list[tuple[str, str]] = []
    refusers: list[str] = []
    hooks: list[str] = []
    for hook, member in members:
        hooks.append(hook)
        refusers.append(f"(hook {_name(member)})")
        policy = getattr(member, "policy", None)  # a policy executor's checked rules
        if policy is not None:
            for rule in policy.rules:
                rules.append((rule.name, rule.mode))
                if not rule.audit and rule.set_raw.get("proceed") is False:
                    refusers.append(rule.name)
    return rules, refusers, hooks
