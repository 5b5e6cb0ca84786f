"""Reloading a served policy: SIGHUP and --watch swap a new revision in between calls, and a
broken one is refused while the last good one keeps serving.

Real `hooks serve` processes, real files, callers on keep-alive connections in threads.
"""

from __future__ import annotations

import http.client
import signal
import time
from pathlib import Path
from typing import Any

from serving_helpers import RELOAD_CALL as CALL
from serving_helpers import Callers, Served, get, gunicorn, served_with_stderr_closed
from serving_helpers import tagged_rules as rules
from the_loop.hooks.policy.files import revision


def write(folder: Path, text: str) -> str:
    (folder / "rules.yaml").write_text(text, encoding="utf-8")
    return revision(folder)


def test_sighup_swaps_revisions_under_four_callers_with_no_failed_call(tmp_path: Path) -> None:
    folder = tmp_path / "rules"
    folder.mkdir()
    tags = {write(folder, rules("v0")): "v0"}
    served = Served(["hooks", "serve", "--policy", "rules", "--port", "0", "--quiet",
                     "--decision-log", "off"], tmp_path)
    callers = Callers(served.url)
    try:
        for n in range(1, 6):
            time.sleep(0.3)
            tags[write(folder, rules(f"v{n}"))] = f"v{n}"
            served.proc.send_signal(signal.SIGHUP)
        time.sleep(0.5)
    finally:
        callers.finish()
        code, err = served.stop()
    assert code == 0
    assert callers.failures == []
    assert len(callers.answers) > 100
    seen = set()
    for rev, prompt in callers.answers:
        tag = tags[rev]  # every answer names a revision that was written
        assert prompt == f"[{tag}] p [{tag}]"  # and comes wholly from it
        seen.add(tag)
    assert "v5" in seen and len(seen) >= 3
    assert err.count("reloaded (SIGHUP)") == 5


def test_a_broken_change_is_refused_while_calls_go_on_and_health_says_so(
    tmp_path: Path
) -> None:
    folder = tmp_path / "rules"
    folder.mkdir()
    good = write(folder, rules("good"))
    served = Served(["hooks", "serve", "--policy", "rules", "--port", "0", "--quiet",
                     "--watch", "0.1", "--decision-log", "off"], tmp_path)
    callers = Callers(served.url)
    try:
        time.sleep(0.3)
        broken = write(folder, rules("bad").replace("on: session_spawn", "on: session_spwn"))
        health = _wait_for(served.url, lambda h: "reload" in h)
        assert health["revision"] == good
        assert health["reload"]["failed"] == broken and health["reload"]["serving"] == good
        # which errors, only with the token (test_served_reload_attacks); here how many
        assert health["reload"]["error_count"] >= 1 and "errors" not in health["reload"]
        metrics = _metrics(served.url)
        assert "the_loop_served_reloads_failed_total 1.0" in metrics
        mended = write(folder, rules("mended"))
        health = _wait_for(served.url, lambda h: h["revision"] == mended)
        assert "reload" not in health
        time.sleep(0.2)
    finally:
        callers.finish()
        _, err = served.stop()
    assert callers.failures == []
    prompts = {prompt for _, prompt in callers.answers}
    assert prompts <= {"[good] p [good]", "[mended] p [mended]"}  # never the broken one
    assert "[mended] p [mended]" in prompts
    assert f"revision {broken} does not load; revision {good} keeps serving" in err
    assert "session_spwn" in err


def test_sighup_on_a_hook_class_is_not_a_reload(tmp_path: Path) -> None:
    (tmp_path / "hooks.py").write_text(
        "from the_loop.sdk.hooks import LifecycleHooks\n\n"
        "class H(LifecycleHooks):\n    def session_spawn(self, ctx):\n        return None\n",
        encoding="utf-8")
    served = Served(["hooks", "serve", "--path", "hooks.py", "--port", "0",
                     "--decision-log", "off"], tmp_path)
    code, err = served.stop()
    assert code == 0 and "SIGHUP reloads" not in err


def _wait_for(url: str, ok: Any) -> dict[str, Any]:
    deadline = time.monotonic() + 10
    while True:
        health: dict[str, Any] = get(url + "health")[1]
        if ok(health) or time.monotonic() > deadline:
            return health
        time.sleep(0.05)


def _metrics(url: str) -> str:
    import urllib.request

    with urllib.request.urlopen(url + "metrics", timeout=10) as resp:
        return str(resp.read().decode())


def _revision_answering(url: str) -> str:
    host, port = url.split("/")[2].rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)  # a new connection: any
    try:                                                              # worker may take it
        conn.request("POST", "/", body=CALL, headers={"Content-Type": "application/json",
                                                      "Connection": "close"})
        resp = conn.getresponse()
        resp.read()
        return resp.getheader("X-Policy-Revision") or ""
    finally:
        conn.close()


def test_gunicorn_preload_workers_each_watch_and_reload_their_policy(tmp_path: Path) -> None:
    """With --preload the app (and its watch thread) is built in gunicorn's master and the
    workers are forked from it; no thread survives a fork, so a worker must start a watch
    of its own, or a change is never served (while /health still names the old revision)."""
    folder = tmp_path / "rules"
    folder.mkdir()
    first = write(folder, rules("one"))
    env = {"THE_LOOP_HOOK_POLICY": str(folder), "THE_LOOP_HOOK_WATCH": "0.1",
           "THE_LOOP_HOOK_DECISION_LOG": "off"}
    with gunicorn(env, tmp_path, workers=2, preload=True) as url:
        assert _revision_answering(url) == first
        second = write(folder, rules("two"))
        deadline = time.monotonic() + 15
        seen: list[str] = []
        while seen[-8:] != [second] * 8:  # eight answers in a row, from either worker
            assert time.monotonic() < deadline, f"still answering {seen[-8:]}"
            seen.append(_revision_answering(url))
            time.sleep(0.05)


def test_a_reload_after_stderr_closed_keeps_the_server_serving_the_new_revision(
        tmp_path: Path) -> None:
    """stderr a closed pipe (a `| head` that exited, a restarted journal): the line saying
    a reload happened cannot be written, and that must not stop the server."""
    folder = tmp_path / "rules"
    folder.mkdir()
    write(folder, rules("one"))
    with served_with_stderr_closed(["--policy", "rules", "--port", "0", "--decision-log",
                                    "off", "--quiet"], tmp_path) as (proc, url):
        second = write(folder, rules("two"))
        proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while (answered := _revision_answering(url)) != second:
            assert time.monotonic() < deadline, answered
            time.sleep(0.05)
        time.sleep(0.3)  # past the reload's line
        assert proc.poll() is None and _revision_answering(url) == second


def test_a_policy_file_caught_half_written_by_the_watch_is_never_served(
        tmp_path: Path) -> None:
    """An editor that writes a file in place leaves it half written for a moment; a watch
    that looks then sees a policy with its first rule only, which loads: calls would get
    half of a revision. The watch loads a change only once two looks agree."""
    folder = tmp_path / "rules"
    folder.mkdir()
    write(folder, rules("t0"))
    served = Served(["hooks", "serve", "--policy", "rules", "--port", "0", "--quiet",
                     "--watch", "0.1", "--decision-log", "off"], tmp_path)
    callers = Callers(served.url, n=2)
    try:
        for n in range(1, 11):
            whole = rules(f"t{n}")
            half = whole[:whole.index("  - name: suffix")]  # the prefix rule alone: it loads
            with (folder / "rules.yaml").open("w", encoding="utf-8") as out:
                out.write(half)
                out.flush()
                time.sleep(0.04)  # the moment an editor's write takes, stretched
                out.write(whole[len(half):])
            time.sleep(0.3)
        final = revision(folder)
        deadline = time.monotonic() + 10
        while _revision_answering(served.url) != final:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        callers.finish()
        served.stop()
    assert callers.failures == []
    halves = {p for _, p in callers.answers if not p.endswith("]") or p.count("[") != 2}
    assert halves == set(), f"answers from a half-written policy: {sorted(halves)[:3]}"
