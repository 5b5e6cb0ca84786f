"""A hook server's /metrics, /ready and /health as Prometheus and a load balancer read them.

Scraped from real servers and parsed with prometheus_client's own parser; the decision log's
failure is made real in PostgreSQL (a constraint no row passes).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psycopg
from prometheus_client.parser import text_string_to_metric_families
from werkzeug.test import Client

from serving_helpers import FROZEN, Served, get, post
from the_loop.hooks.serving.wsgi import app_from_env

TOKEN = "metrics-token-8c1d"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
RULES = FROZEN + """\
  - name: tag
    on: session_spawn
    set:
      prompt_prefix: "[t] "
  - name: watch
    on: session_spawn
    mode: audit
    set:
      proceed: false
  - name: broken
    on: input_received
    when: "regex_match(actor, text)"
    set:
      proceed: false
"""


def spawn(labels: list[str]) -> Any:
    return {"jsonrpc": "2.0", "id": 1, "method": "session_spawn",
            "params": {"labels": labels, "prompt": "p"}}


def serve(tmp_path: Path, *extra: str) -> Served:
    (tmp_path / "rules").mkdir(exist_ok=True)
    (tmp_path / "rules" / "rules.yaml").write_text(RULES, encoding="utf-8")
    return Served(["hooks", "serve", "--policy", "rules", "--port", "0", "--quiet",
                   "--token-env", "TOK", *extra], tmp_path, env={"TOK": TOKEN})


def scrape(url: str, headers: dict[str, str] | None = None) -> dict[tuple[str, tuple[Any, ...]],
                                                                      float]:
    req = urllib.request.Request(url + "metrics", headers=headers or {})
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = resp.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_metrics_count_calls_rules_refusals_and_failures_by_catalog_names(
    tmp_path: Path
) -> None:
    served = serve(tmp_path, "--decision-log", "off")
    try:
        post(served.url, spawn(["frozen"]), AUTH)
        post(served.url, spawn([]), AUTH)
        post(served.url, {"jsonrpc": "2.0", "id": 3, "method": "input_received",
                          "params": {"text": "x", "actor": "("}}, AUTH)  # a bad pattern
        post(served.url, spawn([]))  # no token: 401
        m = scrape(served.url, AUTH)
    finally:
        served.stop()
    calls = "the_loop_served_calls_total"
    assert m[calls, (("outcome", "refused"), ("point", "session_spawn"))] == 1
    assert m[calls, (("outcome", "ok"), ("point", "session_spawn"))] == 1
    assert m[calls, (("outcome", "failed"), ("point", "input_received"))] == 1
    assert m[calls, (("outcome", "rejected"), ("point", "(other)"))] >= 1
    matches = "the_loop_served_rule_matches_total"
    assert m[matches, (("mode", "enforce"), ("rule", "frozen"))] == 1
    assert m[matches, (("mode", "enforce"), ("rule", "tag"))] == 2
    assert m[matches, (("mode", "audit"), ("rule", "watch"))] == 2
    assert m["the_loop_served_refusals_total", (("rule", "frozen"),)] == 1
    assert m["the_loop_served_hook_failures_total", (("hook", "policy"),)] == 1
    assert m["the_loop_served_call_seconds_count", (("point", "session_spawn"),)] == 2
    revisions = [labels for (name, labels), v in m.items()
                 if name == "the_loop_served_revision_info" and v == 1]
    assert len(revisions) == 1 and len(dict(revisions[0])["revision"]) == 64
    assert m["the_loop_served_reloads_total", ()] == 0


def test_ten_thousand_unknown_methods_and_points_add_no_series(tmp_path: Path) -> None:
    served = serve(tmp_path, "--decision-log", "off", "--metrics-public")
    try:
        post(served.url, spawn([]), AUTH)
        before = scrape(served.url)
        for batch in range(200):  # 10,000 distinct methods, 50 per batch
            post(served.url, [{"jsonrpc": "2.0", "id": i, "method": f"m-{batch}-{i}",
                               "params": {f"k{i}": 1}} for i in range(50)], AUTH)
        after = scrape(served.url)
    finally:
        served.stop()
    assert set(after) == set(before)
    assert after["the_loop_served_calls_total", (("outcome", "invalid"),
                                                 ("point", "(other)"))] == 10_000


def test_metrics_need_the_token_unless_public(tmp_path: Path) -> None:
    served = serve(tmp_path, "--decision-log", "off")
    try:
        try:
            urllib.request.urlopen(served.url + "metrics", timeout=10)
            raise AssertionError("/metrics answered without the token")
        except urllib.error.HTTPError as exc:
            assert exc.code == 401
        assert scrape(served.url, AUTH)
        assert get(served.url + "ready") == (200, {"ready": True, "revision": _rev(served),
                                                   "why": ""})
    finally:
        served.stop()


def _rev(served: Served) -> str:
    return str(get(served.url + "health")[1]["revision"])


def test_ready_fails_while_the_log_cannot_be_written_and_calls_are_still_answered(
    tmp_path: Path, pg_dsn: str
) -> None:
    served = serve(tmp_path, "--decision-log", pg_dsn, "--metrics-public")
    try:
        assert post(served.url, spawn([]), AUTH)[0] == 200
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("ALTER TABLE decision_log ADD CONSTRAINT no_rows CHECK (false) "
                         "NOT VALID")
        for _ in range(3):
            assert post(served.url, spawn(["frozen"]), AUTH)[1]["result"]["proceed"] is False
        status, ready = _poll(served.url + "ready", lambda s, b: s == 503)
        assert status == 503 and "decision log cannot be written" in ready["why"]
        _, health = _poll(served.url + "health",
                          lambda s, b: b["decision_log"]["failed"] >= 3)
        assert health["ok"] is True and health["decision_log"]["failed"] >= 3
        assert scrape(served.url)["the_loop_served_decision_log_writes_failed_total", ()] >= 3
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("ALTER TABLE decision_log DROP CONSTRAINT no_rows")
        post(served.url, spawn([]), AUTH)
        status, _ = _poll(served.url + "ready", lambda s, b: s == 200)
        assert status == 200
    finally:
        _, err = served.stop()
    assert err.count("cannot write") == 1  # reported once, not per record
    assert "writing again" in err


def _poll(url: str, ok: Any) -> tuple[int, Any]:
    deadline = time.monotonic() + 15
    while True:
        status, body = get(url)
        if ok(status, body) or time.monotonic() > deadline:
            return status, body
        time.sleep(0.1)


def test_the_wsgi_app_logs_counts_and_answers_ready_as_hooks_serve_does(
    tmp_path: Path
) -> None:
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "rules.yaml").write_text(RULES, encoding="utf-8")
    log = tmp_path / "wsgi.db"
    client = Client(app_from_env({"THE_LOOP_HOOK_POLICY": str(tmp_path / "rules"),
                                  "THE_LOOP_HOOK_DECISION_LOG": str(log),
                                  "THE_LOOP_HOOK_MASK": "session_spawn.prompt"}))
    answer = client.post("/", data=json.dumps(spawn(["frozen"])),
                         headers={"Content-Type": "application/json"})
    assert answer.json["result"]["proceed"] is False
    assert len(answer.headers["X-Policy-Revision"]) == 64
    assert client.get("/ready").status_code == 200
    metrics = client.get("/metrics")
    assert metrics.headers["Content-Type"].startswith("text/plain")
    assert 'the_loop_served_refusals_total{rule="frozen"} 1.0' in metrics.text
    from the_loop.decisions.reads import read_points

    deadline = time.monotonic() + 10
    while not (points := list(read_points(log))) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [p.context["prompt"] for p in points] == ["[masked]"]
    assert points[0].steps[0]["rules"] == ["frozen", "tag"]


def test_gunicorn_workers_sharing_a_metrics_folder_answer_every_scrape_with_all_calls(
        tmp_path: Path) -> None:
    """With PROMETHEUS_MULTIPROC_DIR (prometheus-client's multiprocess mode) a scrape that
    reaches any worker counts every worker's calls; without it each worker told its own."""
    from serving_helpers import gunicorn

    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "rules.yaml").write_text(RULES, encoding="utf-8")
    shared = tmp_path / "prometheus"
    shared.mkdir()
    env = {"THE_LOOP_HOOK_POLICY": str(tmp_path / "rules"),
           "THE_LOOP_HOOK_DECISION_LOG": "off", "THE_LOOP_HOOK_METRICS_PUBLIC": "1",
           "PROMETHEUS_MULTIPROC_DIR": str(shared)}
    with gunicorn(env, tmp_path, workers=3) as url:
        for n in range(30):
            post(url, spawn(["frozen"] if n % 3 == 0 else []))
        scrapes = [scrape(url) for _ in range(12)]  # a new connection each: any worker
        # A worker that has just created its file and not yet sized it (the library makes
        # it empty first): a scrape then must still answer, with what the others hold.
        (shared / "counter_999999.db").touch()
        scrapes += [scrape(url) for _ in range(3)]
    key = ("the_loop_served_calls_total", (("outcome", "refused"), ("point", "session_spawn")))
    ok = ("the_loop_served_calls_total", (("outcome", "ok"), ("point", "session_spawn")))
    seconds = ("the_loop_served_call_seconds_count", (("point", "session_spawn"),))
    frozen = ("the_loop_served_rule_matches_total", (("mode", "enforce"), ("rule", "frozen")))
    for s in scrapes:
        assert (s[key], s[ok], s[seconds], s[frozen]) == (10, 20, 30, 10)
    revisions = [k for k in scrapes[0] if k[0] == "the_loop_served_revision_info"]
    assert revisions and all(scrapes[0][k] == 1 for k in revisions)  # one per live worker


def _until(url: str, ok: Any) -> dict[tuple[str, tuple[Any, ...]], float]:
    deadline = time.monotonic() + 30  # a reload on a loaded machine
    while True:
        m = scrape(url, AUTH)
        if ok(m) or time.monotonic() > deadline:
            return m
        time.sleep(0.05)


def test_i30_13_every_declared_series_starts_at_0_and_a_new_revisions_after_a_reload(
    tmp_path: Path
) -> None:
    """Before any call, every rule's and hook's series is there at 0 (they appeared only at
    their first increment, so Prometheus's increase() missed it); the process and platform
    collectors every target has are there; a 401 on /metrics is not a call; a reload that
    finds the same files is told apart from one that swaps a new revision in."""
    import signal

    served = serve(tmp_path, "--decision-log", "off")
    try:
        with_401 = urllib.request.Request(served.url + "metrics")
        try:
            urllib.request.urlopen(with_401, timeout=10)
            raise AssertionError("/metrics answered without the token")
        except urllib.error.HTTPError as exc:
            assert exc.code == 401
        first = scrape(served.url, AUTH)
        served.proc.send_signal(signal.SIGHUP)  # nothing edited
        same = _until(served.url, lambda m: m["the_loop_served_reloads_unchanged_total", ()])
        (tmp_path / "rules" / "rules.yaml").write_text(RULES + """\
  - name: late
    on: work_item_start
    set:
      proceed: false
""", encoding="utf-8")
        served.proc.send_signal(signal.SIGHUP)
        late = ("the_loop_served_rule_matches_total", (("mode", "enforce"), ("rule", "late")))
        # Until the new revision is counted and its rule's series is there (one scrape may
        # fall between the two; a series that never comes fails below, after 30 s).
        new = _until(served.url, lambda m: m["the_loop_served_reloads_total", ()] and late in m)
    finally:
        served.stop()
    matches, refusals = "the_loop_served_rule_matches_total", "the_loop_served_refusals_total"
    assert {labels: v for (name, labels), v in first.items() if name == matches} == {
        (("mode", "enforce"), ("rule", "frozen")): 0, (("mode", "enforce"), ("rule", "tag")): 0,
        (("mode", "audit"), ("rule", "watch")): 0, (("mode", "enforce"), ("rule", "broken")): 0,
    }
    assert {labels: v for (name, labels), v in first.items() if name == refusals} == {
        (("rule", "frozen"),): 0, (("rule", "broken"),): 0, (("rule", "(hook policy)"),): 0,
    }  # `watch` is audit and `tag` never refuses: they cannot move it
    assert first["the_loop_served_hook_failures_total", (("hook", "policy"),)] == 0
    assert not any(name == "the_loop_served_calls_total" and v for (name, _), v in first.items())
    assert first["process_cpu_seconds_total", ()] > 0
    assert first["process_resident_memory_bytes", ()] > 0
    assert any(name == "python_info" for name, _ in first)
    assert any(name == "python_gc_objects_collected_total" for name, _ in first)
    assert (same["the_loop_served_reloads_unchanged_total", ()],
            same["the_loop_served_reloads_total", ()]) == (1, 0)
    assert (new["the_loop_served_reloads_unchanged_total", ()],
            new["the_loop_served_reloads_total", ()]) == (1, 1)
    assert new[matches, (("mode", "enforce"), ("rule", "late"))] == 0
    assert new[refusals, (("rule", "late"),)] == 0
