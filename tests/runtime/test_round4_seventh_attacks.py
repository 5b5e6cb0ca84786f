"""Round 4, seventh stop: what a loaded CI run found in the sixth stop's attack on a stopped
host, through a real `the-loop poll` daemon on real PostgreSQL.

- A daemon whose first heartbeat's connection the server ends (a restart, an operator's
  `pg_terminate_backend`, or the idle-transaction limit ending the transaction of a process
  paused inside it) tries the beat again on a new connection and starts, instead of ending
  with "unexpected error ... This is a bug".
- The server ending a connection that sat idle inside a transaction (25P03) is the database
  being away for a moment (`sqldb.transient`): what the transaction wrote did not land, a
  new connection goes on, and a step that met it is not counted as failing.
- A command whose database goes mid-way says so in one line (not the statement, not "a
  bug"); a daemon started before its database answers, or whose start is cut off, waits
  for it and starts.
- From an attack on the above: a PostgreSQL visit commits before it waits for the host's
  launch lock; a daemon whose connections are all ended goes on and prints only its own
  sentences.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from runtime_helpers import until


def test_a_daemon_whose_first_heartbeat_connection_is_ended_retries_it_and_starts(
        tmp_path: Path, pg_dsn: str) -> None:
    """The test holds the host's row locked, so the daemon's first beat waits inside its
    transaction; its backend is ended there (twice). The daemon says the database is away,
    beats again on a new connection once the row is free, and walks its item."""
    import psycopg
    from test_hosts import walk

    from hosts_helpers import Host, all_done
    from runtime_helpers import pg_query

    a = Host(tmp_path, "host-a", pg_dsn, work=0.2, expiry=2.0)
    # (read on a connection of its own: a transaction sees one snapshot of the activity)
    waiting = ("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
               "AND wait_event_type = 'Lock'")
    holder = psycopg.connect(pg_dsn)
    try:
        [ref] = walk([a], 1)
        holder.execute("INSERT INTO hosts(id, seen, owner) VALUES ('host-a', 0, 'gone') "
                       "ON CONFLICT(id) DO NOTHING")
        holder.commit()
        holder.execute("SELECT * FROM hosts WHERE id = 'host-a' FOR UPDATE")
        a.start()
        ended = []
        def beating() -> list[int]:
            assert a.proc is not None and a.proc.poll() is None, (
                "the daemon ended: " + (a.dir / "poll-1.err").read_text()[-2000:])
            return [r["pid"] for r in pg_query(pg_dsn, waiting) if r["pid"] not in ended]

        for _ in range(2):
            [pid] = until(beating, timeout=60,
                          what="the daemon's first beat waiting for the host's row")
            ended.append(pid)
            pg_query(pg_dsn, "SELECT pg_terminate_backend(?)", pid)
        until(beating, timeout=60, what="the daemon beating again on a new connection")
        holder.rollback()  # the host's row is free
        until(lambda: a.events("poll.cycle"), timeout=60, what="the daemon's first cycle")
        assert a.proc is not None and a.proc.poll() is None
        until(lambda: all_done(pg_dsn, [ref]), timeout=60, what="the item walked")
    finally:
        holder.close()
        a.stop()
    said = (a.dir / "poll-1.err").read_text()
    assert "the host's first heartbeat: the database is unreachable" in said, said
    assert "unexpected error" not in said and "Traceback" not in said, said


def test_a_transaction_the_server_ended_as_idle_is_the_database_away_not_a_mistake(
        pg_dsn: str) -> None:
    import psycopg

    from the_loop.sqldb import transient

    with psycopg.connect(pg_dsn, options="-c idle_in_transaction_session_timeout=100") as conn:
        conn.execute("SELECT 1")  # a transaction open (psycopg's default), left idle
        time.sleep(0.5)
        try:
            conn.execute("SELECT 1")
        except psycopg.Error as exc:
            ended = exc
        else:
            raise AssertionError("the server kept a transaction idle past its limit")
    assert ended.sqlstate == "25P03" and transient(ended)
    assert not transient(psycopg.errors.SyntaxError("not away"))


def test_a_command_whose_database_went_away_mid_way_says_so_and_not_that_it_is_a_bug(
        pg_dsn: str) -> None:
    """The last guard (`cli.guard.failure`) given the error a real server gives when it ends
    a connection in the middle of a command: one sentence naming the database, not a bug."""
    import psycopg

    from the_loop.cli.guard import failure

    with psycopg.connect(pg_dsn, autocommit=True) as conn, psycopg.connect(pg_dsn) as victim:
        pid = victim.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
        conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        try:
            victim.execute("SELECT 1")
        except psycopg.Error as exc:
            code, line = failure(exc)
        else:
            raise AssertionError("the ended connection still answered")
    assert code == 1 and line.startswith("the-loop: the database went away while this ran")
    assert "bug" not in line and "run it again once the database is back" in line


def _waits_for(pid: int, lock: Path) -> bool:
    """Whether process `pid` waits for the lock on `lock`, which this test holds: it has the
    file open (a launch opens it only while it takes the lock, and keeps trying for
    launching.LAUNCH_LOCK_WAIT s)."""
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(fd) == os.path.realpath(lock):
                return True
        except OSError:
            continue
    return False


def test_a_host_waiting_for_its_launch_lock_holds_no_transaction_open(
        tmp_path: Path, pg_dsn: str) -> None:
    """Another process of the host holds the launch lock (it may hold it through a previous
    session's 5 s grace and its SIGTERM and SIGKILL waits: seconds). The daemon waiting for
    it must not keep its visit's transaction open meanwhile: the item's rows stay locked
    for that whole wait (an operator's command on the item is held up) and a server that
    ends transactions left idle (idle_in_transaction_session_timeout) ends it, redoing the
    visit each time."""
    import fcntl

    import psycopg
    from test_hosts import walk

    from hosts_helpers import Host, all_done

    a = Host(tmp_path, "host-a", pg_dsn, work=0.2, expiry=30.0)
    [ref] = walk([a], 1)
    lock = a.dir / "state" / "launch.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another process of this host, launching
        a.start()
        proc = a.proc
        assert proc is not None
        until(lambda: _waits_for(proc.pid, lock) or proc.poll() is not None, timeout=60,
              what="the daemon waiting for the host's launch lock")
        assert proc.poll() is None, a.errors()
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            idle = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND state LIKE 'idle in transaction%%'").fetchone()
            try:  # an operator's command on the item, meanwhile
                conn.execute("SELECT ref FROM work WHERE ref = %s FOR UPDATE NOWAIT", (ref,))
                held = ""
            except psycopg.errors.LockNotAvailable as exc:
                held = str(exc)
        assert idle == (0,) and not held, (idle, held)
        os.close(fd)  # the other process launched: the lock is free
        fd = -1
        until(lambda: all_done(pg_dsn, [ref]), timeout=60, what="the item walked")
    finally:
        if fd >= 0:
            os.close(fd)
        a.stop()
    assert "Traceback" not in a.errors(), a.errors()


def test_a_start_whose_query_is_ended_says_one_line_and_a_daemon_waits(
        tmp_path: Path, pg_dsn: str) -> None:
    """The server ends a process's connection while its start reads the schema's version
    (the test holds that table locked, so the read waits there). PostgreSQL's message then
    carries the statement and a caret on lines of their own: a one-shot command says one
    line, the database gone, and not the statement it was running; a daemon says one line
    that it waits for the database, and starts once the table is free."""
    import subprocess
    import sys

    import psycopg

    from hosts_helpers import Host
    from runtime_helpers import pg_query

    a = Host(tmp_path, "host-a", pg_dsn, expiry=2.0)
    a.cli("items", "add", "An item")  # the schema made
    waiting = ("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
               "AND wait_event_type = 'Lock'")
    holder = psycopg.connect(pg_dsn)
    try:
        holder.execute("LOCK TABLE schema_version IN ACCESS EXCLUSIVE MODE")
        one_shot = subprocess.Popen(
            [sys.executable, "-m", "the_loop", "--config", str(a.config), "items", "list"],
            env=a.env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        [pid] = until(lambda: [r["pid"] for r in pg_query(pg_dsn, waiting)], timeout=60,
                      what="the one-shot's start waiting for the schema's version")
        pg_query(pg_dsn, "SELECT pg_terminate_backend(?)", pid)
        _, err = one_shot.communicate(timeout=60)
        said = err.splitlines()
        assert one_shot.returncode == 1 and len(said) == 1 and said[0].startswith(
            "the-loop: the database went away while this ran"), said
        assert "schema_version" not in said[0] and "bug" not in said[0], said

        a.start()
        [pid] = until(lambda: [r["pid"] for r in pg_query(pg_dsn, waiting)], timeout=60,
                      what="the daemon's start waiting for the schema's version")
        pg_query(pg_dsn, "SELECT pg_terminate_backend(?)", pid)
        until(lambda: "retrying" in a.errors(), timeout=60, what="the daemon waiting")
        holder.rollback()  # the table is free
        until(lambda: a.events("poll.cycle"), timeout=60, what="the daemon's first cycle")
    finally:
        holder.close()
        a.stop()
    said = a.errors().splitlines()
    assert said[0].startswith("the-loop: poll: starting: the database is unreachable ("), said
    assert "schema_version" not in a.errors() and "bug" not in a.errors(), said


def test_a_daemon_whose_connections_the_server_ends_says_only_its_own_lines(
        tmp_path: Path, pg_dsn: str) -> None:
    """An operator ends every connection of a running daemon (pg_terminate_backend, as a
    restart does): it goes on polling, and what it says on stderr is its own sentences,
    no bare line of a library's (the connection pool's "discarding closed connection:
    <psycopg.Connection [BAD] at 0x...>", which logging's last resort printed)."""
    from hosts_helpers import Host
    from runtime_helpers import pg_query

    a = Host(tmp_path, "host-a", pg_dsn, expiry=2.0)
    a.cli("items", "add", "An item")
    others = ("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE "
              "datname = current_database() AND pid <> pg_backend_pid()")
    try:
        a.start()
        until(lambda: a.events("poll.cycle"), timeout=60, what="the daemon's first cycle")
        for _ in range(3):
            cycles = len(a.events("poll.cycle"))
            pg_query(pg_dsn, others)
            until(lambda n=cycles: len(a.events("poll.cycle")) > n + 2, timeout=60,  # type: ignore[misc]
                  what="the daemon polling again")
        assert a.proc is not None and a.proc.poll() is None, a.errors()
    finally:
        a.stop()
    lines = [line for line in a.errors().splitlines()
             if not line.startswith(("the-loop", "poller stopped"))]
    assert lines == [], a.errors()


def test_a_daemon_started_before_its_database_is_up_waits_for_it_and_starts(
        tmp_path: Path, pg_dsn: str) -> None:
    """`poll` started while nothing answers at its database's address (a machine booting
    the loop and PostgreSQL at once) says once that it is waiting, and starts when the
    server does. The address is a port on 127.0.0.1 that refuses connections until the
    daemon has said so, then forwards each to the real server's local socket."""
    import socket
    import threading
    from urllib.parse import urlsplit

    import psycopg
    from test_hosts import walk

    from hosts_helpers import Host, all_done

    with psycopg.connect(pg_dsn) as conn:
        where = conn.info.host  # the server's socket folder
        port = conn.info.port
        dbname = conn.info.dbname
    assert where.startswith("/"), "the suite's server is reached by its local socket"
    server = socket.socket()
    server.bind(("127.0.0.1", 0))  # bound, not listening yet: connections are refused
    address = server.getsockname()[1]
    stop = threading.Event()
    opened: list[socket.socket] = []

    def pipe(a: socket.socket, b: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := a.recv(65536):
                b.sendall(data)
        for s in (a, b):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def forward() -> None:
        # Refused until the daemon says it waits (however long a loaded machine takes to
        # start it), then forwarded.
        deadline = time.monotonic() + 60
        while "retrying" not in a.errors() and time.monotonic() < deadline and (
                not stop.is_set()):
            time.sleep(0.05)
        server.listen(16)
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                client, _ = server.accept()
            except (TimeoutError, OSError):
                continue
            upstream = socket.socket(socket.AF_UNIX)
            opened.extend((client, upstream))
            upstream.connect(f"{where}/.s.PGSQL.{port}")
            for there, back in ((client, upstream), (upstream, client)):
                threading.Thread(target=pipe, args=(there, back), daemon=True).start()

    user = urlsplit(pg_dsn).username or os.environ.get("USER", "root")
    a = Host(tmp_path, "host-a", f"postgresql://{user}@127.0.0.1:{address}/{dbname}")
    ref_host = Host(tmp_path, "arming", pg_dsn)  # arms the item through the real socket
    thread = threading.Thread(target=forward, daemon=True)
    try:
        [ref] = walk([ref_host], 1)
        thread.start()
        a.start()
        until(lambda: a.events("poll.cycle"), timeout=60, what="the daemon's first cycle")
        until(lambda: all_done(pg_dsn, [ref]), timeout=60, what="the item walked")
    finally:
        a.stop()
        stop.set()
        thread.join(timeout=5)
        for s in (*opened, server):
            s.close()
    said = (a.dir / "poll-1.err").read_text()
    assert "poll: starting: the database is unreachable" in said, said
    assert "unexpected error" not in said and "Traceback" not in said, said
