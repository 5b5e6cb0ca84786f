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
from the_loop.hooks.wsgi import app_from_env

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
        # The audit rule changes nothing: the caller gets only the enforce rule's prefix.
        assert (status, body["result"]) == (200, {"prompt": f"[rules] {DRAFT['params']['prompt']}"})
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
    app = app_from_env({"THE_LOOP_HOOK_POLICY": str(rules), "THE_LOOP_HOOK_EVENTS": str(events)})
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
