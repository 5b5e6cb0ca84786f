"""A served call is stored as the request's own bytes (record layout 3), read back through
the dialect reader; what a log must not keep never reaches it that way (issue 32, item 5).

Real `hooks serve` processes, real SQLite files and PostgreSQL (`pg_dsn`), requests sent as
the exact bytes a caller wrote, the logs read back by the readers replay and the console
use, and `policy replay --log` run as a user runs it.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from serving_helpers import FROZEN, WATCH_DRAFTS, Served
from the_loop.decisions import reads
from the_loop.decisions.encoding import context_json
from the_loop.decisions.layout import recorded
from the_loop.decisions.masking import Masker
from the_loop.decisions.served import ServedRecords
from the_loop.hooks.engine.dialect import read_params
from the_loop.hooks.serving.hosted import policy_executor
from the_loop.hooks.serving.jsonrpc import CallRecord, handle_request

TOKEN = "tok-5d1e93b7a2c6f048"
AUTH = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
OLD_LOGS = Path(__file__).parent.parent / "data" / "decision-logs"
RULES = FROZEN + """\
  - name: prefix
    on: session_spawn
    when: "contains(labels, 'frontend')"
    set:
      prompt_prefix: "[frontend] "
""" + WATCH_DRAFTS + """\
  - name: strip-keys
    on: input_received
    when: "contains(text, 'sk-live-')"
    set:
      text: "[a key was removed]"
"""


def _spawn(labels: list[str], number: int, **more: Any) -> bytes:
    """A session_spawn request as a caller of the other loop might write it: its own
    spacing, its name for a record's field (`provider`), a key this catalog does not know."""
    params = {"labels": labels, "prompt": "build the page", "actor": "ann",
              "instance": "their-loop-7", "shiny": [1, 2],
              "work_item": {"ref": f"github:acme/app#{number}", "number": number,
                            "provider": "github"}, **more}
    return json.dumps({"jsonrpc": "2.0", "method": "session_spawn", "params": params,
                       "id": number}, ensure_ascii=False).encode()


def _send(url: str, body: bytes) -> Any:
    req = urllib.request.Request(url, data=body, method="POST", headers=AUTH)
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def _serve(tmp_path: Path, log: str, *extra: str, token: str = TOKEN) -> Served:
    folder = tmp_path / "rules"
    folder.mkdir(exist_ok=True)
    (folder / "rules.yaml").write_text(RULES, encoding="utf-8")
    return Served(["hooks", "serve", "--policy", "rules", "--port", "0", "--token-env", "TOK",
                   "--decision-log", log, *extra], tmp_path, env={"TOK": token})


def _records(target: Path | str) -> list[str]:
    """Every record text the log holds, oldest first."""
    if isinstance(target, str):
        import psycopg

        with psycopg.connect(target) as conn:
            return [r[0] for r in conn.execute("SELECT record FROM decision_log ORDER BY id")]
    with sqlite3.connect(target) as conn:
        return [r for (r,) in conn.execute("SELECT record FROM decision_log ORDER BY id")]


def _stored_as_received(target: Path | str, bodies: list[bytes], run_cli: Any, log: str
                        ) -> None:
    texts = _records(target)
    assert len(texts) == len(bodies)
    for text, body in zip(texts, bodies, strict=True):
        assert text.endswith(',"request":' + body.decode() + "}")  # the bytes, as sent
        assert json.loads(text)["v"] == 3
    points = list(reads.read_points(target))
    for got, body in zip(points, bodies, strict=True):
        ctx, _ = read_params("session_spawn", json.loads(body)["params"])
        assert got.context == context_json(ctx)  # what the server read, read again
    first, second, third = points
    assert first.context["work_item"]["tracker"] == "github"  # their name, read as ours
    assert "shiny" not in first.context and first.refused_by == "policy"
    assert first.decisions["proceed"] is False and first.steps[0]["rules"] == ["frozen"]
    assert first.steps[0] == {"hook": "policy", "kind": "policy", "status": "changed",
                              "changed": {"proceed": False,
                                          "reason": "the repository is frozen"},
                              "rules": ["frozen"]}
    assert second.decisions["prompt"] == "[frontend] build the page"
    assert third.steps[0]["audit"] == ["watch-drafts"] and third.decisions["proceed"] is True
    assert reads.count_points(target) == 3
    hits = reads.rule_hits(target, 0.0, 4e9, 4)
    assert {rule: (h["enforce"], h["audit"]) for (_, rule), h in hits.items()} == {
        "frozen": (1, 0), "prefix": (1, 0), "watch-drafts": (0, 1)}
    result = run_cli("policy", "replay", "--log", log, "--policy", "rules", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["replayed"], report["changed"]) == (3, 0), report["differences"]


def _three_calls(url: str) -> list[bytes]:
    bodies = [_spawn(["frozen"], 1), _spawn(["frontend"], 2), _spawn(["draft"], 3)]
    answers = [_send(url, body) for body in bodies]
    assert answers[0]["result"]["proceed"] is False
    assert answers[1]["result"]["prompt"] == "[frontend] build the page"
    return bodies


def test_a_served_call_is_stored_as_its_own_bytes_and_read_back_as_the_server_read_it(
    tmp_path: Path, run_cli: Any
) -> None:
    served = _serve(tmp_path, "log.db")
    try:
        bodies = _three_calls(served.url)
    finally:
        code, err = served.stop()
    assert code == 0, err
    _stored_as_received(tmp_path / "log.db", bodies, run_cli, "log.db")


def test_a_served_postgresql_log_stores_each_call_as_its_own_bytes(
    tmp_path: Path, run_cli: Any, pg_dsn: str
) -> None:
    served = _serve(tmp_path, pg_dsn)
    try:
        bodies = _three_calls(served.url)
    finally:
        code, err = served.stop()
    assert code == 0, err
    _stored_as_received(pg_dsn, bodies, run_cli, pg_dsn)


def _raw_log(tmp_path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in tmp_path.glob("log.db*"))


@pytest.mark.parametrize("how", ["as it is", "\\u-escaped", "\\/-escaped", "in a batch"])
def test_a_secret_in_a_request_reaches_no_record_however_the_caller_wrote_it(
    tmp_path: Path, how: str
) -> None:
    """The token is in the prompt: raw, each character `\\uXXXX`-escaped (valid JSON that
    neither the token nor its JSON-escaped form occurs in), with `/` written `\\/`, or in
    one request of a batch; none of them may be stored as received."""
    secret = TOKEN.replace("-", "/", 1)  # a token may hold a slash
    served = _serve(tmp_path, "log.db", token=secret)
    auth = {**AUTH, "Authorization": f"Bearer {secret}"}
    prompt = {"as it is": secret, "\\u-escaped": "".join(f"\\u{ord(c):04x}" for c in secret),
              "\\/-escaped": secret.replace("/", "\\/"), "in a batch": secret}[how]
    body = (b'{"jsonrpc":"2.0","method":"session_spawn","id":1,"params":{"prompt":"use '
            + prompt.encode() + b'","labels":[],"work_item":{"ref":"github:a/b#1"}}}')
    if how == "in a batch":
        body = b"[" + body + b"," + _spawn([], 2) + b"]"
    try:
        req = urllib.request.Request(served.url, data=body, method="POST", headers=auth)
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.status == 200
    finally:
        code, err = served.stop()
    assert code == 0, err
    raw = _raw_log(tmp_path)
    assert secret.encode() not in raw and prompt.encode() not in raw
    first = next(reads.read_points(tmp_path / "log.db"))
    assert "[redacted]" in first.context["prompt"] and secret not in json.dumps(
        first.context, ensure_ascii=False)
    assert "session_spawn.prompt (a secret)" in first.masked


def test_a_masked_path_or_a_replaced_text_is_not_stored_as_received(tmp_path: Path) -> None:
    served = _serve(tmp_path, "log.db", "--mask", "session_spawn.actor")
    key = "sk-live-9c2f1e7d"
    comment = json.dumps({"jsonrpc": "2.0", "method": "input_received", "id": 5, "params": {
        "text": f"my key is {key}", "work_item": {"ref": "github:acme/app#9"}}}).encode()
    try:
        _send(served.url, _spawn(["frontend"], 1, actor="mallory-the-person"))
        assert _send(served.url, comment)["result"]["text"] == "[a key was removed]"
    finally:
        served.stop()
    raw = _raw_log(tmp_path)
    assert b"mallory-the-person" not in raw and key.encode() not in raw
    spawned, commented = reads.read_points(tmp_path / "log.db")
    assert spawned.context["actor"] == "[masked]" and spawned.context["labels"] == ["frontend"]
    assert commented.context["text"] == "[masked]"
    assert commented.decisions["text"] == "[a key was removed]"


def test_old_rows_and_new_rows_of_one_served_log_read_alike(tmp_path: Path, run_cli: Any
                                                          ) -> None:
    """A log written by the version before this layout gets new rows from today's server;
    replay, the rules page and the console's served-log list read both."""
    shutil.copy(OLD_LOGS / "served-main.db", tmp_path / "log.db")
    old = list(reads.read_points(tmp_path / "log.db"))
    served = _serve(tmp_path, "log.db")
    try:
        bodies = _three_calls(served.url)
    finally:
        served.stop()
    texts = _records(tmp_path / "log.db")
    assert [json.loads(t)["v"] for t in texts] == [2] * len(old) + [3] * 3
    assert sum('"request":' in t for t in texts) == 3
    points = list(reads.read_points(tmp_path / "log.db"))
    assert points[:len(old)] == old
    assert [p.work_item for p in points[len(old):]] == [
        json.loads(b)["params"]["work_item"]["ref"] for b in bodies]
    total, page = reads.recent(tmp_path / "log.db", offset=0, limit=100)
    assert total == len(old) + 3 and len(page) == total
    result = run_cli("policy", "replay", "--log", "log.db", "--policy", "rules", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["replayed"] == len(old) + 3


def _calls(executor: Any, bodies: list[bytes]) -> list[CallRecord]:
    heard: list[CallRecord] = []
    for body in bodies:
        handle_request(executor, body, on_call=heard.append)
    return heard


def test_a_call_stored_as_received_reads_back_as_the_record_built_from_it(tmp_path: Path
                                                                         ) -> None:
    """The same answered calls (a refusal, a change, an audit match, a failure of the
    wrong type) as both rows: read back, every field replay and the console use agrees."""
    folder = tmp_path / "rules"
    folder.mkdir()
    (folder / "rules.yaml").write_text(RULES, encoding="utf-8")
    executor = policy_executor(folder)
    records = ServedRecords(Masker())
    bodies = [_spawn(["frozen"], 1), _spawn(["frontend"], 2), _spawn(["draft"], 3),
              _spawn([], 4)]
    for call in _calls(executor, bodies):
        kept = records.row(1.0, call)
        built = records._built(1.0, call)  # as every call was stored before layout 3
        assert '"request":' in kept[3] and '"request":' not in built[3]
        assert kept[:3] == built[:3] and kept[4:] == built[4:]  # columns beside the record
        assert recorded((7, *kept[:4])) == recorded((7, *built[:4]))


EDITS = """\
rules:
  - name: suffix
    on: input_received
    when: "contains(text, 'thanks')"
    set:
      text_suffix: " (checked)"
  - name: wrap
    on: input_received
    when: "contains(text, 'wrapped')"
    set:
      text: "note: {{ text }} (end)"
  - name: redact
    on: input_received
    when: "contains(text, 'sk-live-')"
    set:
      text: "my key is [removed]"
"""


def _comment(text: str, number: int) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "method": "input_received", "id": number, "params": {
        "text": text, "work_item": {"ref": f"github:acme/app#{number}"}}}).encode()


def test_a_text_a_rule_only_added_to_is_stored_as_sent_and_one_it_replaced_is_masked(
        tmp_path: Path) -> None:
    """A suffix, or the original kept inside a new text, leaves nothing to mask: the call is
    stored as its own bytes. A text replaced by one that starts alike but drops the rest
    (here the key after "my key is") is masked: the key reaches no byte of the log."""
    folder = tmp_path / "rules"
    folder.mkdir()
    (folder / "rules.yaml").write_text(EDITS, encoding="utf-8")
    served = Served(["hooks", "serve", "--policy", "rules", "--port", "0", "--token-env", "TOK",
                     "--decision-log", "log.db"], tmp_path, env={"TOK": TOKEN})
    key = "sk-live-77d01f3a9e"
    bodies = [_comment("thanks, looks good", 1), _comment("wrapped text", 2),
              _comment(f"my key is {key}", 3)]
    try:
        answers = [_send(served.url, body)["result"]["text"] for body in bodies]
    finally:
        served.stop()
    assert answers == ["thanks, looks good (checked)", "note: wrapped text (end)",
                       "my key is [removed]"]
    suffixed, wrapped, redacted = _records(tmp_path / "log.db")
    assert suffixed.endswith(',"request":' + bodies[0].decode() + "}")
    assert wrapped.endswith(',"request":' + bodies[1].decode() + "}")
    assert '"request":' not in redacted and key.encode() not in _raw_log(tmp_path)
    points = list(reads.read_points(tmp_path / "log.db"))
    assert [p.context["text"] for p in points] == ["thanks, looks good", "wrapped text",
                                                  "[masked]"]
    assert [p.decisions["text"] for p in points] == answers


def test_a_postgresql_log_whose_columns_an_operator_retyped_is_still_written(
        tmp_path: Path, pg_dsn: str, run_cli: Any) -> None:
    """The server sends its rows to a table of this version's types as binary COPY; a table
    whose columns have other types (here the time as numeric, as an operator's own
    migration might leave it) gets them as text, which PostgreSQL parses into its types:
    every call is still recorded and replayed."""
    import psycopg

    from the_loop.decisions.layout import TABLE
    from the_loop.sqldb import POSTGRESQL

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for statement in POSTGRESQL.ddl(TABLE).split(";"):
            if statement.strip():
                conn.execute(statement)
        conn.execute("ALTER TABLE decision_log ALTER COLUMN at TYPE numeric")
    for log, retyped in ((pg_dsn, True), (str(tmp_path / "plain.db"), False)):
        served = _serve(tmp_path, log)
        try:
            bodies = _three_calls(served.url)
        finally:
            served.stop()
        points = list(reads.read_points(log))
        assert [p.work_item for p in points] == [
            json.loads(b)["params"]["work_item"]["ref"] for b in bodies], retyped
        assert points[1].decisions["prompt"] == "[frontend] build the page"
    result = run_cli("policy", "replay", "--log", pg_dsn, "--policy", "rules", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["replayed"] == 3


@pytest.mark.parametrize(("retype", "stored"), [
    ("ALTER COLUMN at TYPE bigint USING at::bigint", 1),
    ("ALTER COLUMN at TYPE timestamptz USING to_timestamp(at)", 1),
    ("ALTER COLUMN refused TYPE integer", 3),
])
def test_a_column_an_operator_retypes_while_the_server_runs_gets_no_stale_binary_row(
        tmp_path: Path, pg_dsn: str, retype: str, stored: int) -> None:
    """An operator's migration retypes a column while the server writes its log. A batch
    after it must not go as binary COPY of the types read at start: eight bytes of a
    double sent to a bigint or timestamptz column are taken as that type's own bytes (a
    time of year 152373 stored and counted as written: no error, never pruned), and a
    bigint's eight bytes sent to an integer column refused the whole batch. A column whose
    new type holds what the server sends (an integer) takes every later call; one whose
    type cannot (a time as bigint) refuses them, counted and said, never stored wrong."""
    import time as clock

    import psycopg

    from runtime_helpers import until

    served = _serve(tmp_path, pg_dsn)

    def log_state() -> dict[str, Any]:
        return _log_state(served.url)

    try:
        _send(served.url, _spawn(["frozen"], 1))
        until(lambda: log_state()["written"] == 1, what="the first record written")
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f"ALTER TABLE decision_log {retype}")
        for number in (2, 3):
            _send(served.url, _spawn(["frontend"], number))
        state = until(lambda: (lambda s: s if s["written"] + s["failed"] == 3 else None)(
            log_state()), what="every record written or counted lost")
    finally:
        code, err = served.stop()
    assert code == 0, err
    assert (state["written"], state["failed"]) == (stored, 3 - stored), state
    assert ("cannot write" in err) is (stored < 3), err
    with psycopg.connect(pg_dsn) as conn:
        times = [float(t) for (t,) in conn.execute(
            "SELECT CASE WHEN pg_typeof(at)::text = 'timestamp with time zone' "
            "THEN extract(epoch FROM at::text::timestamptz) ELSE at::text::numeric END "
            "FROM decision_log ORDER BY id")]
    assert len(times) == stored and all(abs(t - clock.time()) < 3600 for t in times), times


def _log_state(url: str) -> dict[str, Any]:
    """The served log's state as `/health` gives it (written, failed, error)."""
    health = url.rsplit("/", 1)[0] + "/health"
    with urllib.request.urlopen(urllib.request.Request(health, headers=AUTH),
                                timeout=10) as resp:
        return dict(json.loads(resp.read())["decision_log"])


def test_a_served_log_whose_idle_connection_the_server_ended_loses_no_record(
        tmp_path: Path, pg_dsn: str) -> None:
    """The server ends the writer's connection while it waits between batches (a restart,
    an operator's pg_terminate_backend): nothing of the next batch had gone, so it goes on
    a new connection instead of being lost and said as a batch the database refused."""
    import psycopg

    from runtime_helpers import until

    served = _serve(tmp_path, pg_dsn)

    def log_state() -> dict[str, Any]:
        return _log_state(served.url)

    try:
        for round_ in range(3):
            _send(served.url, _spawn(["frontend"], round_ + 1))
            until(lambda n=round_ + 1: log_state()["written"] == n,  # type: ignore[misc]
                  what="the record written")
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
                             "datname = current_database() AND pid <> pg_backend_pid()")
        _send(served.url, _spawn(["frozen"], 9))
        until(lambda: log_state()["written"] + log_state()["failed"] == 4,
              what="the last record written or lost")
        state = log_state()
    finally:
        code, err = served.stop()
    assert code == 0, err
    assert (state["written"], state["failed"]) == (4, 0), (state, err)
    assert "cannot write" not in err, err
    assert len(_records(pg_dsn)) == 4
