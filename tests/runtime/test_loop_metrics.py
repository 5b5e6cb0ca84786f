"""`the-loop serve` exposes the points its process fired, as a hook server does its calls, and
renews its heartbeat under the host id it is given."""

from __future__ import annotations

import contextlib
import json
import signal
import urllib.error
import urllib.request
from collections.abc import Iterator

from prometheus_client.parser import text_string_to_metric_families

from runtime_helpers import LoopDir, readline

TOKEN = "loop-metrics-secret"


def _get(url: str, token: str | None) -> tuple[int, str]:
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        with err:
            return err.code, err.read().decode()


@contextlib.contextmanager
def approved_through_serve(ld: LoopDir, *args: str) -> Iterator[str]:
    """An item at a gate, `serve ARGS` started and the gate approved through its API;
    yields serve's URL (serve stops after the block)."""
    ld.write_config("serve: {tokenEnv: LOOP_TOKEN}\n")
    gate = ld.add("At the gate")
    ld.start(gate)
    ld.poll()
    ld.complete(gate)
    proc = ld.popen("serve", "--port", "0", *args, env={"LOOP_TOKEN": TOKEN})
    try:
        url = readline(proc).split(" on ", 1)[1].strip()
        req = urllib.request.Request(
            url + "/items/1/input", method="POST",
            data=json.dumps({"text": "/approve", "actor": "alice"}).encode(),
            headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as resp:
            assert json.loads(resp.read())["done"] == "approved"
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)


def test_serve_metrics_count_the_points_it_fired_behind_the_token(ld: LoopDir) -> None:
    with approved_through_serve(ld) as url:
        assert _get(url + "/metrics", None)[0] == 401
        status, text = _get(url + "/metrics", TOKEN)
    assert status == 200
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(text) for s in f.samples}
    assert samples["the_loop_points_calls_total",
                   (("outcome", "ok"), ("point", "input_received"))] == 1
    assert samples["the_loop_points_call_seconds_count", (("point", "input_received"),)] == 1
    assert samples["the_loop_points_decision_log_writes_failed_total", ()] == 0


def test_serve_host_id_names_the_host_its_heartbeat_renews(ld: LoopDir) -> None:
    with approved_through_serve(ld, "--host-id", "host-s"):
        hosts = {r["id"]: r["owner"] for r in ld.query("SELECT id, owner FROM hosts")}
    owner = json.loads(hosts["host-s"])  # its heartbeat's host, and which instance it is
    assert owner["process"].startswith("host-s/") and owner["dir"] == str(ld.state), hosts


def test_i30_13_serve_metrics_have_every_declared_rule_and_hook_at_0_from_the_start(
    ld: LoopDir
) -> None:
    """Before any point fires, each rule's and hook's series exists at 0, so a first refusal
    is an increase Prometheus sees; the process collectors are there too."""
    ld.write("policies/rules.yaml", "rules:\n  - name: no-bots\n    on: work_item_start\n"
             "    when: \"ends_with(actor, '[bot]')\"\n    set: {proceed: false}\n")
    ld.write_config("serve: {tokenEnv: LOOP_TOKEN}\n"
                    "hooks:\n  - name: house\n    policy: policies\n")
    proc = ld.popen("serve", "--port", "0", env={"LOOP_TOKEN": TOKEN})
    try:
        url = readline(proc).split(" on ", 1)[1].strip()
        status, text = _get(url + "/metrics", TOKEN)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    assert status == 200
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(text) for s in f.samples}
    assert samples["the_loop_points_refusals_total", (("rule", "no-bots"),)] == 0
    assert samples["the_loop_points_refusals_total", (("rule", "(hook house)"),)] == 0
    assert samples["the_loop_points_rule_matches_total",
                   (("mode", "enforce"), ("rule", "no-bots"))] == 0
    assert samples["the_loop_points_hook_failures_total", (("hook", "house"),)] == 0
    assert samples["process_cpu_seconds_total", ()] > 0
