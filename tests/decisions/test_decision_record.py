"""The decision record as its package owns it (issue 32 and the record's items of 30 and 31):
old logs still read, masked values masked everywhere, hostile rows skipped, a full disk
named, a DSN's password refused and its parameters never shown, an ignored question not
stored as applied.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from serving_helpers import Served, get, post
from the_loop.decisions import reads
from the_loop.decisions.reads import read_points
from the_loop.decisions.stores import SQLiteStore
from the_loop.decisions.writer import LogWriter

DATA = Path(__file__).parent.parent / "data" / "decision-logs"
RULES = """\
rules:
  - name: no-secrets
    on: input_received
    when: "contains(text, 'secret')"
    set: {proceed: false, reason: "refused: {{ text }}"}
  - name: reversed-args
    on: input_received
    when: "regex_match(text, 'x')"
    set: {proceed: false}
"""


def _serve(tmp_path: Path, *extra: str, rules: str = RULES) -> Served:
    (tmp_path / "rules").mkdir(exist_ok=True)
    (tmp_path / "rules" / "rules.yaml").write_text(rules, encoding="utf-8")
    return Served(["hooks", "serve", "--policy", "rules", "--port", "0", *extra], tmp_path)


def _input(text: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": "input_received", "params": {
        "text": text, "work_item": {"ref": "github:acme/app#9", "number": 9}}}


# ------------------------------------------------------------------ logs of today's main

def test_logs_written_by_the_version_before_the_package_still_read(tmp_path: Path) -> None:
    for name in ("loop-main.db", "served-main.db"):
        shutil.copy(DATA / name, tmp_path / name)
    loop = list(read_points(tmp_path / "loop-main.db"))
    assert [p.point for p in loop][:3] == ["work_item_start", "work_item_start",
                                           "session_spawn"]
    assert loop[0].refused_by == "house-rules" and loop[0].decisions["proceed"] is False
    served = list(read_points(tmp_path / "served-main.db"))
    assert [p.point for p in served] == ["work_item_start", "work_item_start",
                                         "session_spawn", "input_received"]
    assert served[3].context["text"] == "[masked]"
    stats = reads.item_stats(tmp_path / "loop-main.db")  # no summary columns: from records
    assert stats["local:acme/app#1"].refusals == 1
    hits = reads.rule_hits(tmp_path / "loop-main.db", 0, time.time(), 4)
    assert hits[("house-rules", "frozen-items")]["enforce"] == 1


def test_a_served_log_of_the_earlier_layout_is_upgraded_when_a_server_opens_it(
        tmp_path: Path) -> None:
    log = tmp_path / "served.db"
    shutil.copy(DATA / "served-main.db", log)
    store = SQLiteStore(log)
    store.prepare()
    store.close()
    with sqlite3.connect(log) as conn:
        rows = conn.execute("SELECT point, rules, refused FROM decision_log ORDER BY id")
        assert [tuple(r) for r in rows] == [
            ("work_item_start", "policy\tfrozen-items\te", 1), ("work_item_start", "", 0),
            ("session_spawn", "policy\tprefix\te", 0),
            ("input_received", "policy\tno-keys\te", 0)]
    assert len(list(read_points(log))) == 4


def test_a_served_postgresql_log_of_the_earlier_layout_still_reads(pg_dsn: str) -> None:
    import psycopg

    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # the table that version made
        conn.execute("CREATE TABLE decision_log(id BIGSERIAL PRIMARY KEY, at DOUBLE PRECISION "
                     "NOT NULL, point TEXT NOT NULL, work_item TEXT NOT NULL, record TEXT "
                     "NOT NULL)")
        for line in (DATA / "served-pg-main.jsonl").read_text().splitlines():
            row = json.loads(line)
            conn.execute("INSERT INTO decision_log VALUES (%s, %s, %s, %s, %s)",
                         (row["id"], row["at"], row["point"], row["work_item"], row["record"]))
    before = list(read_points(pg_dsn))
    assert [p.point for p in before] == ["work_item_start", "work_item_start",
                                         "session_spawn", "input_received"]
    assert reads.rule_hits(pg_dsn, 0, time.time(), 4)[("policy", "frozen-items")][
        "enforce"] == 1
    from the_loop.decisions.stores import PostgresStore

    store = PostgresStore(pg_dsn)
    store.prepare()  # upgraded in place
    store.close()
    assert [p.id for p in read_points(pg_dsn)] == [p.id for p in before]
    assert reads.item_stats(pg_dsn)["github:acme/app#7"].refusals == 1


# ------------------------------------------------------------------ 31.8 masking everywhere

def test_a_masked_text_is_kept_out_of_reasons_errors_and_stderr(tmp_path: Path) -> None:
    served = _serve(tmp_path, "--decision-log", "log.db", "--mask", "input_received.text")
    try:
        post(served.url, _input("the secret plan of acme"))
        post(served.url, _input("a (broken pattern"))  # regex_match(text, …) fails on it
    finally:
        _, err = served.stop()
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("log.db*"))
    for kept_out in (b"secret plan of acme", b"(broken pattern"):
        assert kept_out not in raw
    assert "(broken pattern" not in err and "secret plan" not in err
    refused, failed = read_points(tmp_path / "log.db")
    assert refused.decisions["reason"] == "refused: [masked]"
    assert refused.steps[0]["changed"]["reason"] == "refused: [masked]"
    assert "[masked]" in failed.steps[0]["error"]


# ------------------------------------------------------------------ 31.10 hostile rows

@pytest.mark.parametrize("hostile", ["deep", "masked"])
def test_replay_skips_a_hostile_row_with_a_message(tmp_path: Path, hostile: str,
                                                   run_cli: Any) -> None:
    log = tmp_path / "log.db"
    shutil.copy(DATA / "served-main.db", log)
    with sqlite3.connect(log) as conn:
        [(good,)] = conn.execute("SELECT record FROM decision_log WHERE id = 3")
        if hostile == "deep":  # a 100,000-deep array
            record = '{"v":2,"context":' + "[" * 100_000 + "]" * 100_000 + "}"
        else:  # a readable record but for its `masked`
            record = json.dumps({**json.loads(good), "masked": [5]})
        conn.execute("INSERT INTO decision_log(at, point, work_item, record) VALUES "
                     "(?, 'session_spawn', 'github:acme/app#1', ?)", (time.time(), record))
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "r.yaml").write_text(RULES, encoding="utf-8")
    done = run_cli("policy", "replay", "--log", str(log), "--policy", "rules")
    assert done.returncode == 0, done.stderr
    assert "replayed 4 recorded point(s)" in done.stdout
    assert "skipped: " in done.stdout and "decision log row 5 cannot be read" in done.stdout


# ------------------------------------------------------------------ 31.15 a full disk

def test_a_full_disk_is_reported_as_such(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "log.db")
    store.prepare()
    conn = store._connect()
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count={pages}")  # no page more: SQLITE_FULL
    writer = LogWriter(store, str(tmp_path / "log.db"))
    try:
        writer.put((time.time(), "session_spawn", "r#1", "x" * 200_000, "", "", 0))
        assert writer.flush()
        assert "database or disk is full" in writer.error, writer.error
    finally:
        writer.close()


# ------------------------------------------------------------------ 31.4 DSN secrets

@pytest.mark.parametrize("url", ["postgresql://ann:hunter2-pw@127.0.0.1/db",
                                 "postgresql://ann@127.0.0.1/db?password=hunter2-pw"])
def test_a_password_in_the_decision_log_url_is_refused_and_never_echoed(
        tmp_path: Path, url: str, run_cli: Any) -> None:
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "r.yaml").write_text(RULES, encoding="utf-8")
    with pytest.raises(AssertionError) as info:
        Served(["hooks", "serve", "--policy", "rules", "--port", "0", "--decision-log", url],
               tmp_path)
    assert "carries a password" in str(info.value) and "PGPASSWORD" in str(info.value)
    assert "hunter2" not in str(info.value)
    done = run_cli("policy", "replay", "--log", url, "--policy", "rules")
    assert done.returncode != 0 and "carries a password" in done.stderr
    assert "hunter2" not in done.stdout + done.stderr


def test_health_and_replay_show_a_log_url_without_its_parameters(
        tmp_path: Path, pg_dsn: str, run_cli: Any) -> None:
    url = f"{pg_dsn}?application_name=private-name-7"
    served = _serve(tmp_path, "--decision-log", url)
    try:
        health = json.dumps(get(served.url + "health")[1])
    finally:
        _, err = served.stop()
    assert "private-name-7" not in health and "private-name-7" not in err
    assert pg_dsn.rsplit("/", 1)[1] in health  # the database's name is shown
    done = run_cli("policy", "replay", "--log", url, "--policy", "rules")
    assert "holds no recorded point yet" in done.stderr
    assert "private-name-7" not in done.stdout + done.stderr


# ------------------------------------------------------------------ 30.7 what was applied

def test_a_question_a_gate_ignored_is_not_stored_as_a_decision(tmp_path: Path) -> None:
    from the_loop.decisions.looplog import DecisionLog
    from the_loop.events import EventLog
    from the_loop.hooks.engine.chain import Chain, Link
    from the_loop.hooks.engine.points import WaitingForInput
    from the_loop.hooks.executors.policy import load_policy

    folder = tmp_path / "p"
    folder.mkdir()
    (folder / "r.yaml").write_text("rules:\n  - name: reword\n    on: waiting_for_input\n"
                                   "    set: {question: 'Reworded?'}\n", encoding="utf-8")
    policy = load_policy("p", folder)
    chain = Chain([Link("p", policy, frozenset(policy.points()))], log=EventLog())
    log = DecisionLog(tmp_path / "loop.db", keep_days=30, log=EventLog())
    for kind in ("gate", "question"):
        ctx = WaitingForInput(kind=kind, question="" if kind == "gate" else "Why?")
        log.record(ctx, chain.invoke(ctx), chain)
    gate, question = read_points(tmp_path / "loop.db")
    assert gate.decisions["question"] == ""  # the graph's request was posted, not this
    assert gate.steps[0]["changed"] == {"question": "Reworded?"}  # what the hook tried
    assert question.decisions["question"] == "Reworded?"


def test_opening_the_log_in_a_file_the_process_already_uses_keeps_that_files_wal(
        tmp_path: Path) -> None:
    """The loop's log lives in loop.db, which the loop's own connection holds open. Opening
    the log there must not drop that connection's locks on the file (closing any descriptor
    of a file drops every POSIX lock the process holds on it): another process that then
    closed its connection would take itself for the file's last user and delete the
    write-ahead log the loop goes on writing into, so what the loop commits after that is
    seen by no other process."""
    import subprocess
    import sys

    path = tmp_path / "loop.db"
    loop = sqlite3.connect(path, isolation_level=None)
    loop.execute("PRAGMA journal_mode=WAL")
    loop.execute("CREATE TABLE work(state TEXT)")
    loop.execute("INSERT INTO work VALUES ('waiting')")
    store = SQLiteStore(path)
    try:
        store.prepare()
        peek = ("import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
                "print(c.execute('SELECT state FROM work').fetchone()[0]); c.close()")
        subprocess.run([sys.executable, "-c", peek, str(path)], check=True, timeout=60,
                       capture_output=True)  # another process comes and goes
        loop.execute("UPDATE work SET state = 'running'")  # committed (autocommit)
        seen = subprocess.run([sys.executable, "-c", peek, str(path)], check=True,
                              timeout=60, capture_output=True, text=True).stdout.strip()
        assert seen == "running"
    finally:
        store.close()
        loop.close()


def test_a_served_batch_sqlite_refuses_is_lost_whole_and_the_next_batches_land(
        tmp_path: Path) -> None:
    """A row the table refuses (a NULL point) costs its whole batch, counted, and no
    transaction is left open behind it: the batches before and after it are written."""
    log = tmp_path / "log.db"
    store = SQLiteStore(log)
    store.prepare()
    writer = LogWriter(store, str(log))

    def row(number: int, point: Any = "session_spawn") -> Any:
        return (float(number), point, f"r#{number}", '{"v":2}', "", "", 0)

    try:
        for batch in ([row(1), row(2)], [row(3), row(4, None), row(5)], [row(6)]):
            for one in batch:
                writer.put(one)
            assert writer.flush()
    finally:
        writer.close()
    assert (writer.written, writer.failed, writer.error) == (3, 3, "")
    with sqlite3.connect(log) as conn:
        refs = [r for (r,) in conn.execute("SELECT work_item FROM decision_log ORDER BY id")]
    assert refs == ["r#1", "r#2", "r#6"]
