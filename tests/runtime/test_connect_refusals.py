"""Round 4, eighth stop, second attack: what a daemon's start (`poll`, through
`sqldb.retrying`) makes of libpq's refusals, which carry no SQLSTATE, only words.

- A URL that requires what the server does not give (TLS), a port where something other than
  PostgreSQL answers, an `options` setting the server does not know: each is refused at once,
  naming it, not waited for to the bound as if the server were away.
- A socket folder whose name holds a mistake's words ("does not exist", "permission
  denied") is the operator's name, not libpq's reason: a server away there is waited for.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

import pytest
from test_round4_eighth_attacks import _config, _poll


@contextmanager
def _answering(reply: bytes) -> Iterator[int]:
    """A port on 127.0.0.1 where each connection gets `reply` to its first bytes, then is
    closed: b"N" is a PostgreSQL-like server refusing TLS, b"HTTP/1.1 ..." a web server."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    sock.settimeout(0.2)
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(5)
                try:
                    conn.recv(8)
                    conn.sendall(reply)
                except OSError:
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield int(sock.getsockname()[1])
    finally:
        done.set()
        thread.join(5)
        sock.close()


def _once(config: Path, bound: str) -> tuple[int, str]:
    """`poll --once` on `config`, waiting up to `bound` s for its database: (code, stderr)."""
    proc = _poll(config, "--once", THE_LOOP_DB_RETRY_SECONDS=bound)
    try:
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.wait()
    return proc.returncode, err


@pytest.mark.parametrize(("reply", "query", "named"), [
    (b"N", "?sslmode=require", "server does not support SSL, but SSL was required"),
    (b"HTTP/1.1 400 Bad Request\r\n\r\n", "", "received invalid response to SSL negotiation"),
    (b"HTTP/1.1 400 Bad Request\r\n\r\n", "?sslmode=disable",
     "expected authentication request from server"),
])
def test_a_url_the_server_cannot_serve_is_refused_at_once(
        tmp_path: Path, reply: bytes, query: str, named: str) -> None:
    """TLS required of a server without it, a web server's port: waiting mends neither."""
    with _answering(reply) as port:
        code, err = _once(_config(tmp_path, f"postgresql://root@127.0.0.1:{port}/loop{query}"),
                          "600")
    assert code == 1 and len(err.splitlines()) == 1, err
    assert named in err and "retrying" not in err and "check the URL" in err, err


def test_an_options_setting_the_server_does_not_know_is_refused_at_once(
        tmp_path: Path, pg_dsn: str) -> None:
    sep = "&" if "?" in pg_dsn else "?"
    database = f"{pg_dsn}{sep}options=-c%20no_such_setting%3D1"
    code, err = _once(_config(tmp_path, database), "600")
    assert code == 1 and len(err.splitlines()) == 1, err
    assert 'unrecognized configuration parameter "no_such_setting"' in err, err


@pytest.mark.parametrize("folder", ["does not exist", "permission denied"])
def test_a_socket_folder_named_with_a_mistakes_words_is_waited_for(
        tmp_path: Path, folder: str) -> None:
    """No server listens in the folder (it is away): tried again to the bound, then
    refused as unreachable, not at once as if the folder's name were libpq's reason."""
    sockets = tmp_path / folder
    sockets.mkdir()
    code, err = _once(_config(tmp_path, f"postgresql:///loop?host={quote(str(sockets))}"), "1")
    said = err.splitlines()
    assert code == 1 and len(said) == 2, err
    assert said[0].startswith("the-loop: poll: starting: the database is unreachable ("), err
    assert said[1].startswith("the-loop: poll: starting: the database is still unreachable "
                              "after 1 s ("), err
