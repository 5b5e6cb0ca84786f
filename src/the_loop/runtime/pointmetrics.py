"""The loop's own Prometheus metrics: the points this process fired, for `the-loop serve`.

The same metrics a hook server keeps (`the_loop.metrics`), named `the_loop_points_*`,
one registry per process (a `serve` process and a `poll` process each count their own
points; R3.7: the declaration is read once per process, so the reload counters stay 0).
`observe` is called by `Loop.fire` with each point's outcome; labels are points, rule names
and hook names only. The metrics exist once `metrics()` is first asked for — by `serve`'s
control plane when it starts — so a `poll` process, which nothing scrapes, counts nothing
and never imports prometheus-client (a tenth of its start-up).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from the_loop.hooks.engine.chain import Chain, Outcome

if TYPE_CHECKING:
    from the_loop.metrics import Metrics

_made: list[Metrics] = []  # this process's metrics, once asked for


def metrics(chain: Chain | None = None) -> Metrics:
    """This process's point metrics, made at the first ask (see the module doc); given the
    process's `chain`, every series its rules and hooks can move exists from now on, at 0
    (`metrics.declared_series`: Prometheus's increase() misses a series' first count)."""
    if not _made:
        from the_loop.metrics import Metrics

        _made.append(Metrics(prefix="the_loop_points"))
    if chain is not None:
        from the_loop.metrics import declared_series

        _made[0].declare(*declared_series(chain))
    return _made[0]


def kept() -> Metrics | None:
    """The metrics if this process keeps them (a control plane asked), else None."""
    return _made[0] if _made else None


def count_lost_record() -> None:
    """Count one decision record the loop could not write (when metrics are kept)."""
    m = kept()
    if m is not None:
        m.log_failed.inc()


def observe(outcome: Outcome, chain: Chain, seconds: float) -> None:
    """Count one fired point (never raises: metrics cost a point nothing but time)."""
    m = kept()
    if m is not None:
        with contextlib.suppress(Exception):  # a counter must never fail a point
            _observe(m, outcome, chain, seconds)


def _observe(m: Metrics, outcome: Outcome, chain: Chain, seconds: float) -> None:
    from the_loop.decisions.build import refusing_rule

    failed = False
    for step in outcome.steps:
        for rule in step.detail.get("rules", ()):
            m.matched(str(rule), "enforce")
        for rule in step.detail.get("audit", ()):
            m.matched(str(rule), "audit")
        if step.status == "failed":
            failed = True
            m.failures.labels(step.hook).inc()
    if outcome.refused:
        refusing = next((s for s in outcome.steps if s.hook == outcome.refused_by), None)
        executor: Any = next((link.executor for link in chain.links
                              if link.name == outcome.refused_by), None)
        rules = list(refusing.detail.get("rules", ())) if refusing is not None else []
        m.refusals.labels(refusing_rule(executor, rules) if executor is not None
                          else f"(hook {outcome.refused_by or 'unknown'})").inc()
    m.call(outcome.point, "refused" if outcome.refused else "failed" if failed else "ok",
           seconds)
