"""A served policy's audit findings are recorded: `hooks serve` writes one stderr line per
finding and, with `--events FILE` (or THE_LOOP_HOOK_EVENTS under a WSGI server), appends the
`hooks.audit` events to FILE, with the server's own token redacted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from werkzeug.test import Client

from any_loop_data import upstream_request
from serving_helpers import Served, post
from the_loop.errors import HooksConfigError
from the_loop.hooks.serving.wsgi import app_from_env

TOKEN = "s3rv3r-t0ken-value"
RULES = """\
rules:
  - name: no-drafts
    on: session_spawn
    mode: audit
    when: "contains(prompt, 'draft')"
    set:
      proceed: false
      reason: "drafts are not delivered: {{ prompt }}"
  - name: team-prefix
    on: session_spawn
    set:
      prompt_prefix: "[rules] "
"""
DRAFT = {"jsonrpc": "2.0", "method": "session_spawn", "id": 1,
         "params": {"prompt": f"a draft that quotes {TOKEN}"}}


@pytest.fixture
def rules(tmp_path: Path) -> Path:
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "rules.yaml").write_text(RULES, encoding="utf-8")
    return tmp_path / "rules"


def _audits(path: Path) -> list[dict[str, object]]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [r for r in map(json.loads, lines) if r["event"] == "hooks.audit"]


def test_hooks_serve_policy_records_audit_findings_in_the_events_file_and_on_stderr(
    tmp_path: Path, rules: Path
) -> None:
    served = Served(["hooks", "serve", "--policy", "rules", "--port", "0", "--token-env",
                     "HOOK_TOKEN", "--events", "served/events.jsonl"], tmp_path,
                    env={"HOOK_TOKEN": TOKEN})
    auth = {"Authorization": f"Bearer {TOKEN}"}
    try:
        status, body = post(served.url, DRAFT, auth)
        # The audit rule changes nothing: the caller gets only the enforce rule's prefix, and
        # no answer carries the server's token, even one the caller sent (issue 20, item 3).
        assert (status, body["result"]) == (
            200, {"prompt": "[rules] a draft that quotes [redacted]"})
        post(served.url, upstream_request("work_item_start"), auth)  # no rule there
    finally:
        code, err = served.stop()
    assert code == 0, err
    [found] = _audits(tmp_path / "served" / "events.jsonl")
    assert found["point"] == "session_spawn" and found["rules"] == ["no-drafts"]
    assert found["would"] == {"no-drafts": {
        "proceed": False, "reason": "drafts are not delivered: a draft that quotes [redacted]"}}
    assert found["source"] == "hooks-serve"
    assert TOKEN not in (tmp_path / "served" / "events.jsonl").read_text(encoding="utf-8")
    assert "audit at session_spawn (hook `policy`): no-drafts would set proceed, reason" in err
    assert TOKEN not in err


def test_hooks_serve_quiet_still_records_audit_findings_in_the_file(
    tmp_path: Path, rules: Path
) -> None:
    served = Served(["hooks", "serve", "--policy", "rules", "--port", "0", "--quiet",
                     "--events", "events.jsonl"], tmp_path)
    try:
        post(served.url, {**DRAFT, "params": {"prompt": "a draft"}})
    finally:
        code, err = served.stop()
    assert code == 0, err
    assert "audit" not in err
    assert [a["rules"] for a in _audits(tmp_path / "events.jsonl")] == [["no-drafts"]]


def test_hooks_serve_refuses_to_start_when_the_events_file_cannot_be_written(
    tmp_path: Path, rules: Path
) -> None:
    (tmp_path / "a-file").write_text("not a folder", encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "the_loop", "hooks", "serve", "--policy", "rules", "--port", "0",
         "--events", "a-file/events.jsonl"],
        capture_output=True, text=True, cwd=tmp_path, env=dict(os.environ), timeout=30,
        check=False)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith("the-loop: a-file/events.jsonl: cannot append events "
                                     "there (")
    assert "Traceback" not in result.stderr


def test_wsgi_app_records_audit_findings_where_the_loop_hook_events_says(
    tmp_path: Path, rules: Path
) -> None:
    events = tmp_path / "events.jsonl"
    app = app_from_env({"THE_LOOP_HOOK_POLICY": str(rules), "THE_LOOP_HOOK_EVENTS": str(events),
                        "THE_LOOP_HOOK_DECISION_LOG": "off"})
    response = Client(app).post("/", json={**DRAFT, "params": {"prompt": "a draft"}})
    assert response.status_code == 200
    assert [a["rules"] for a in _audits(events)] == [["no-drafts"]]


def test_wsgi_app_with_an_unwritable_events_file_names_the_variable(
    tmp_path: Path, rules: Path
) -> None:
    (tmp_path / "a-file").write_text("x", encoding="utf-8")
    with pytest.raises(HooksConfigError) as info:
        app_from_env({"THE_LOOP_HOOK_POLICY": str(rules),
                      "THE_LOOP_HOOK_EVENTS": str(tmp_path / "a-file" / "e.jsonl")})
    assert str(info.value).startswith("THE_LOOP_HOOK_EVENTS: ")
    assert "cannot append events there" in str(info.value)


def test_a_caller_cannot_forge_or_colour_a_server_log_line(tmp_path: Path, rules: Path) -> None:
    """The ref is the caller's: a newline or an escape sequence in it is shown escaped."""
    served = Served(["hooks", "serve", "--policy", "rules", "--port", "0"], tmp_path)
    forged = "acme/x#1\nthe-loop: session_spawn ok 0.01 ms\n\x1b[31mRED\x1b[0m"
    try:
        post(served.url, {**DRAFT, "params": {"prompt": "a draft", "work_item": {"ref": forged}}})
    finally:
        _, err = served.stop()
    assert "\x1b" not in err
    [audit] = [line for line in err.splitlines() if "audit at session_spawn" in line]
    assert audit.startswith('the-loop: "acme/x#1\\nthe-loop: session_spawn ok 0.01 ms\\n')
    # The one real per-call line, and no line the caller wrote.
    assert len([line for line in err.splitlines()
                if line.startswith("the-loop: session_spawn ok ")]) == 1
    assert not [line for line in err.splitlines() if line.startswith(("RED", "the-loop: sess"))
                and not line.startswith("the-loop: session_spawn ok ")]


def test_the_servers_token_never_reaches_its_stderr_nor_a_declared_chains_event_log(
    tmp_path: Path
) -> None:
    """--declared without --events records in the config's event log: the server's token is
    replaced there too, and in the per-call lines (a method or a key named after it)."""
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "rules.yaml").write_text(RULES, encoding="utf-8")
    (tmp_path / "cli-config.yaml").write_text(
        "loop: acme\nstateDir: state\nhooks:\n  - {name: house, policy: rules}\n",
        encoding="utf-8")
    served = Served(["hooks", "serve", "--declared", "--port", "0", "--token-env", "HOOK_TOKEN"],
                    tmp_path, env={"HOOK_TOKEN": TOKEN,
                                   "THE_LOOP_CLI_CONFIG": str(tmp_path / "cli-config.yaml")})
    auth = {"Authorization": f"Bearer {TOKEN}"}
    try:
        post(served.url, DRAFT, auth)
        post(served.url, {**DRAFT, "method": TOKEN}, auth)
        post(served.url, {**DRAFT, "params": {"prompt": "p", TOKEN: 1}}, auth)
    finally:
        _, err = served.stop()
    events = (tmp_path / "state" / "events.jsonl").read_text(encoding="utf-8")
    assert [a["rules"] for a in _audits(tmp_path / "state" / "events.jsonl")] == [["no-drafts"]]
    assert TOKEN not in events and "[redacted]" in events
    assert TOKEN not in err
    assert "the-loop: [redacted] error -32601" in err
    assert "(ignored: [redacted])" in err


def test_a_servers_log_keeps_nothing_in_memory(tmp_path: Path) -> None:
    """A long-running server must not grow with its callers: records go to the file only."""
    from the_loop.hooks.serving.hosted import served_log

    log = served_log(tmp_path / "events.jsonl")
    for _ in range(3):
        log.emit("hooks.audit", point="session_spawn", hook="p", rules=["r"], would={})
    assert log.memory == []
    assert len((tmp_path / "events.jsonl").read_text(encoding="utf-8").splitlines()) == 3


def test_a_log_that_cannot_be_written_never_changes_an_answer() -> None:
    """stderr gone (a closed pipe): each request still gets its own answer, a notification
    none; the log costs its line only."""
    from the_loop.hooks.serving.jsonrpc import CallRecord, handle_request
    from the_loop.sdk.hooks import LifecycleHooks, SessionSpawn

    class Prefix(LifecycleHooks):
        def session_spawn(self, ctx: SessionSpawn) -> SessionSpawn:
            ctx.prompt = "[p] " + ctx.prompt
            return ctx

    def broken(call: CallRecord) -> None:
        raise BrokenPipeError(32, "Broken pipe")

    call = {"jsonrpc": "2.0", "method": "session_spawn", "params": {"prompt": "x"}, "id": 7}
    answer = json.loads(handle_request(Prefix(), json.dumps(call).encode(), on_call=broken))
    assert answer == {"jsonrpc": "2.0", "result": {"prompt": "[p] x"}, "id": 7}
    note = {k: v for k, v in call.items() if k != "id"}
    assert handle_request(Prefix(), json.dumps(note).encode(), on_call=broken) == b""
    bad = json.loads(handle_request(Prefix(), b"{nope", on_call=broken))
    assert bad["error"]["code"] == -32700


def test_a_served_rule_failing_at_run_time_is_named_without_the_servers_paths(
    tmp_path: Path
) -> None:
    """The caller learns which rule of which file failed, by name; the server's own line
    says the same after the status, so its operator sees why the call failed."""
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "20-bots.yaml").write_text(
        "rules:\n  - name: bot-check\n    on: session_spawn\n"
        "    when: \"regex_match(actor, 'x')\"\n    set: {proceed: false}\n", encoding="utf-8")
    served = Served(["hooks", "serve", "--policy", "rules", "--port", "0"], tmp_path)
    try:
        _, body = post(served.url, {**DRAFT, "params": {"prompt": "p", "actor": "a("}})
    finally:
        _, err = served.stop()
    message = body["error"]["message"]
    assert message.startswith("hook policy failed at session_spawn: policy rule 'bot-check' "
                              "(20-bots.yaml) → when:")
    assert str(tmp_path) not in message
    [line] = [x for x in err.splitlines() if x.startswith("the-loop: session_spawn error")]
    assert line.split(" ms: ", 1)[1] == message
