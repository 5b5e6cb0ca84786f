"""The daemons and the log reader as processes: `serve` (control plane and webhook), `poll`
without --once, and `the-loop events` (issue 7: items 7, 9; R3.6)."""

from __future__ import annotations

import json
import signal
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from runtime_helpers import LoopDir, readline, until

TOKEN = "control-plane-secret"


BROKEN = [
    ("- {name: ghost, path: hooks/missing.py}", "hooks[0] ('ghost') → path: no file at"),
    ("- {name: boom, path: hooks/boom.py}",
     "hooks[0] ('boom') → path: cannot import 'hooks/boom.py': RuntimeError: no"),
    ("- {name: bad-point, url: 'http://127.0.0.1:9/h', on: [poll.cycle]}",
     "hooks[0] ('bad-point')"),
]


@pytest.mark.parametrize("command", [("poll", "--once"), ("serve", "--port", "0")])
@pytest.mark.parametrize(("hooks", "named"), BROKEN)
def test_r3_6_daemons_refuse_to_start_on_a_bad_declaration(
        ld: LoopDir, command: tuple[str, ...], hooks: str, named: str) -> None:
    """`poll` and `serve` exit 1 naming the entry; serve never listens, poll starts nothing."""
    ld.write("hooks/boom.py", "raise RuntimeError('no')\n")
    ld.write_config(f"hooks:\n  {hooks}\n")
    done = ld.cli(*command, ok=False, timeout=30)
    assert done.returncode == 1, done.stdout
    assert done.stderr.startswith("the-loop: refusing to start: ")
    assert named in done.stderr
    assert "control plane on" not in done.stdout
    assert [r["event"] for r in ld.events()] == ["hooks.load_failed"]


# --------------------------------------------------------------------------- serve

class Client:
    def __init__(self, url: str) -> None:
        self.url = url

    def call(self, method: str, path: str, body: Any = None,
             token: str | None = TOKEN) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if token is not None:
            req.add_header("Authorization", f"Bearer {token}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as err:
            with err:
                return err.code, json.loads(err.read())


def test_serve_control_plane_items_input_and_webhook(ld: LoopDir) -> None:
    """health is open; everything else needs the bearer; list/show items; POST input with
    /approve passes a gate; a webhook comment reaches input_received; a webhook closure
    completes an item; SIGTERM stops it cleanly."""
    ld.write_config("serve: {tokenEnv: LOOP_TOKEN}\n")
    gate = ld.add("At the gate")
    running = ld.add("Running")
    pr = ld.add("Its pull request", "--kind", "pull-request", "--for", running)
    ld.start(gate)
    ld.start(running)
    ld.poll()
    ld.complete(gate)

    proc = ld.popen("serve", "--port", "0", env={"LOOP_TOKEN": TOKEN})
    try:
        first = readline(proc)
        assert first.startswith("the-loop control plane on http://127.0.0.1:"), first
        api = Client(first.split(" on ", 1)[1].strip())
        console = proc.stdout.readline()  # written with the first: a newcomer is told where
        # the console is
        assert console.startswith(f"the-loop console on {api.url}/console/ "), console

        assert api.call("GET", "/health", token=None) == (200, {"ok": True, "loop": "acme"})
        assert api.call("GET", "/items", token=None)[0] == 401
        assert api.call("GET", "/items", token="wrong")[0] == 401
        assert api.call("POST", "/items/1/input", {"text": "/approve", "actor": "eve"},
                        token=None)[0] == 401
        assert ld.points("input_received") == []

        status, items = api.call("GET", "/items")
        assert status == 200
        assert [(i["ref"], (i["loop"] or {}).get("state")) for i in items] == [
            (gate, "gate"), (running, "running"), (pr, None)]
        status, shown = api.call("GET", "/items/1")
        assert (status, shown["ref"], shown["loop"]["node"]) == (200, gate, "review")
        assert shown["comments"][-1]["body"].startswith("GRAPH-REQUEST")
        assert api.call("GET", "/items/99")[0] == 404

        assert api.call("POST", "/webhook", {"event": "comment", "ref": gate,
                                             "author": "bob", "body": "Looks fine"}) == (
            200, {"ref": gate, "done": "recorded"})
        # The operator's token acts for a named person, as the CLI does.
        assert api.call("POST", "/items/1/input", {"text": "/approve", "actor": "alice"}) \
            == (200, {"ref": gate, "actor": "alice", "done": "approved"})
        # A review on the running item's pull request resumes the ticket's work there;
        # the session serve launched is collected when it ends (no zombie while serving).
        assert api.call("POST", "/webhook", {"event": "comment", "ref": pr,
                                             "author": "bob", "body": "Rename it"}) == (
            200, {"ref": pr, "done": "resumed"})
        [session] = ld.query("SELECT * FROM sessions WHERE endpoint=?", pr)
        until(lambda: not Path(f"/proc/{session['pid']}").exists(), timeout=30,
              what="serve to collect its finished harness process")
        assert "Rename it" in ld.launches()[-1]["prompt"]
        assert api.call("POST", "/webhook", {"event": "closed", "ref": running,
                                             "actor": "dave"}) == (
            200, {"ref": running, "done": "closed"})
        assert api.call("POST", "/items/1/input", {"text": 3})[0] == 400
        assert api.call("POST", "/webhook", {"event": "merged", "ref": gate})[0] == 400
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err

    inputs = [(p["source"], p["decisions"]["text"]) for p in ld.points("input_received")]
    assert inputs == [("serve", "Looks fine"), ("serve", "/approve"), ("serve", "Rename it")]
    assert ld.item(gate)["state"] == "closed" and ld.work(gate)["state"] == "done"
    assert [(c["author"], c["body"]) for c in ld.item(gate)["comments"][-2:]] == [
        ("bob", "Looks fine"), ("alice", "/approve")]
    completes = [r for r in ld.points("work_item_complete")]
    assert [(c["work_item"], c["source"]) for c in completes] == [
        (gate, "serve"), (running, "serve")]
    assert ld.item(running)["state"] == "closed"
    names = ld.names()
    assert names.index("serve.started") < names.index("serve.stopped")
    assert TOKEN not in (ld.state / "events.jsonl").read_text()


@pytest.mark.parametrize("host", ["0.0.0.0", "127.0.0.1"])
def test_serve_refuses_to_start_without_tokens_even_on_loopback(ld: LoopDir,
                                                                host: str) -> None:
    """No configured token, no control plane: on loopback too (issue 11, rule 2)."""
    done = ld.cli("serve", "--host", host, "--port", "0", ok=False)
    assert done.returncode == 2
    assert "refusing to start: the control plane authenticates every caller" in done.stderr
    assert "serve.tokens" in done.stderr and "Traceback" not in done.stderr


# --------------------------------------------------------------------------- poll daemon

@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_poll_daemon_cycles_and_stops_cleanly_on_a_signal(ld: LoopDir,
                                                          sig: signal.Signals) -> None:
    """`poll --interval S` starts armed items each cycle and exits 0 on SIGTERM/Ctrl-C."""
    ref = ld.add()
    ld.start(ref)
    proc = ld.popen("poll", "--interval", "0.1")
    try:
        until(lambda: len(ld.events("poll.cycle")) >= 2, timeout=30, what="two poll cycles")
    finally:
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert out.startswith("polling every 0.1 s")
    # One line per thing it does (issue 15 item 7), read off the events it records.
    said = [line.split(" ", 1)[1] for line in out.splitlines()[1:]]
    first = ld.query("SELECT id FROM sessions ORDER BY started")[0]["id"]
    assert said[:2] == [f"{ref}: started", f"{ref}: session {first} launched"], said
    assert f"poller stopped ({sig.name})" in err
    assert ld.events("poll.stopped")[-1]["why"] == sig.name
    assert ld.work(ref)["state"] in ("running", "blocked")
    ld.wait_sessions()


def test_issue15_item7_poll_quiet_prints_only_its_start_line(ld: LoopDir) -> None:
    ref = ld.add()
    ld.start(ref)
    proc = ld.popen("poll", "--interval", "0.1", "--quiet")
    try:
        until(lambda: ld.events("session.launched"), timeout=30, what="a launch")
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _err = proc.communicate(timeout=30)
    assert out == "polling every 0.1 s (Ctrl-C to stop)\n", out
    ld.wait_sessions()


# --------------------------------------------------------------------------- events

def test_events_command_readable_filtered_and_json(ld: LoopDir) -> None:
    """`the-loop events`: a line per event; --event GLOB, --work-item REF, --json."""
    ld.write("hooks/nothing.py", """
        from the_loop.sdk.hooks import LifecycleHooks, WorkItemStart

        class Nothing(LifecycleHooks):
            def work_item_start(self, ctx: WorkItemStart) -> None:
                return None
    """)
    ld.write_config("hooks:\n  - {name: nothing, path: hooks/nothing.py}\n")
    one = ld.add("One")
    two = ld.add("Two")
    ld.start(one)
    ld.start(two)
    ld.poll()

    lines = ld.cli("events").stdout.splitlines()
    assert len(lines) == len(ld.events())
    start = next(x for x in lines if "point=work_item_start" in x)
    assert " lifecycle.point " in start and one in start
    assert 'hooks=["nothing"]' in start and '"proceed": true' in start

    # The filters in-process (the same command, fewer interpreters).
    hooks = ld.run("events", "--event", "hooks.*")[1].splitlines()
    assert len(hooks) == 1 and " hooks.loaded " in hooks[0]

    only_two = ld.run("events", "--work-item", "#2")[1].splitlines()
    assert only_two and all(two in x for x in only_two)
    assert len(only_two) == len([r for r in ld.events() if r.get("work_item") == two])

    as_json = [json.loads(x) for x in ld.run("events", "--json", "--event", "loop.*",
                                             "--work-item", one)[1].splitlines()]
    assert [(r["event"], r["work_item"]) for r in as_json] == [
        ("loop.armed", one), ("loop.started", one)]
    assert all({"ts", "source", "pid"} <= set(r) for r in as_json)


def test_events_names_only_the_filters_given_and_suggests_the_type_a_typo_meant(
        ld: LoopDir) -> None:
    """Nothing matched: the sentence names the filters as typed; an --event matching no
    event type at all is refused (exit 2) with the type it most likely meant."""
    ld.start(ld.add())
    log = ld.state / "events.jsonl"
    assert ld.run("events", "--event", "session.*") == (
        0, "", f"the-loop: none of the 1 event(s) in {log} match --event 'session.*'\n")
    assert ld.run("events", "--work-item", "9")[2] == (
        f"the-loop: none of the 1 event(s) in {log} match --work-item 9\n")
    assert ld.run("events", "--event", "loop.*", "--work-item", "9")[2] == (
        f"the-loop: none of the 1 event(s) in {log} match --event 'loop.*' and --work-item 9\n")
    code, out, err = ld.run("events", "--event", "hook.failed")
    assert (code, out) == (2, "")
    assert err.startswith("the-loop: --event 'hook.failed' matches no event type; did you "
                          "mean 'hooks.failed'? the types are channel.*, "), err


def test_events_follow_prints_new_events_as_they_come(ld: LoopDir) -> None:
    """`events --follow` keeps reading; Ctrl-C ends it with exit 130."""
    ref = ld.add()
    proc = ld.popen("events", "--follow", "--event", "loop.*")
    try:
        ld.start(ref)
        line = readline(proc)
        assert " loop.armed " in line and ref in line
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and "interrupted" in err


@pytest.mark.parametrize("length", ["-1", "abc", "99999999999", "9" * 5000, "²"])
def test_serve_answers_a_bad_content_length_at_once(ld: LoopDir, length: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A negative or non-numeric Content-Length is a 400, not a read until the timeout."""
    monkeypatch.setenv("LOOP_TOKEN", TOKEN)
    import socket
    import threading

    from the_loop.config import read_config
    from the_loop.runtime.control import ControlServer
    from the_loop.runtime.service import Loop

    loop = Loop(read_config(ld.config), strict_hooks=True, source="serve")
    server = ControlServer(loop, "127.0.0.1", 0, "LOOP_TOKEN")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with socket.create_connection(server.server_address[:2], timeout=10) as sock:
            sock.sendall(f"POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Length: {length}"
                         f"\r\nAuthorization: Bearer {TOKEN}\r\n\r\n".encode())
            head = sock.recv(200).decode()
        assert head.startswith(("HTTP/1.1 400 ", "HTTP/1.1 413 ")), head
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
        loop.close()


def test_issue11_rule7_serve_answers_a_100k_deep_body_with_an_error_and_keeps_serving(
        ld: LoopDir) -> None:
    """A body nested 100,000 deep is a 400 naming the problem, not a RecursionError; the
    next request is served."""
    ld.write_config("serve: {tokenEnv: LOOP_TOKEN}\n")
    proc = ld.popen("serve", "--port", "0", "--quiet", env={"LOOP_TOKEN": TOKEN})
    try:
        api = Client(readline(proc).split(" on ", 1)[1].strip())
        req = urllib.request.Request(api.url + "/webhook", data=b"[" * 100_000 + b"]" * 100_000,
                                     method="POST")
        req.add_header("Authorization", f"Bearer {TOKEN}")
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=30)
        assert err.value.code == 400
        assert json.loads(err.value.read()) == {"error": "body is not JSON: nested too deeply"}
        err.value.close()
        assert api.call("GET", "/health", token=None)[0] == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    assert "Traceback" not in stderr
