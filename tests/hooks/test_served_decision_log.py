"""A served policy as a service: its decision log, masking, and replay over the log.

Real `hooks serve` processes, real SQLite files (and PostgreSQL through `pg_dsn`), the log
read back through the one reader the loop's own log has (`runtime.decisionlog`), and
`policy replay --log` run as a user runs it.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import time
from pathlib import Path
from typing import Any

import pytest

from serving_helpers import SPAWN_RULES, Served, get, gunicorn, post
from the_loop.decisions.reads import read_points
from the_loop.hooks.policy.files import revision

TOKEN = "tok-3f9a61c2e8b04d7f"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
RULES = SPAWN_RULES + """\
  - name: strip-keys
    on: input_received
    when: "contains(text, 'sk-live-')"
    set:
      text: "[a key was removed]"
"""
NEW_RULE = """\
  - name: no-bots
    on: session_spawn
    when: "actor == 'bot'"
    set:
      proceed: false
      reason: bots may not launch sessions
"""


def spawn(labels: list[str], prompt: str = "p", actor: str = "ann", number: int = 1) -> Any:
    return {"jsonrpc": "2.0", "id": 1, "method": "session_spawn", "params": {
        "labels": labels, "prompt": prompt, "actor": actor,
        "work_item": {"ref": f"github:acme/app#{number}", "number": number}}}


def comment(text: str) -> Any:
    return {"jsonrpc": "2.0", "id": 2, "method": "input_received", "params": {
        "text": text, "work_item": {"ref": "github:acme/app#9", "number": 9}}}


def serve(tmp_path: Path, *extra: str, rules: str = RULES) -> Served:
    folder = tmp_path / "rules"
    folder.mkdir(exist_ok=True)
    (folder / "rules.yaml").write_text(rules, encoding="utf-8")
    return Served(["hooks", "serve", "--policy", "rules", "--port", "0", "--token-env", "TOK",
                   *extra], tmp_path, env={"TOK": TOKEN})


def test_every_served_call_is_one_record_the_loops_reader_reads(tmp_path: Path) -> None:
    served = serve(tmp_path, "--decision-log", "log.db")
    try:
        assert post(served.url, spawn(["frozen"]), AUTH)[1]["result"]["proceed"] is False
        assert post(served.url, spawn(["draft"], number=2), AUTH)[1]["result"] is None
        assert post(served.url, spawn([], number=3), AUTH)[1]["result"] is None
        post(served.url, {"jsonrpc": "2.0", "id": 4, "method": "nope"}, AUTH)  # no context
        health = get(served.url + "health")[1]
    finally:
        code, err = served.stop()
    assert code == 0
    log = tmp_path / "log.db"
    assert f"decision log: {log}" in err
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    rev = revision(tmp_path / "rules")
    assert health["revision"] == rev and health["decision_log"]["failed"] == 0
    points = list(read_points(log))
    assert [(p.point, p.work_item) for p in points] == [
        ("session_spawn", f"github:acme/app#{n}") for n in (1, 2, 3)]
    first, second, third = points
    assert first.decisions["proceed"] is False and first.refused_by == "policy"
    assert first.steps[0]["rules"] == ["frozen"] and first.steps[0]["kind"] == "policy"
    assert second.steps[0]["audit"] == ["watch-drafts"] and second.decisions["proceed"] is True
    assert third.context["actor"] == "ann" and third.context["labels"] == []
    with sqlite3.connect(log) as conn:
        records = [json.loads(r) for (r,) in conn.execute("SELECT record FROM decision_log")]
    assert {(r["caller"], r["revision"], r["served"]) for r in records} == {("TOK", rev, True)}
    assert all(r["ms"] > 0 for r in records)


def test_a_token_pasted_into_a_comment_is_in_no_record_metric_or_case_file(
    tmp_path: Path, run_cli: Any
) -> None:
    served = serve(tmp_path, "--decision-log", "log.db")
    try:
        answer = post(served.url, comment(f"here is the token {TOKEN}, please use it"), AUTH)
        assert answer[0] == 200
        post(served.url, spawn(["frozen"], prompt=f"use {TOKEN}"), AUTH)
        post(served.url, {"jsonrpc": "2.0", "id": 1, "method": TOKEN}, AUTH)  # as a method
        metrics = _get_text(served.url + "metrics", AUTH)
    finally:
        served.stop()
    assert TOKEN not in metrics
    raw = (tmp_path / "log.db").read_bytes() + b"".join(
        p.read_bytes() for p in tmp_path.glob("log.db-*"))
    assert TOKEN.encode() not in raw
    points = list(read_points(tmp_path / "log.db"))
    assert "[redacted]" in points[0].context["text"]
    assert "input_received.text (a secret)" in points[0].masked
    result = run_cli("policy", "replay", "--log", "log.db", "--policy", "rules",
                     "--write-cases", "rules")
    assert result.returncode == 0, result.stderr
    cases = list((tmp_path / "rules" / "tests").glob("replay-*.yaml"))
    assert cases and all(TOKEN not in c.read_text(encoding="utf-8") for c in cases)
    assert "[redacted]" in "".join(c.read_text(encoding="utf-8") for c in cases)


def test_masked_paths_are_not_kept_and_replay_names_what_it_could_not_see(
    tmp_path: Path, run_cli: Any
) -> None:
    rules = RULES + "mask:\n  - session_spawn.prompt\n"
    served = serve(tmp_path, "--decision-log", "log.db", "--mask", "*.work_item.url",
                   rules=rules)
    try:
        spawn_call = spawn(["frozen"], prompt="the customer's secret plan")
        spawn_call["params"]["work_item"]["url"] = "https://internal.example/acme/1"
        post(served.url, spawn_call, AUTH)
        post(served.url, comment("my key is sk-live-123456"), AUTH)
    finally:
        served.stop()
    raw = (tmp_path / "log.db").read_bytes() + b"".join(
        p.read_bytes() for p in tmp_path.glob("log.db-*"))
    for kept_out in (b"secret plan", b"internal.example", b"sk-live-123456"):
        assert kept_out not in raw
    launch, comment_point = read_points(tmp_path / "log.db")
    assert launch.context["prompt"] == "[masked]"
    assert sorted(launch.masked) == ["session_spawn.prompt", "session_spawn.work_item.url"]
    # the rule replaced the text: the original is masked, the redaction kept
    assert comment_point.context["text"] == "[masked]"
    assert comment_point.decisions["text"] == "[a key was removed]"
    assert comment_point.masked == ["input_received.text (replaced by policy rule strip-keys)"]
    result = run_cli("policy", "replay", "--log", "log.db", "--policy", "rules")
    assert result.returncode == 0, result.stderr
    assert ("masked in the log, not seen by the replay: session_spawn.prompt at 1 point(s)"
            in result.stdout)


def test_replay_of_the_same_folder_over_a_masked_decision_reports_no_change(
    tmp_path: Path, run_cli: Any
) -> None:
    rules = RULES + """\
  - name: preamble
    on: session_spawn
    set:
      prompt_prefix: "Follow the house rules. "
mask:
  - session_spawn.prompt
"""
    served = serve(tmp_path, "--decision-log", "log.db", rules=rules)
    try:
        post(served.url, spawn([], prompt="the customer's secret plan"), AUTH)
    finally:
        served.stop()
    [launch] = read_points(tmp_path / "log.db")
    assert launch.decisions["prompt"] == "[masked]"
    result = run_cli("policy", "replay", "--log", "log.db", "--policy", "rules", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    # the replay built "Follow the house rules. [masked]": the same rule on the same
    # (masked) prompt, not a change; the path is reported as not seen instead
    assert (report["replayed"], report["changed"]) == (1, 0), report["differences"]
    assert report["masked"] == {"session_spawn.prompt": 1}


def test_replay_over_a_served_log_reports_what_a_new_rule_changes_by_rule(
    tmp_path: Path, run_cli: Any
) -> None:
    served = serve(tmp_path, "--decision-log", "log.db")
    try:
        for number, actor in enumerate(("ann", "bot", "bot", "bob"), start=1):
            post(served.url, spawn([], actor=actor, number=number), AUTH)
    finally:
        served.stop()
    new = tmp_path / "new"
    new.mkdir()
    (new / "rules.yaml").write_text(RULES + NEW_RULE, encoding="utf-8")
    result = run_cli("policy", "replay", "--log", "log.db", "--policy", "new", "--json",
                     "--fail-on-change")
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert report["replayed"] == 4 and report["changed"] == 2
    # issue 30.19: the baseline is named, by the revision that answered each recorded point
    [(recorded_by, n)] = report["baseline"]["revisions"].items()
    assert (report["baseline"]["choice"], len(recorded_by), n) == ("recorded", 64, 4)
    effects = report["by_rule"]["no-bots"]["effects"]
    assert [e["summary"] for e in effects if "summary" in e] == [
        "no-bots (policy) would have refused 2 launches on 2 items"]
    same = run_cli("policy", "replay", "--log", "log.db", "--policy", "rules", "--point",
                   "session_spawn", "--since", "1h", "--fail-on-change")
    assert same.returncode == 0 and "4 recorded point(s)" in same.stdout


def test_a_log_that_cannot_be_opened_refuses_the_start_naming_it(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("x", encoding="utf-8")
    served = None
    try:
        served = serve(tmp_path, "--decision-log", str(tmp_path / "a-file" / "log.db"))
    except AssertionError as exc:
        assert "decision log" in str(exc) and "cannot open it" in str(exc)
        assert "--decision-log off" in str(exc)
    else:
        served.stop()
        raise AssertionError("the server started without its decision log")


def test_decision_log_off_writes_nothing(tmp_path: Path) -> None:
    served = serve(tmp_path, "--decision-log", "off")
    try:
        assert post(served.url, spawn(["frozen"]), AUTH)[0] == 200
        assert "decision_log" not in get(served.url + "health")[1]
    finally:
        _, err = served.stop()
    assert "decision log: off" in err
    assert not list(tmp_path.glob("*.db"))


def test_postgresql_log_records_every_call_and_replay_reads_the_url(
    tmp_path: Path, pg_dsn: str, run_cli: Any
) -> None:
    served = serve(tmp_path, "--decision-log", pg_dsn)
    try:
        for number in range(1, 6):
            post(served.url, spawn(["frozen"] if number % 2 else [], number=number), AUTH)
        post(served.url, comment(f"token {TOKEN}"), AUTH)
    finally:
        served.stop()  # a clean stop writes what is queued
    points = list(read_points(pg_dsn))
    assert [p.point for p in points] == ["session_spawn"] * 5 + ["input_received"]
    assert TOKEN not in json.dumps([p.context for p in points])
    result = run_cli("policy", "replay", "--log", pg_dsn, "--policy", "rules", "--point",
                     "session_spawn", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["replayed"] == 5


HOSTILE_REFS = ["github:a/b#1\x00", "tab\there", "line\nbreak\r", "back\\slash\\N",
                'quote"\\"\\n', "\\.", "é🙂"]


def _hostile(tmp_path: Path, target: str) -> list[Any]:
    """Calls whose item refs and prompts hold what COPY or SQL text must escape (a NUL,
    tabs, newlines, backslashes, `\\.`): every one is recorded, none costs its batch."""
    served = serve(tmp_path, "--decision-log", target)
    try:
        for number, ref in enumerate(HOSTILE_REFS, 1):
            call = spawn([], prompt=f"p{ref}", number=number)
            call["params"]["work_item"]["ref"] = ref
            assert post(served.url, call, AUTH)[0] == 200
        health = get(served.url + "health")[1]
    finally:
        served.stop()
    assert health["decision_log"]["failed"] == 0
    return list(read_points(target if target.startswith("postgresql") else Path(target)))


def test_a_server_starting_beside_another_hosts_open_write_to_the_log_does_not_wait(
        tmp_path: Path, pg_dsn: str) -> None:
    """With the log's table made, a second server (or a host's poller) starts while
    another process holds a write to it open: making the table again would wait for that
    write (an index's lock does), as every host of a busy organisation would at each start,
    and it hung every host once when the writer was its own process."""
    import threading

    import psycopg

    serve(tmp_path, "--decision-log", pg_dsn).stop()  # the table exists
    with psycopg.connect(pg_dsn) as other:  # another host, mid-write
        other.execute("INSERT INTO decision_log(at, point, work_item, record) "
                      "VALUES (0, 'session_spawn', 'x', '{}')")
        started: list[Served] = []
        opening = threading.Thread(
            target=lambda: started.append(serve(tmp_path, "--decision-log", pg_dsn)))
        opening.start()
        opening.join(30)
        waited = opening.is_alive()
        other.rollback()  # lets a waiting start go on, so the test ends either way
    opening.join(30)
    for served in started:
        served.stop()
    assert not waited, "hooks serve waited for another host's open write to its log"
    assert started


def test_refs_and_texts_a_store_must_escape_are_recorded_exactly_in_sqlite(
        tmp_path: Path) -> None:
    points = _hostile(tmp_path, str(tmp_path / "log.db"))
    assert [p.context["prompt"] for p in points] == [f"p{ref}" for ref in HOSTILE_REFS]
    assert [p.context["work_item"]["ref"] for p in points] == HOSTILE_REFS


def test_refs_and_texts_a_store_must_escape_are_recorded_exactly_in_postgresql(
        tmp_path: Path, pg_dsn: str) -> None:
    points = _hostile(tmp_path, pg_dsn)
    assert [p.context["prompt"] for p in points] == [f"p{ref}" for ref in HOSTILE_REFS]
    assert [p.context["work_item"]["ref"] for p in points] == HOSTILE_REFS
    assert points[0].work_item == "github:a/b#1\ufffd"  # the filter column: no NUL


def _get_text(url: str, headers: dict[str, str]) -> str:
    import urllib.request

    req = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(req, timeout=10) as resp:
        return str(resp.read().decode())


def test_the_default_log_is_named_at_start_in_the_working_directory(tmp_path: Path) -> None:
    served = serve(tmp_path)
    try:
        post(served.url, spawn([]), AUTH)
    finally:
        _, err = served.stop()
    assert f"decision log: {tmp_path / 'served-decisions.db'}" in err
    assert len(list(read_points(tmp_path / "served-decisions.db"))) == 1
    assert os.stat(tmp_path / "served-decisions.db").st_mode & 0o077 == 0


REMOTE_HOOK = """\
from the_loop.sdk.hooks import LifecycleHooks


class Stamp(LifecycleHooks):
    def session_spawn(self, ctx):
        ctx.prompt = "[stamped] " + ctx.prompt
        return ctx
"""


def test_a_declared_chain_records_every_hooks_step_and_masks_its_token_envs(
    tmp_path: Path
) -> None:
    remote_token = "remote-hook-token-5e2a"
    (tmp_path / "stamp.py").write_text(REMOTE_HOOK, encoding="utf-8")
    remote = Served(["hooks", "serve", "--path", "stamp.py", "--port", "0", "--token-env",
                     "REMOTE", "--decision-log", "off"], tmp_path, env={"REMOTE": remote_token})
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "rules.yaml").write_text(RULES, encoding="utf-8")
    (tmp_path / "cli-config.yaml").write_text(
        "loop: acme\nstateDir: state\nhooks:\n  - {name: house, policy: rules}\n"
        f"  - {{name: stamp, url: '{remote.url}', tokenEnv: REMOTE}}\n", encoding="utf-8")
    served = Served(["hooks", "serve", "--declared", "--port", "0", "--token-env", "TOK"],
                    tmp_path, env={"TOK": TOKEN, "REMOTE": remote_token,
                                   "THE_LOOP_CLI_CONFIG": str(tmp_path / "cli-config.yaml")})
    try:
        answer = post(served.url, spawn([], prompt=f"keys: {remote_token} {TOKEN}"), AUTH)
        assert answer[1]["result"]["prompt"].startswith("[stamped] keys: ")
        post(served.url, spawn(["frozen"], number=2), AUTH)
    finally:
        _, err = served.stop()
        remote.stop()
    log = tmp_path / "state" / "served-decisions.db"
    assert f"decision log: {log}" in err
    raw = log.read_bytes() + b"".join(p.read_bytes() for p in log.parent.glob("*.db-*"))
    assert remote_token.encode() not in raw and TOKEN.encode() not in raw
    stamped, frozen = read_points(log)
    assert [(s["hook"], s["kind"], s["status"]) for s in stamped.steps] == [
        ("house", "policy", "unchanged"), ("stamp", "remote", "changed")]
    assert stamped.decisions["prompt"] == "[stamped] keys: [redacted] [redacted]"
    # the remote hook's client replaced its own token in the answer, so the prompt it was
    # given counts as replaced: the original is masked, and the server's token redacted
    assert stamped.context["prompt"] == "[masked]"
    assert stamped.masked == ["session_spawn.prompt (replaced by stamp)",
                              "session_spawn (a secret)"]
    assert frozen.refused_by == "house" and frozen.steps[0]["rules"] == ["frozen"]


def _old_rows(target: str | Path, days_ago: list[float], *, prefix: str = "old",
              record: str = '{"v":2,"served":true}') -> None:
    """Rows written as a server writes them, `days_ago` each (before the server starts);
    with `record` '{"v":2}', as a loop writes its own."""
    from the_loop.decisions.stores import open_store

    store = open_store(str(target))
    store.prepare()
    now = time.time()
    store.write([(now - d * 86_400, "session_spawn", f"{prefix}#{i}", record, "", "", 0)
                 for i, d in enumerate(days_ago)])
    store.close()


def _refs(target: str | Path) -> list[str]:
    if str(target).startswith("postgresql"):
        import psycopg

        with psycopg.connect(str(target)) as conn:
            return [r for (r,) in conn.execute("SELECT work_item FROM decision_log ORDER BY id")]
    with sqlite3.connect(target) as conn:
        return [r for (r,) in conn.execute("SELECT work_item FROM decision_log ORDER BY id")]


def _prunes_past_keep(tmp_path: Path, target: str | Path) -> None:
    _old_rows(target, [40, 31, 29, 1])
    served = serve(tmp_path, "--decision-log", str(target), "--decision-log-keep-days", "30")
    try:
        post(served.url, spawn([], number=7), AUTH)
        deadline = time.monotonic() + 10
        while get(served.url + "health")[1]["decision_log"]["pruned"] < 2:
            assert time.monotonic() < deadline, "the server never pruned its log"
            time.sleep(0.05)
        health = get(served.url + "health")[1]
    finally:
        served.stop()
    assert health["decision_log"]["keep_days"] == 30
    assert _refs(target) == ["old#2", "old#3", "github:acme/app#7"]


def test_a_served_sqlite_log_deletes_records_past_their_keep_days(tmp_path: Path) -> None:
    _prunes_past_keep(tmp_path, tmp_path / "log.db")


def test_a_served_postgresql_log_deletes_records_past_their_keep_days(
        tmp_path: Path, pg_dsn: str) -> None:
    _prunes_past_keep(tmp_path, pg_dsn)


def test_keep_days_zero_keeps_every_record_and_a_bad_value_is_refused_by_name(
        tmp_path: Path, run_cli: Any) -> None:
    log = tmp_path / "log.db"
    _old_rows(log, [400, 40])
    served = serve(tmp_path, "--decision-log", "log.db", "--decision-log-keep-days", "0")
    try:
        post(served.url, spawn([], number=7), AUTH)
    finally:
        served.stop()
    assert _refs(log) == ["old#0", "old#1", "github:acme/app#7"]
    (tmp_path / "rules").mkdir(exist_ok=True)
    (tmp_path / "rules" / "rules.yaml").write_text(RULES, encoding="utf-8")
    for bad in ("-3", "30_0", "1e2", "nan", "0.01"):
        result = run_cli("hooks", "serve", "--policy", str(tmp_path / "rules"), "--port", "0",
                         "--decision-log-keep-days", bad, cwd=tmp_path)
        assert result.returncode != 0, bad
        assert "--decision-log-keep-days: expected a number of days" in result.stderr, bad
        assert "Traceback" not in result.stderr


def test_a_log_weeks_past_its_keep_time_is_pruned_in_slices_between_batches(
        tmp_path: Path, monkeypatch: Any) -> None:
    from the_loop.decisions import stores as logstore
    from the_loop.decisions import writer as logwriter

    monkeypatch.setattr(logstore, "PRUNE_SLICE", 100)
    monkeypatch.setattr(logwriter, "PRUNE_SLICE", 100)
    monkeypatch.setattr(logwriter, "LINGER", 0.01)
    log = tmp_path / "log.db"
    _old_rows(log, [60.0] * 450 + [1.0])
    store = logstore.open_store(str(log))
    store.prepare()
    slices: list[int] = []
    prune = store.prune
    monkeypatch.setattr(store, "prune", lambda before: slices.append(prune(before)) or slices[-1])
    writer = logwriter.LogWriter(store, str(log), keep_days=30)
    try:
        deadline = time.monotonic() + 10
        while writer.pruned < 450:
            assert time.monotonic() < deadline
            writer.put((time.time(), "session_spawn", "new", '{"v":2}', "", "", 0))  # goes on
            time.sleep(0.01)
        assert writer.flush()
    finally:
        writer.close()
    refs = _refs(log)
    assert refs[0] == "old#450" and set(refs[1:]) == {"new"} and writer.failed == 0
    assert slices[:5] == [100, 100, 100, 100, 50]  # a full slice: the next at the next look


def _long_ref_calls(tmp_path: Path, target: str) -> tuple[dict[str, Any], list[Any], str]:
    """Calls around one whose item ref is 6,000 characters no compressor shrinks: in
    PostgreSQL such a value cannot go into the item column's index."""
    import base64
    import random

    long_ref = "github:a/b#" + base64.b64encode(random.Random(23).randbytes(4500)).decode()
    served = serve(tmp_path, "--decision-log", target)
    try:
        for number in range(1, 7):
            call = spawn([], number=number)
            if number == 3:
                call["params"]["work_item"]["ref"] = long_ref
            assert post(served.url, call, AUTH)[0] == 200
        deadline = time.monotonic() + 10
        while True:  # until the writer has written or lost all six
            log = get(served.url + "health")[1]["decision_log"]
            if log["written"] + log["failed"] >= 6 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    finally:
        served.stop()
    points = list(read_points(target if target.startswith("postgresql") else Path(target)))
    return log, points, long_ref


def test_an_item_ref_too_long_to_index_costs_no_record_in_postgresql(
        tmp_path: Path, pg_dsn: str, run_cli: Any) -> None:
    log, points, long_ref = _long_ref_calls(tmp_path, pg_dsn)
    assert log["failed"] == 0 and log["error"] == ""
    refs = [p.context["work_item"]["ref"] for p in points]
    assert refs == [f"github:acme/app#{n}" for n in (1, 2)] + [long_ref] + [
        f"github:acme/app#{n}" for n in (4, 5, 6)]  # the record keeps the ref as received
    key = points[2].work_item  # the filter column: a bounded key naming the ref
    assert key.startswith(long_ref[:100]) and len(key) < 600 and key != long_ref
    assert [p.work_item for p in read_points(pg_dsn, work_item=long_ref)] == [key]


def test_an_item_ref_too_long_to_index_is_keyed_alike_in_sqlite(tmp_path: Path) -> None:
    log, points, long_ref = _long_ref_calls(tmp_path, str(tmp_path / "log.db"))
    assert log["failed"] == 0 and len(points) == 6
    assert points[2].context["work_item"]["ref"] == long_ref
    assert len(points[2].work_item) < 600
    assert [p.context["work_item"]["ref"]
            for p in read_points(tmp_path / "log.db", work_item=long_ref)] == [long_ref]


def test_a_log_writer_whose_stderr_broke_writes_again_after_a_database_blip(
        tmp_path: Path, pg_dsn: str) -> None:
    """stderr gone (a closed pipe: `| head` exited, journald restarted), then the database
    refuses a batch (its table away for a moment; a connection it ended while the writer
    waited no longer loses one: the batch goes on a new connection): the batch is lost and
    counted, and the next calls are written — the report nobody can read must not stop the
    writer for good."""
    import psycopg

    from serving_helpers import served_with_stderr_closed

    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "rules.yaml").write_text(RULES, encoding="utf-8")
    with served_with_stderr_closed(["--policy", "rules", "--port", "0", "--decision-log",
                                    pg_dsn], tmp_path) as (_proc, url):
        assert post(url, spawn([], number=1))[0] == 200
        _until(url, lambda log: log["written"] == 1)
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            admin.execute("ALTER TABLE decision_log RENAME TO decision_log_away")
            assert post(url, spawn([], number=2))[0] == 200  # its batch finds no table
            _until(url, lambda log: log["failed"] == 1)
            admin.execute("ALTER TABLE decision_log_away RENAME TO decision_log")
        for number in range(3, 6):
            assert post(url, spawn([], number=number))[0] == 200
        log = _until(url, lambda log: log["written"] == 4)
    assert log["error"] == "" and log["failed"] == 1
    assert [p.work_item for p in read_points(pg_dsn)] == [
        f"github:acme/app#{n}" for n in (1, 3, 4, 5)]


def _until(url: str, done: Any, timeout: float = 10.0) -> dict[str, Any]:
    """The decision log's /health fields once `done(fields)` holds (failing after `timeout`)."""
    deadline = time.monotonic() + timeout
    while True:
        log: dict[str, Any] = get(url + "health")[1]["decision_log"]
        if done(log):
            return log
        assert time.monotonic() < deadline, f"the decision log never got there: {log}"
        time.sleep(0.05)


def test_a_prune_with_nothing_old_reads_none_of_the_logs_rows(tmp_path: Path) -> None:
    """The hourly prune of a log whose records are all recent (the usual case) must not read
    the table: it runs on the writer's thread, and a scan of a log of millions of records
    holds every record queued meanwhile (lost past 10,000). Counted in SQLite's virtual
    machine steps, not in time: a scan of 20,000 rows takes some eighty thousand."""
    from the_loop.decisions.stores import SQLiteStore

    log = tmp_path / "log.db"
    _old_rows(log, [0.5] * 19_990 + [40.0] * 10)
    store = SQLiteStore(log)
    store.prepare()
    steps = [0]

    def step() -> int:
        steps[0] += 1
        return 0

    store._connect().set_progress_handler(step, 100)  # called every 100 steps
    try:
        assert store.prune(time.time() - 30 * 86_400) == 10
        assert store.prune(time.time() - 30 * 86_400) == 0
    finally:
        store.close()
    assert steps[0] < 10, f"the prunes took {steps[0] * 100} steps: they read the table"
    assert len(_refs(log)) == 19_990


def _rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))


def test_large_records_waiting_for_a_stalled_store_are_bounded_in_bytes(
        tmp_path: Path) -> None:
    """A caller sends 300 calls of 900 KB each while the log cannot be written (another
    process holds SQLite's write lock): the records waiting are bounded in bytes, not only
    in number (10,000 of them would be 9 GB), so the server's memory stays bounded; the
    records past the bound are lost and counted, and those kept are written once it can."""
    served = serve(tmp_path, "--decision-log", "log.db", "--quiet")
    blocker = sqlite3.connect(tmp_path / "log.db", isolation_level=None)
    try:
        post(served.url, spawn([], number=1), AUTH)
        _until(served.url, lambda log: log["written"] == 1)
        before = _rss_kb(served.proc.pid)
        blocker.execute("BEGIN IMMEDIATE")  # the writer's INSERT now waits (30 s at most)
        big = spawn([], prompt="x" * 900_000, number=2)
        for _ in range(300):
            assert post(served.url, big, AUTH)[0] == 200
        grown = _rss_kb(served.proc.pid) - before
        blocker.execute("ROLLBACK")
        log = _until(served.url, lambda log: log["written"] + log["failed"] == 301)
    finally:
        blocker.close()
        served.stop()
    assert grown < 200_000, f"the server grew by {grown} kB while its log was stalled"
    assert 100 <= log["failed"] <= 280
    assert log["error"] == ""  # writing again: the records kept went in
    assert len(list(read_points(tmp_path / "log.db"))) == log["written"]


@pytest.mark.parametrize("worker_class", ["sync", "gthread"])
def test_a_gunicorn_worker_that_stops_writes_the_records_it_queued_first(
        tmp_path: Path, worker_class: str) -> None:
    """The WSGI app has no shutdown call: a worker stopped by gunicorn (a SIGTERM, a
    --max-requests restart) must still write what its log queued in the last 50 ms."""
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "rules.yaml").write_text(RULES, encoding="utf-8")
    log = tmp_path / "log.db"
    env = {"THE_LOOP_HOOK_POLICY": str(tmp_path / "rules"),
           "THE_LOOP_HOOK_DECISION_LOG": str(log)}
    with gunicorn(env, tmp_path, worker_class=worker_class, workers=1) as url:
        for number in range(1, 21):
            assert post(url, spawn([], number=number))[0] == 200
    assert [p.work_item for p in read_points(log)] == [
        f"github:acme/app#{n}" for n in range(1, 21)]


def test_gunicorn_preload_workers_write_their_decision_log(tmp_path: Path) -> None:
    """With --preload the app (and its log's writer thread) is built in gunicorn's master
    and the workers are forked from it; a thread does not survive a fork, so each worker
    needs a writer of its own, on a connection of its own, or nothing it answers is
    recorded (and /health says all is well)."""
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "rules.yaml").write_text(RULES, encoding="utf-8")
    log = tmp_path / "log.db"
    env = {"THE_LOOP_HOOK_POLICY": str(tmp_path / "rules"),
           "THE_LOOP_HOOK_DECISION_LOG": str(log)}
    with gunicorn(env, tmp_path, workers=2, preload=True) as url:
        for number in range(1, 21):
            assert post(url, spawn([], number=number))[0] == 200
        written = _until(url, lambda log: log["written"] > 0)["written"]
    assert written <= 20  # this worker's own count, not the master's
    assert sorted(p.work_item for p in read_points(log)) == sorted(
        f"github:acme/app#{n}" for n in range(1, 21))


def test_a_postgresql_log_whose_database_is_not_utf8_refuses_the_start(
        tmp_path: Path, _pg_admin_dsn: str) -> None:
    """A LATIN1 database cannot hold an emoji a caller puts in a prompt: one such record
    would cost its whole batch, so such a log is refused at start, naming the fix."""
    import uuid

    import psycopg
    from psycopg import sql

    from conftest import _with_dbname

    name = f"the_loop_t_latin1_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(_pg_admin_dsn, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {} ENCODING 'LATIN1' TEMPLATE template0 "
                              "LC_COLLATE 'C' LC_CTYPE 'C'").format(sql.Identifier(name)))
    served = None
    try:
        served = serve(tmp_path, "--decision-log", _with_dbname(_pg_admin_dsn, name))
    except AssertionError as exc:
        assert "LATIN1" in str(exc) and "UTF8" in str(exc) and "Traceback" not in str(exc)
    else:
        served.stop()
        raise AssertionError("the server started on a log that loses any record holding "
                             "a character LATIN1 has not")
    finally:
        with psycopg.connect(_pg_admin_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE {}").format(sql.Identifier(name)))


def test_records_a_stalled_store_did_not_take_by_the_stop_are_counted_and_said(
        tmp_path: Path, capsys: Any) -> None:
    """A server stopping while its store is stalled (another process holds SQLite's write
    lock) waits a bounded time; the records still waiting then are lost, so they are
    counted and said on stderr, not dropped in silence with the process."""
    from the_loop.decisions import stores as logstore
    from the_loop.decisions import writer as logwriter

    log = tmp_path / "log.db"
    store = logstore.SQLiteStore(log)
    store.prepare()
    writer = logwriter.LogWriter(store, str(log))
    blocker = sqlite3.connect(log, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # the writer's INSERT waits for it
    try:
        for n in range(5):
            writer.put((time.time(), "session_spawn", f"first#{n}", '{"v":2}', "", "", 0))
        deadline = time.monotonic() + 10
        while writer._taken != 5:  # until the writer took them (and waits on the lock)
            assert time.monotonic() < deadline
            time.sleep(0.01)
        for n in range(3):
            writer.put((time.time(), "session_spawn", f"then#{n}", '{"v":2}', "", "", 0))
        writer.close(timeout=0.3)
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    err = capsys.readouterr().err
    assert "3 record(s) not written at stop" in err and "a batch of 5" in err
    assert writer.failed == 3
    writer._thread.join(10)  # the batch it held goes in once the lock is let go
    assert sorted(_refs(log)) == [f"first#{n}" for n in range(5)]


def test_a_served_prune_keeps_the_records_a_loop_wrote_in_the_same_log(
        tmp_path: Path, database: str) -> None:
    """A loop's shared database holds its own decision records in the table a hook server
    writes (docs/runtime.md: kept until the operator deletes them), and one reader serves
    both, so an operator points the server there too: its prune deletes served records
    only, never the loop's (in SQLite: a server pointed at a loop.db)."""
    target = database or str(tmp_path / "loop.db")
    _old_rows(target, [40, 35], prefix="loop", record='{"v":2,"context":{"text":'
              '"\\"served\\":true"}}')  # a loop's records, one quoting the mark
    _old_rows(target, [40, 35, 1])
    served = serve(tmp_path, "--decision-log", target, "--decision-log-keep-days", "30")
    try:
        post(served.url, spawn([], number=7), AUTH)
        _until(served.url, lambda log: log["pruned"] == 2 and log["written"] == 1)
    finally:
        served.stop()
    assert _refs(target) == ["loop#0", "loop#1", "old#2", "github:acme/app#7"]


def test_a_masked_work_item_field_is_kept_in_no_work_item_record_of_the_call(
        tmp_path: Path) -> None:
    """`--mask '*.work_item.url'`: at session_spawn the same item (or its pull request) is
    also the `endpoint` record, with the same url; the value must not survive there."""
    url = "https://tracker.example/secret-project/issues/12"
    served = serve(tmp_path, "--decision-log", "log.db", "--mask", "*.work_item.url")
    try:
        call = spawn([], number=12)
        call["params"]["work_item"]["url"] = url
        call["params"]["endpoint"] = {"ref": "github:acme/app#12", "number": 12, "url": url}
        assert post(served.url, call, AUTH)[0] == 200
    finally:
        served.stop()
    raw = (tmp_path / "log.db").read_bytes() + b"".join(
        p.read_bytes() for p in tmp_path.glob("log.db-*"))
    assert url.encode() not in raw
    (point,) = read_points(tmp_path / "log.db")
    assert point.context["work_item"]["url"] == point.context["endpoint"]["url"] == "[masked]"
    assert {"session_spawn.work_item.url", "session_spawn.endpoint.url"} <= set(point.masked)
    assert point.context["endpoint"]["ref"] == "github:acme/app#12"  # only the path named


def test_records_arriving_while_a_batch_is_written_wait_to_share_the_next_batch(
        tmp_path: Path) -> None:
    """A store whose write takes round trips (PostgreSQL: 1 ms here) must not be handed the
    two or three records that came during the previous write, one batch after another: at
    2,000 records a second, batches average in the tens (they averaged 2.5 before)."""
    from the_loop.decisions import stores as logstore
    from the_loop.decisions import writer as logwriter

    store = logstore.open_store(str(tmp_path / "log.db"))
    store.prepare()
    sizes: list[int] = []
    write = store.write

    def slow(rows: Any) -> None:
        sizes.append(len(rows))
        time.sleep(0.001)
        write(rows)

    store.write = slow  # type: ignore[method-assign]
    writer = logwriter.LogWriter(store, str(tmp_path / "log.db"))
    try:
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            writer.put((time.time(), "session_spawn", "r#1", '{"v":2}', "", "", 0))
            time.sleep(0.0005)
        assert writer.flush()
    finally:
        writer.close()
    assert writer.written == sum(sizes) and writer.failed == 0
    assert sum(sizes) / len(sizes) >= 20, sizes[:20]
