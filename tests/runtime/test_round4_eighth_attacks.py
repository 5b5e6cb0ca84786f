"""Round 4, eighth stop: an attack on the daemons waiting at their start for a database that
is away (`cli.loop.daemon` through `sqldb.retrying`), with real `the-loop poll` processes,
a real port on 127.0.0.1 that refuses connections, and real PostgreSQL.

- A SIGTERM while `poll` waits ends it as it ends the running daemon (one line, exit 0),
  not by a silent death by the signal; a Ctrl-C is an interrupted command (130). Its
  open files do not grow with its tries.
- A connection the server refuses for a mistake (a missing database, a role it does not
  know, no password, a bad option) or a `database:` that is not a URL is refused at once,
  naming it, not waited for as if the server were away; a host name that does not resolve
  is waited for (DNS at boot), then refused naming the host.
- `$THE_LOOP_DB_RETRY_SECONDS`: 0 is no waiting, said in one line; a value that is not a
  number of seconds is refused naming the variable.
- A start whose connection the server ends, tried again and again, gives each connection
  back: the ninth try still finds one (the pool holds 8).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from runtime_helpers import child_env, until


def _config(tmp_path: Path, database: str) -> Path:
    config = tmp_path / "cli-config.yaml"
    config.write_text(f"loop: acme\nstateDir: state\ndatabase: '{database}'\n", encoding="utf-8")
    return config


def _poll(config: Path, *args: str, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "the_loop", "--config", str(config), "poll", "--quiet", *args],
        env=child_env(**env), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


@contextmanager
def _refusing() -> Iterator[int]:
    """A port on 127.0.0.1, bound and not listening: every connection is refused."""
    sock = socket.socket()
    try:
        sock.bind(("127.0.0.1", 0))
        yield int(sock.getsockname()[1])
    finally:
        sock.close()


@pytest.mark.parametrize(("sig", "code", "said"), [
    (signal.SIGTERM, 0, "the-loop: poll: stopped (SIGTERM) while starting"),
    (signal.SIGINT, 130, "the-loop: interrupted"),
])
def test_a_daemon_waiting_for_its_database_at_start_stops_on_a_signal(
        tmp_path: Path, sig: signal.Signals, code: int, said: str) -> None:
    """`poll` waits (for up to 600 s here) for a database whose port refuses; its open files
    stay the same over its tries; a signal ends it then, long before the bound, in one line
    and with the code it has when it stops running (SIGTERM) or any command interrupted."""
    with _refusing() as port:
        proc = _poll(_config(tmp_path, f"postgresql://root@127.0.0.1:{port}/loop"),
                     THE_LOOP_DB_RETRY_SECONDS="600")
        try:
            assert proc.stderr is not None
            first = proc.stderr.readline()
            assert "poll: starting: the database is unreachable (" in first, first
            fds = []
            for _ in range(3):  # tries at 0.25, 0.75, 1.75 and 3.75 s
                fds.append(sorted(os.listdir(f"/proc/{proc.pid}/fd")))
                with pytest.raises(subprocess.TimeoutExpired):
                    proc.wait(timeout=1.5)
            proc.send_signal(sig)
            _, rest = proc.communicate(timeout=30)
        finally:
            proc.kill()
            proc.wait()
    assert fds[0] == fds[1] == fds[2], fds
    assert proc.returncode == code and rest.splitlines() == [said], (proc.returncode, rest)


@pytest.mark.parametrize(("part", "value", "named"), [
    ("path", "/the_loop_no_such_database", '"the_loop_no_such_database"'),
    ("netloc", "the_loop_no_such_role@", '"the_loop_no_such_role"'),
    ("netloc", "root@127.0.0.1:notaport", '"notaport"'),
    ("query", "sslmode=bogus", '"bogus"'),
    ("netloc", "root@[::1", "not a URL"),
])
def test_a_database_refusing_a_mistake_refuses_the_daemon_at_once(
        tmp_path: Path, pg_dsn: str, part: str, value: str, named: str) -> None:
    """What waiting does not mend (a database or role the server does not know, a bad port
    or option, not a URL) is said at once, naming it and what to check, instead of `the
    database is unreachable … retrying` and, past the bound, `run it again once the
    database is back`."""
    from urllib.parse import urlsplit

    parts = urlsplit(pg_dsn)._replace(**{part: value})
    database = f"{parts.scheme}://{parts.netloc}{parts.path}" + (
        f"?{parts.query}" if parts.query else "")
    proc = _poll(_config(tmp_path, database), "--once", THE_LOOP_DB_RETRY_SECONDS="600")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and len(err.splitlines()) == 1, err
    assert named in err and "retrying" not in err and "bug" not in err, err
    assert "check the URL" in err or "expected postgresql://" in err, err


def test_a_host_name_that_does_not_resolve_is_waited_for_then_refused_naming_it(
        tmp_path: Path) -> None:
    """DNS may come up after the loop at boot: the name is tried again to the bound, then
    refused in a sentence naming the host (not a traceback, not "a bug")."""
    proc = _poll(_config(tmp_path, "postgresql://root@no-such-host.invalid/loop"), "--once",
                 THE_LOOP_DB_RETRY_SECONDS="1")
    _, err = proc.communicate(timeout=60)
    said = err.splitlines()
    assert proc.returncode == 1 and len(said) == 2, err
    assert said[0].startswith("the-loop: poll: starting: the database is unreachable ("), err
    assert said[1].startswith("the-loop: poll: starting: the database is still unreachable "
                              "after 1 s ("), err
    assert "no-such-host.invalid" in said[1] and "bug" not in err, err


@pytest.mark.parametrize(("value", "said"), [
    ("0", "run it again once the database is back ($THE_LOOP_DB_RETRY_SECONDS is 0: no "
          "waiting)"),
    ("-5", "$THE_LOOP_DB_RETRY_SECONDS: expected the seconds to wait for the database (0 for "
           "not at all), got '-5'"),
    ("abc", "$THE_LOOP_DB_RETRY_SECONDS: expected the seconds to wait for the database (0 for "
            "not at all), got 'abc'"),
])
def test_the_retry_bound_zero_is_no_waiting_and_garbage_is_refused(
        tmp_path: Path, value: str, said: str) -> None:
    with _refusing() as port:
        proc = _poll(_config(tmp_path, f"postgresql://root@127.0.0.1:{port}/loop"), "--once",
                     THE_LOOP_DB_RETRY_SECONDS=value)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and len(err.splitlines()) == 1 and said in err, err


def test_a_start_the_server_ends_nine_times_still_gets_a_connection(
        pg_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The test holds the schema's version locked, so a start waits there, and ends that
    backend, nine times; then frees it: the tenth start opens the database. (Each start the
    server cut off kept its pooled connection: the ninth waited for one of the pool's 8,
    which never came.)"""
    import psycopg

    from runtime_helpers import pg_query
    from the_loop.runtime.db import open_database
    from the_loop.sqldb import transient

    monkeypatch.setenv("THE_LOOP_DB_RETRY_SECONDS", "2")  # the pool's wait for a connection
    open_database(pg_dsn).close()  # the schema made, the pool open
    waiting = ("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
               "AND wait_event_type = 'Lock'")
    holder = psycopg.connect(pg_dsn)
    try:
        holder.execute("LOCK TABLE schema_version IN ACCESS EXCLUSIVE MODE")
        for _ in range(9):
            def end() -> None:
                try:
                    [pid] = until(lambda: [r["pid"] for r in pg_query(pg_dsn, waiting)],
                                  timeout=30, what="the start waiting for the schema's version")
                    pg_query(pg_dsn, "SELECT pg_terminate_backend(?)", pid)
                except AssertionError:  # no start came to wait: it may not wait for ever
                    holder.rollback()

            ender = threading.Thread(target=end)
            ender.start()
            try:
                open_database(pg_dsn).close()
                ended: BaseException | None = None
            except Exception as exc:
                ended = exc
            ender.join(timeout=60)
            assert ended is not None and transient(ended.__cause__ or ended), repr(ended)
        holder.rollback()
        open_database(pg_dsn).close()
    finally:
        holder.close()
