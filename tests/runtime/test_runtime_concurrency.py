"""Several loop processes on one state folder, a burst of replies, a full disk and a slow
hook in the control plane (issue 12.3-12.5), through real processes: two pollers share the
work without doubling anything, concurrent replies queue behind one session at a time, an
unwritable event log costs lines not work, and a request blocked in a hook blocks no other.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

from fault_helpers import broken, hold, live_sessions
from runtime_helpers import LoopDir, readline, until


def finish(procs: list[subprocess.Popen[str]], timeout: float = 120) -> list[str]:
    """Wait for every process; each must exit 0. Returns their stderr."""
    errs = []
    for proc in procs:
        out, err = proc.communicate(timeout=timeout)
        assert proc.returncode == 0, f"{proc.args!r} exited {proc.returncode}:\n{out}\n{err}"
        errs.append(err)
    return errs


def settle(ld: LoopDir) -> None:
    for _ in range(4):
        ld.cli("poll", "--once")
        if not ld.query("SELECT key FROM steps WHERE state='pending'"):
            return
    pending = ld.query("SELECT key FROM steps WHERE state='pending'")
    raise AssertionError(f"steps still pending: {pending}")


def test_two_pollers_on_one_state_folder_start_each_item_once_and_deliver_each_comment_once(
        tmp_path: Path, database: str) -> None:
    with LoopDir(tmp_path, database=database) as ld:
        hold(ld, "maxSessions: 10\n", policy=False)  # all ten at once
        refs = [ld.add(f"Item {i}") for i in range(10)]
        for ref in refs:
            ld.start(ref)
        errs: list[str] = []
        for round_ in range(3):
            if round_ == 1:  # comments written before the pollers start
                for ref in refs:
                    ld.ok("reply", ref, f"First note on {ref}.", "--actor", "bob")
            pollers = [ld.popen("poll", "--once"), ld.popen("poll", "--once")]
            if round_ == 2:  # and while they run
                for ref in refs:
                    ld.ok("reply", ref, f"Second note on {ref}.", "--actor", "carol")
            errs += finish(pollers)
        settle(ld)

        for err in errs:
            assert "IntegrityError" not in err and "Traceback" not in err, err
        assert broken(ld, dict.fromkeys(refs, "running")) == []
        starts = Counter(r["work_item"]["ref"] for r in ld.seen("work_item_start"))
        assert starts == Counter(refs)
        assert ld.query("SELECT COUNT(*) AS n FROM steps WHERE kind='start' AND "
                        "outcome='started'") == [{"n": 10}]
        texts = Counter(r["text"] for r in ld.seen("input_received"))
        assert texts == Counter([f"First note on {r}." for r in refs]
                                + [f"Second note on {r}." for r in refs])
        # Each item: its first session, then one per comment (each resumes the agent).
        per_item = Counter(r["ref"] for r in ld.query("SELECT ref FROM sessions"))
        assert per_item == Counter({ref: 3 for ref in refs})
        assert live_sessions(ld) == Counter(dict.fromkeys(refs, 1))


def test_twenty_concurrent_replies_queue_behind_one_session_at_a_time(
        tmp_path: Path, database: str) -> None:
    """20 `reply` processes at once at a running agent node, then two pollers: each reply is
    delivered once, to a session that is not ended before it starts; never two at once."""
    with LoopDir(tmp_path, database=database) as ld:
        hold(ld, policy=False)
        ref = ld.add()
        ld.start(ref)
        ld.cli("poll", "--once")
        assert live_sessions(ld)[ref] == 1
        texts = [f"Change number {i}." for i in range(20)]
        finish([ld.popen("reply", ref, text, "--actor", "bob") for text in texts])

        samples: list[int] = []
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                try:
                    samples.append(live_sessions(ld)[ref])
                except ValueError:  # a harness record half written: look again
                    continue

        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            errs = finish([ld.popen("poll", "--once"), ld.popen("poll", "--once")])
            settle(ld)
        finally:
            stop.set()
            sampler.join(timeout=30)
        assert samples and max(samples) == 1, Counter(samples)
        assert live_sessions(ld)[ref] == 1
        assert all("Traceback" not in e for e in errs), errs
        assert broken(ld, {ref: "running"}) == []
        assert sorted(r["text"] for r in ld.seen("input_received")) == sorted(texts)
        assert ld.query("SELECT outcome, COUNT(*) AS n FROM steps WHERE kind='input' "
                        "GROUP BY outcome") == [{"outcome": "resumed", "n": 20}]
        # All twenty were taken in before the resumed launch ran: it carries every one of
        # them (a launch per reply would end each session before it read its input).
        first, resumed = ld.launches()
        assert all(text in resumed["prompt"] for text in texts)
        assert not any(text in first["prompt"] for text in texts)
        assert len(ld.query("SELECT id FROM sessions")) == 2


def test_a_full_disk_under_the_event_log_costs_lines_not_work(tmp_path: Path) -> None:
    """events.jsonl on /dev/full (every write ENOSPC): the poller daemon cycles on, says so
    on stderr once, and the database records the work; `poll --once` too."""
    with LoopDir(tmp_path) as ld:
        hold(ld, policy=False)
        ref = ld.add()
        ld.start(ref)
        events = ld.state / "events.jsonl"
        events.unlink()
        events.symlink_to("/dev/full")
        daemon = ld.popen("poll", "--interval", "0.1", "--quiet")
        try:
            until(lambda: ld.work(ref)["state"] == "running" and live_sessions(ld)[ref],
                  timeout=60, what="the daemon to start the item")
            ld.ok("reply", ref, "Use the blue theme.", "--actor", "bob")
            until(lambda: ld.query("SELECT 1 FROM steps WHERE kind='input' AND "
                                   "state='done'"), timeout=60,
                  what="the daemon to deliver the reply in a later cycle")
        finally:
            daemon.send_signal(signal.SIGTERM)
            _, err = daemon.communicate(timeout=30)
        assert daemon.returncode == 0, err
        assert "Traceback" not in err
        assert err.count("cannot write the event log") == 1, err
        assert "No space left on device" in err and "the loop goes on" in err

        ld.ok("reply", ref, "/stop", "--actor", "bob")
        done = ld.cli("poll", "--once")
        assert done.stderr.count("cannot write the event log") == 1, done.stderr
        assert "Traceback" not in done.stderr
        assert ld.work(ref)["state"] == "stopped"
        assert [s["outcome"] for s in ld.query("SELECT outcome FROM steps WHERE kind='input' "
                                                "ORDER BY seq")] == ["resumed", "stopped"]
        assert events.is_symlink()


BLOCK_HOOK = '''
import time
from pathlib import Path
from the_loop.sdk.hooks import LifecycleHooks


class Block(LifecycleHooks):
    """Sits in input_received until the test creates `release` (at most a minute)."""

    def __init__(self, entered, release):
        self.entered, self.release = Path(entered), Path(release)

    def input_received(self, ctx):
        self.entered.write_text(ctx.text)
        deadline = time.monotonic() + 60
        while not self.release.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
'''

TOKENS = {"LOOP_TOKEN": "operator-secret-1", "ALICE_TOKEN": "alice-secret-22"}


def call(url: str, method: str, path: str, token: str | None = None,
         body: Any = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url + path, data=data, method=method)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=90) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        with err:
            return err.code, json.loads(err.read())


def test_control_plane_answers_health_and_items_while_a_request_sits_in_a_hook(
        tmp_path: Path) -> None:
    with LoopDir(tmp_path) as ld:
        entered, release = tmp_path / "entered", tmp_path / "release"
        hold(ld, policy=False)
        ld.write("hooks/block.py", BLOCK_HOOK)
        config = ld.config.read_text()
        hooks = (f"  - {{name: block, path: hooks/block.py, with: {{entered: "
                 f"{json.dumps(str(entered))}, release: {json.dumps(str(release))}}}}}\n")
        ld.config.write_text(config.replace("hooks:\n", "hooks:\n" + hooks) + (
            "serve: {tokenEnv: LOOP_TOKEN, tokens: {alice: ALICE_TOKEN}}\n"))
        ref = ld.add()
        ld.start(ref)
        ld.cli("poll", "--once")
        ld.ok("graph", "complete", "--work-item", ref)
        ld.cli("poll", "--once")
        assert ld.work(ref)["state"] == "gate"

        proc = ld.popen("serve", "--port", "0", "--quiet", env=TOKENS)
        try:
            url = readline(proc).split(" on ", 1)[1].strip()
            answer: list[tuple[int, Any]] = []
            post = threading.Thread(target=lambda: answer.append(call(
                url, "POST", "/items/1/input", TOKENS["ALICE_TOKEN"], {"text": "/approve"})))
            post.start()
            until(entered.exists, timeout=60, what="the POST to reach the blocking hook")

            assert call(url, "GET", "/health") == (200, {"ok": True, "loop": "acme"})
            status, items = call(url, "GET", "/items", TOKENS["ALICE_TOKEN"])
            assert status == 200 and items[0]["loop"]["state"] == "gate"
            # Both answered while the POST is still inside the hook (not yet released).
            assert answer == [] and post.is_alive() and not release.exists()

            release.touch()
            post.join(timeout=60)
            assert answer == [(200, {"ref": ref, "actor": "alice", "done": "approved"})]
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert entered.read_text() == "/approve"
        assert ld.work(ref)["state"] == "done"
