"""The decision log's own rules (issue 16): retention, a failed write never stops the loop,
the config key is checked, hidden state in a hook shows up on replay, and a remote hook that
is called for real (--call-remote) can answer differently from its record.

Points are fired in-process through the runtime's own `Loop.fire` on a real SQLite file.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from runtime_helpers import LoopDir, on
from serving_helpers import free_port
from the_loop.config import read_config
from the_loop.decisions.looplog import DecisionLog
from the_loop.decisions.reads import read_points
from the_loop.errors import ConfigError, LoopError
from the_loop.events import EventLog
from the_loop.hooks.engine.chain import Chain
from the_loop.hooks.engine.points import SessionSpawn, WorkItemStart
from the_loop.runtime.service import Loop
from the_loop.runtime.settings import settings_of

NONCE_HOOK = """\
import uuid
from the_loop.sdk.hooks import LifecycleHooks


class Nonce(LifecycleHooks):
    def session_spawn(self, ctx):
        ctx.prompt = f"[{uuid.uuid4().hex[:8]}] " + ctx.prompt
        return ctx
"""

PREFIX = """\
rules:
  - name: preamble
    on: session_spawn
    set: {prompt_prefix: "Be careful. "}
"""


def fire_spawns(ld: LoopDir, n: int, **fields: Any) -> None:
    loop = Loop(read_config(ld.config), strict_hooks=True, source="test")
    try:
        for i in range(n):
            ref = ld.add(f"Item {i}")
            loop.fire(SessionSpawn(**loop.base(ref), prompt=f"Work on item {i}.", **fields))
    finally:
        loop.close()


def replay(ld: LoopDir, *args: str, config: Path | None = None) -> dict[str, Any]:
    cfg = config or ld.config
    code, out, err = ld.run("--config", str(cfg), "policy", "replay", "--json", *args)
    assert code == 0, err
    data: dict[str, Any] = json.loads(out)
    return data


def test_hidden_state_in_a_local_hook_shows_up_as_a_difference(ld: LoopDir) -> None:
    ld.write("hooks/nonce.py", NONCE_HOOK)
    ld.write_config("hooks:\n  - {name: nonce, path: hooks/nonce.py}\n")
    fire_spawns(ld, 3)
    data = replay(ld)
    assert (data["replayed"], data["changed"]) == (3, 3)
    change = data["differences"][0]["changes"][0]
    assert change["decision"] == "prompt"
    assert change["before_by"] == change["after_by"] == {"hook": "nonce", "rules": [],
                                                         "error": ""}
    assert data["by_rule"]["(hook nonce)"]["effects"][0]["summary"] == (
        "hook nonce would have set prompt on 3 launches on 3 items")


def test_call_remote_calls_the_hook_and_its_failure_is_a_difference(ld: LoopDir) -> None:
    """Recorded with a remote hook that answered; replayed against one that is down."""
    from the_loop.demo.hooks import Compliance
    from the_loop.hooks.serving.server import HookServer

    ld.write("policies/rules.yaml", PREFIX)
    server = HookServer(Compliance(), port=0)
    server.serve_in_thread()
    try:
        ld.write_config("hooks:\n  - {name: house, policy: policies}\n"
                        f"  - {{name: compliance, url: '{server.url}'}}\n")
        fire_spawns(ld, 2)
    finally:
        server.shutdown()
    down = ld.root / "down.yaml"
    down.write_text(ld.config.read_text().replace(server.url.rstrip("/"),
                                                  f"http://127.0.0.1:{free_port()}"))
    assert replay(ld, config=down)["changed"] == 0  # the recorded answers stand in
    data = replay(ld, "--call-remote", config=down)
    assert data["changed"] == 2 and data["stand_ins"]["called"] is True
    [change] = data["differences"][0]["changes"]
    assert change["after"] == "Be careful. Work on item 0."
    assert change["before"] == change["after"] + (
        "\n\n(compliance: keep customer data out of documents)")
    assert change["before_by"]["hook"] == "compliance"
    assert change["after_by"] == {"hook": "house", "rules": ["preamble"], "error": ""}
    assert data["by_rule"]["(hook compliance)"]["effects"][0]["summary"] == (
        "hook compliance would no longer set prompt on 2 launches on 2 items")


def test_rows_older_than_keep_days_are_pruned_on_the_next_write(ld: LoopDir) -> None:
    ld.write_config("decisionLog: {keepDays: 2}\n")
    fire_spawns(ld, 2)
    db = ld.state / "loop.db"
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE decision_log SET at = at - 3 * 86400 WHERE id = 1")
    fire_spawns(ld, 1)  # a new process: its first write prunes
    assert [p.id for p in read_points(db)] == [2, 3]


def test_pruning_waits_an_hour_between_two_runs_in_one_process(tmp_path: Path) -> None:
    conn = sqlite3.connect(str(tmp_path / "loop.db"), isolation_level=None)
    log = DecisionLog(conn, keep_days=1, log=EventLog())
    now = time.time()
    assert log.prune(now) == 0
    conn.execute("INSERT INTO decision_log(at, point, work_item, record) "
                 "VALUES (?, 'session_spawn', 'local:acme/app#1', '{}')", (now - 2 * 86400,))
    assert log.prune(now) == 1


def test_a_write_that_fails_is_recorded_and_the_loop_goes_on(tmp_path: Path) -> None:
    conn = sqlite3.connect(str(tmp_path / "loop.db"), isolation_level=None)
    events = EventLog()
    log = DecisionLog(conn, keep_days=30, log=events)
    conn.close()
    chain = Chain()
    ctx = WorkItemStart()
    log.record(ctx, chain.invoke(ctx), chain)
    [failed] = events.of("decisions.failed")
    assert failed["point"] == "work_item_start"
    assert "Cannot operate on a closed database" in failed["error"]


@pytest.mark.parametrize(("value", "message"), [
    ("{keepDays: 0}", "decisionLog.keepDays: expected a number of days above 0 (e.g. 30), "
                      "got 0 (int)"),
    ("{keepDays: '30'}", "decisionLog.keepDays: expected a number of days above 0"),
    ("{keep: 30}", "decisionLog.keep: unknown key (did you mean 'keepDays'?). Allowed keys: "
                   "keepDays"),
    ("30", "decisionLog: expected {keepDays: 30}, got 30 (int)"),
])
def test_decision_log_key_is_checked(ld: LoopDir, value: str, message: str) -> None:
    ld.write_config(f"decisionLog: {value}\n")
    with pytest.raises(ConfigError) as info:
        settings_of(read_config(ld.config))
    assert message in str(info.value)


def test_keep_days_defaults_to_30(ld: LoopDir) -> None:
    assert settings_of(read_config(ld.config)).decision_keep_days == 30.0


def test_replay_without_a_state_database_says_so(ld: LoopDir) -> None:
    code, _, err = ld.run("policy", "replay")
    assert code == 1
    assert f"no state database at {ld.state / 'loop.db'}" in err


def test_a_row_in_the_first_layout_still_reads(tmp_path: Path) -> None:
    """Version 1 rows kept every change and every final decision in full."""
    db = tmp_path / "loop.db"
    conn = sqlite3.connect(str(db), isolation_level=None)
    DecisionLog(conn, keep_days=30, log=EventLog()).prune()
    record = {"v": 1, "context": {"prompt": "hi", "proceed": True, "reason": ""},
              "steps": [{"hook": "p", "kind": "policy", "status": "changed",
                         "changed": {"prompt": "> hi"}, "rules": ["r"]}],
              "decisions": {"prompt": "> hi", "proceed": True, "reason": ""},
              "refused_by": ""}
    conn.execute("INSERT INTO decision_log(at, point, work_item, record) VALUES "
                 "(1, 'session_spawn', 'local:acme/app#1', ?)", (json.dumps(record),))
    conn.close()
    [point] = read_points(db)
    assert point.decisions == {"prompt": "> hi", "proceed": True, "reason": ""}
    assert point.steps[0]["changed"] == {"prompt": "> hi"}


def test_a_row_of_an_unknown_layout_is_refused_by_name(tmp_path: Path) -> None:
    db = tmp_path / "loop.db"
    conn = sqlite3.connect(str(db), isolation_level=None)
    DecisionLog(conn, keep_days=30, log=EventLog()).prune()
    conn.execute("INSERT INTO decision_log(at, point, work_item, record) VALUES "
                 "(1, 'session_spawn', 'local:acme/app#1', '{\"v\": 9}')")
    conn.close()
    with pytest.raises(LoopError) as info:
        list(read_points(db))
    assert str(info.value) == (f"{db}: decision log row 1 cannot be read (record version 9, "
                               "expected 3); it was not written by this version of the-loop")


def test_replay_names_each_row_it_cannot_use_and_replays_the_rest(ld: LoopDir) -> None:
    """A hostile or damaged row is skipped with one line naming it; nothing else is lost."""
    fire_spawns(ld, 2)
    with sqlite3.connect(ld.state / "loop.db") as conn:
        conn.execute("UPDATE decision_log SET record='[1, 2]' WHERE id=1")
        bad = json.loads(conn.execute("SELECT record FROM decision_log WHERE id=2")
                         .fetchone()[0])
        bad["context"]["prompt"] = 7
        conn.execute("INSERT INTO decision_log(at, point, work_item, record) "
                     "VALUES (?, 'session_spawn', 'local:acme/app#2', ?)",
                     (time.time(), json.dumps(bad)))
    data = replay(ld)
    assert (data["replayed"], data["changed"]) == (1, 0)
    db = ld.state / "loop.db"
    assert data["unreadable"] == [
        f"{db}: decision log row 1 cannot be read (AttributeError: 'list' object has no "
        "attribute 'get'); it was not written by this version of the-loop",
        "decision log row 3 (session_spawn, local:acme/app#2): its context cannot be "
        "rebuilt: session_spawn.prompt must be str (got 7 that is int)",
    ]
    code, out, err = ld.run("policy", "replay")
    assert code == 0 and "Traceback" not in err
    assert "skipped: decision log row 3 (session_spawn, local:acme/app#2)" in out


def test_keep_days_prunes_the_store_the_config_names(tmp_path: Path, database: str) -> None:
    """On PostgreSQL the shared table is pruned by keepDays too (issue 32.2), and only the
    loop's own rows: a hook server's rows in the same table keep their own keep time."""
    ld = LoopDir(tmp_path, database=database)
    ld.write_config("decisionLog: {keepDays: 2}\n")
    fire_spawns(ld, 2)
    target: Path | str = database or ld.state / "loop.db"
    served = json.dumps({"v": 2, "served": True, "context": {}, "steps": [], "decisions": {}},
                        separators=(",", ":"))  # as a hook server writes it
    if database:
        import psycopg

        with psycopg.connect(database, autocommit=True) as conn:
            conn.execute("UPDATE decision_log SET at = at - 3 * 86400 WHERE id = 1")
            conn.execute("INSERT INTO decision_log(at, point, work_item, record) VALUES "
                         "(1, 'session_spawn', 'x', %s)", (served,))
    else:
        with sqlite3.connect(ld.state / "loop.db") as conn:
            conn.execute("UPDATE decision_log SET at = at - 3 * 86400 WHERE id = 1")
            conn.execute("INSERT INTO decision_log(at, point, work_item, record) VALUES "
                         "(1, 'session_spawn', 'x', ?)", (served,))
    fire_spawns(ld, 1)  # a new process: its first write prunes
    from the_loop.decisions.reads import keys_between

    assert sorted(k[2] for k in keys_between(target, 0, time.time())) == [
        "local:acme/app#2", "local:acme/app#3", "x"]


def opened(loop: Loop) -> None:
    """The loop's decision log opened, as a process's first fired point opens it (which
    commits what that point's visit wrote so far: the table is made outside it)."""
    assert loop.decision_log is not None


def test_a_visits_point_is_logged_with_its_writes_and_kept_when_they_roll_back(
        tmp_path: Path, database: str) -> None:
    """A point fired inside a visit's batch is written in the visit's transaction (issue
    34), seen by no other reader before the batch commits, and kept when the batch rolls
    back, as the decision it records is."""
    from the_loop.decisions.reads import keys_between

    ld = LoopDir(tmp_path, database=database)
    target: Path | str = database or ld.state / "loop.db"
    ref = ld.add("Item 0")
    loop = Loop(read_config(ld.config), strict_hooks=True, source="test")
    try:
        opened(loop)
        with loop.db.batched():
            loop.store.arm(ref, actor="alice", source="command", cursors={})
            loop.fire(SessionSpawn(**loop.base(ref), prompt="Work on item 0."))
            assert loop.db.pending()  # the row went in the visit's transaction
            assert keys_between(target, 0, time.time() + 1) == set()
            with pytest.raises(ValueError), loop.db.transaction():
                raise ValueError("a later write of the visit failed")
        assert [k[1:] for k in keys_between(target, 0, time.time() + 1)] == [
            ("session_spawn", ref)]
        assert loop.work(ref) is None  # the visit's own write is rolled back
    finally:
        loop.close()


def test_a_visit_never_prunes_the_shared_log_while_it_holds_new_rows(
        tmp_path: Path, pg_dsn: str) -> None:
    """On PostgreSQL the log is pruned outside any visit (issue 34): a DELETE on the log's
    own connection while the visit's transaction holds new rows could queue behind another
    host's upgrade of the table, which waits for those rows. The prune that is due when a
    visit fires a point runs when the cycle ends, and deletes what keepDays says."""
    import psycopg

    from the_loop.runtime.poller import poll_once

    ld = LoopDir(tmp_path, database=pg_dsn)
    ld.write_config("decisionLog: {keepDays: 2}\n")
    fire_spawns(ld, 1)  # the table, and one row to age
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("UPDATE decision_log SET at = at - 3 * 86400")
    ref = ld.add("Item 1")
    loop = Loop(read_config(ld.config), strict_hooks=True, source="test")
    try:
        with loop.db.batched():  # (the item is not armed: the cycle launches nothing)
            loop.fire(SessionSpawn(**loop.base(ref), prompt="Work on item 1."))
            assert loop.db.pending()  # the row opened the visit's transaction
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                aged = conn.execute("SELECT COUNT(*) FROM decision_log WHERE at < %s",
                                    (time.time() - 86400,)).fetchone()
            assert aged == (1,)  # not pruned from inside the visit
        poll_once(loop)  # the cycle's end: outside any visit
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            left = conn.execute("SELECT work_item FROM decision_log ORDER BY id").fetchall()
        assert [r[0] for r in left] == [ref]  # the aged row went; the visit's stays
        assert not loop.procs  # no session was started
    finally:
        loop.close()


def test_a_log_row_that_fails_in_a_visit_ends_the_visit_and_loses_none_of_its_writes(
        tmp_path: Path, database: str) -> None:
    """A point's row goes in the visit's transaction (issue 34), so a row the database
    refuses rolls the visit's earlier writes back with it. The visit then ends with the
    database's error, as a crash would end it (its writes not half-made), and is redone; the
    redo commits what it wrote before its row goes in, so a row refused again is a lost
    record and the visit goes on; once a row lands, rows join the visit's transaction
    again. (A trigger refuses the rows.)"""
    ld = LoopDir(tmp_path, database=database)
    fire_spawns(ld, 1)  # the table
    if database:
        on(ld, "CREATE FUNCTION refuse_row() RETURNS trigger LANGUAGE plpgsql AS "
               "$$ BEGIN RAISE EXCEPTION 'the log is read-only today'; END $$")
        on(ld, "CREATE TRIGGER refuse BEFORE INSERT ON decision_log "
               "FOR EACH ROW EXECUTE FUNCTION refuse_row()")
    else:
        on(ld, "CREATE TRIGGER refuse BEFORE INSERT ON decision_log "
               "BEGIN SELECT RAISE(ABORT, 'the log is read-only today'); END")
    ref = ld.add("Item 1")
    loop = Loop(read_config(ld.config), strict_hooks=True, source="test")

    def actor() -> str | None:  # as another reader sees the item
        rows = on(ld, "SELECT actor FROM work WHERE ref = ?", ref)
        return str(rows[0][0]) if rows else None

    def fire() -> None:
        loop.fire(SessionSpawn(**loop.base(ref), prompt="Work on item 1."))

    try:
        opened(loop)
        with pytest.raises(Exception, match="the log is read-only today"), \
                loop.db.batched():
            loop.store.arm(ref, actor="alice", source="command", cursors={})
            fire()
        assert actor() is None  # the arm went with the row: the visit made nothing
        assert loop.log.of("decisions.failed") == []  # not lost: the redo fires it again
        with loop.db.batched():  # the redo: what it wrote is committed before its row ...
            loop.store.arm(ref, actor="alice", source="command", cursors={})
            fire()  # ... which is refused again: a lost record, and the visit goes on
            assert actor() == "alice"
        [failed] = loop.log.of("decisions.failed")
        assert "the log is read-only today" in failed["error"]
        on(ld, "DROP TRIGGER refuse ON decision_log" if database else "DROP TRIGGER refuse")
        with loop.db.batched():  # the next row still goes in after a commit, and lands ...
            loop.set_work(ref, actor="bob")
            fire()
            assert actor() == "bob"
        with loop.db.batched():  # ... so the one after joins the visit's transaction again
            loop.set_work(ref, actor="carol")
            fire()
            assert actor() == "bob"
        assert actor() == "carol"
    finally:
        loop.close()
    assert on(ld, "SELECT count(*) FROM decision_log WHERE work_item = ?", ref) == [(2,)]
