"""`the-loop state migrate | check`, the `database:` key and host ids as an operator meets them
(issue 24.1, 24.6): on both backends, through the CLI in-process."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from runtime_helpers import LoopDir
from the_loop.runtime.db import SCHEMA_VERSION


def test_state_migrate_then_check_reports_a_current_schema_and_live_hosts(
        tmp_path: Path, database: str) -> None:
    ld = LoopDir(tmp_path, database=database)
    out = ld.ok("state", "migrate")
    assert out.endswith(f"schema version 0 → {SCHEMA_VERSION}\n"), out
    assert ld.ok("state", "migrate").endswith("already current\n")
    code, out, err = ld.run("state", "check", "--json")
    assert code == 0, out + err
    found = {f["check"]: f for f in json.loads(out)}
    assert list(found) == ["connectivity", "schema", "clock", "hosts", "leases", "host-id",
                           "decisions"]
    assert all(f["ok"] for f in found.values())
    assert found["decisions"]["detail"] == "0 recorded point(s)"
    assert found["connectivity"]["detail"].startswith("postgresql" if database else "sqlite")


def test_state_check_names_a_claim_and_a_session_of_a_host_not_seen_lately(
        tmp_path: Path, database: str) -> None:
    ld = LoopDir(tmp_path, database=database)
    ld.write_config("lease: {expirySeconds: 4, heartbeatSeconds: 1}\n")
    ref = ld.add()
    ld.start(ref)
    ld.ok("state", "migrate")
    _write(ld, "INSERT INTO hosts(id, seen) VALUES ('gone-host', 1000)")
    _write(ld, "UPDATE work SET claim='gone-host/77/123#1', claim_until=1000 WHERE ref=?", ref)
    _write(ld, "INSERT INTO sessions(id, ref, endpoint, harness, pid, node, started, log, host) "
               "VALUES ('s-old', ?, ?, 'h', 77, 'write', 1000, 'l', 'gone-host')", ref, ref)
    code, out, _ = ld.run("state", "check")
    assert code == 1
    [line] = [x for x in out.splitlines() if x.startswith("PROBLEM")]
    assert "leases: held by hosts not seen within the lease (4 s)" in line
    assert f"{ref} claimed by gone-host, lapsed" in line
    assert f"{ref}: session s-old on gone-host (not seen for" in line


def test_state_check_on_a_newer_schema_says_to_upgrade(tmp_path: Path, database: str) -> None:
    ld = LoopDir(tmp_path, database=database)
    ld.ok("state", "migrate")
    _write(ld, "UPDATE schema_version SET version=?", SCHEMA_VERSION + 5)
    code, out, _ = ld.run("state", "check")
    assert code == 1
    assert (f"PROBLEM schema: version {SCHEMA_VERSION + 5} is newer than this the-loop knows "
            f"({SCHEMA_VERSION}): upgrade the-loop on this host") in out
    code, _, err = ld.run("items", "list")
    assert code == 1 and "upgrade the-loop on this host" in err and "Traceback" not in err


def test_a_database_url_with_a_password_is_refused_without_repeating_it(tmp_path: Path) -> None:
    ld = LoopDir(tmp_path, database="postgresql://loop:hunter2@db.internal/loop")
    code, out, err = ld.run("items", "list")
    assert code == 1 and out == ""
    assert err.strip().endswith("database: the PostgreSQL URL carries a password; remove it "
                                "and give the password to libpq through PGPASSWORD or "
                                "~/.pgpass (a password never sits in cli-config.yaml)")
    assert "hunter2" not in err


def test_an_unreachable_database_is_one_finding_not_a_traceback(tmp_path: Path) -> None:
    pytest.importorskip("psycopg")
    ld = LoopDir(tmp_path, database="postgresql://nobody@127.0.0.1:9/loop?connect_timeout=3")
    code, out, err = ld.run("state", "check")
    assert code == 1 and "Traceback" not in out + err
    assert out.startswith("PROBLEM connectivity: database: cannot reach PostgreSQL at "
                          "127.0.0.1/loop: "), out


def test_psycopg_without_psycopg_pool_names_the_missing_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("psycopg")
    monkeypatch.setitem(sys.modules, "psycopg_pool", None)  # importing it raises ImportError
    ld = LoopDir(tmp_path, database="postgresql://nobody@127.0.0.1:9/loop")
    code, out, err = ld.run("items", "list")
    assert code == 1 and "Traceback" not in out + err
    assert ("database: a postgresql:// database needs psycopg and psycopg_pool (psycopg_pool "
            "is not installed); pip install 'the-loop[postgresql]'") in err, err


@pytest.mark.parametrize("flag", [("--host-id", "two words"), ("--host-id", "-x")])
def test_poll_refuses_a_host_id_no_claim_can_carry(tmp_path: Path, flag: tuple[str, str]) -> None:
    ld = LoopDir(tmp_path)
    code, _, err = ld.run("poll", "--once", f"{flag[0]}={flag[1]}")
    assert code == 2
    assert "a host id is letters, digits, '.', '_', ':' and '-'" in err


def _write(ld: LoopDir, sql: str, *params: object) -> None:
    if ld.database:
        import psycopg

        with psycopg.connect(ld.database, autocommit=True) as conn:
            conn.execute(sql.replace("?", "%s"), params)  # type: ignore[arg-type]
        return
    with ld.db() as conn:
        conn.execute(sql, params)
