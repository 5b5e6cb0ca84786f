"""Real hook servers for tests: `hooks serve` in a subprocess, gunicorn, raw HTTP requests."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit


class Served:
    """A running `the-loop hooks serve` process, the URL it printed, and its stderr."""

    def __init__(self, args: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "the_loop", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd,
            env={**os.environ, **(env or {})},
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()
        if not self.url:
            _, err = self.proc.communicate(timeout=10)
            raise AssertionError(f"hooks serve did not start: {err}")

    def stop(self, sig: int = signal.SIGTERM) -> tuple[int, str]:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        _, err = self.proc.communicate(timeout=10)
        return self.proc.returncode, err

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate(timeout=10)


@contextlib.contextmanager
def served_with_stderr_closed(args: list[str], cwd: Path
                              ) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """`the-loop hooks serve ARGS` whose stderr is a pipe closed once its start lines are
    read (a `| head` that exited, a restarted journal): every later write to it fails with
    EPIPE. Yields the process and its URL; SIGTERM stops it after the block."""
    read_end, write_end = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, "-m", "the_loop", "hooks", "serve", *args], stdout=subprocess.PIPE,
        stderr=write_end, text=True, cwd=cwd,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    os.close(write_end)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        said = b""
        while b"SIGHUP reloads\n" not in said:  # the start's lines, the last one whole
            chunk = os.read(read_end, 4096)
            assert chunk, said
            said += chunk
        os.close(read_end)
        yield proc, url
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=10)


@contextlib.contextmanager
def handler_server(handler: type[BaseHTTPRequestHandler]) -> Iterator[int]:
    """A stdlib HTTP server on a loopback port, in a thread, for the block; yields the port."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def free_port() -> int:
    """A loopback port nothing listens on right now (bound, then released): one for a
    server to start on, or for a hook that is gone."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@contextlib.contextmanager
def gunicorn(env: dict[str, str], cwd: Path, *, worker_class: str = "sync",
             workers: int = 2, host: str = "127.0.0.1", preload: bool = False) -> Iterator[str]:
    """gunicorn serving `the_loop.hooks.serving.wsgi:app_from_env()` with `env` (the ASGI app's
    under `uvicorn_worker.UvicornWorker`), bound to `host`; yields its loopback URL.

    Its stderr is in `cwd/gunicorn.log`."""
    port = free_port()
    log = cwd / "gunicorn.log"
    args = [sys.executable, "-m", "gunicorn", "-w", str(workers), "-k", worker_class,
            "-b", f"{host}:{port}", "--graceful-timeout", "2"]
    if worker_class == "gthread":
        args += ["--threads", "4"]
    if preload:  # the app is built once in the master, then the workers are forked
        args.append("--preload")
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [*args, f"the_loop.hooks.serving.{'asgi' if 'Uvicorn' in worker_class else 'wsgi'}"
                    ":app_from_env()"], env={**os.environ, **env},
            stdout=subprocess.DEVNULL, stderr=err, cwd=cwd,
        )
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(url + "health", timeout=1):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"gunicorn did not start:\n{log.read_text()}") from None
                time.sleep(0.1)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def post(url: str, payload: Any, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    """POST JSON; returns (status, parsed body or None)."""
    req = urllib.request.Request(
        url, data=json.dumps(payload).encode(), method="POST",
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            body = resp.read()
            return resp.status, json.loads(body) if body else None
    except urllib.error.HTTPError as exc:
        with exc:
            body = exc.read()
            return exc.code, json.loads(body) if body else None


def get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read() or b"null")


def raw(url: str, head: bytes, body: bytes = b"") -> tuple[int, bytes]:
    """Send exactly these bytes (a request head without its final blank line, and a body);
    returns the status and body of the answer (the connection is closed after)."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=20) as sock:
        sock.sendall(head + b"\r\nConnection: close\r\n\r\n" + body)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    status_line, _, rest = data.partition(b"\r\n")
    _, _, payload = rest.partition(b"\r\n\r\n")
    return int(status_line.split()[1]), payload


#: A session_spawn call the served-reload tests send, answered with its prompt prefixed.
RELOAD_CALL = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "session_spawn",
                          "params": {"prompt": "p", "labels": ["a"]}}).encode()


def tagged_rules(tag: str, *, data: bool = False) -> str:
    """Two rules tagging the prompt, so an answer from half of two revisions shows two tags;
    with `data` the suffix comes from data/tag.yaml (a mix of one release's rules and
    another's data shows too)."""
    suffix = "{{ data.tag }}" if data else tag
    return f"""\
rules:
  - name: prefix
    on: session_spawn
    set:
      prompt_prefix: "[{tag}] "
  - name: suffix
    on: session_spawn
    set:
      prompt_suffix: " [{suffix}]"
"""


class Callers:
    """`n` threads calling the server as fast as they can until stopped; each answer's
    revision header and prompt are kept."""

    def __init__(self, url: str, n: int = 4) -> None:
        host, port = url.split("/")[2].rsplit(":", 1)
        self.address = (host, int(port))
        self.answers: list[tuple[str, str]] = []
        self.failures: list[str] = []
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run, daemon=True) for _ in range(n)]
        for t in self.threads:
            t.start()

    def run(self) -> None:
        conn = http.client.HTTPConnection(*self.address, timeout=10)
        mine: list[tuple[str, str]] = []
        deadline = time.monotonic() + 60  # bounded whatever happens
        while not self.stop.is_set() and time.monotonic() < deadline:
            try:
                conn.request("POST", "/", body=RELOAD_CALL,
                             headers={"Content-Type": "application/json"})
                resp = conn.getresponse()
                body = json.loads(resp.read())
                if resp.status != 200 or "result" not in body:
                    raise AssertionError(f"HTTP {resp.status}: {body}")
                mine.append((resp.getheader("X-Policy-Revision") or "",
                             body["result"]["prompt"]))
            except Exception as exc:
                with self.lock:
                    self.failures.append(repr(exc))
                conn.close()
                conn = http.client.HTTPConnection(*self.address, timeout=10)
        conn.close()
        with self.lock:
            self.answers.extend(mine)

    def finish(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)


#: The first rule of the served tests' policies: it refuses a frozen item's session.
FROZEN = """\
rules:
  - name: frozen
    on: session_spawn
    when: "contains(labels, 'frozen')"
    set:
      proceed: false
      reason: the repository is frozen
"""
#: An audit rule: it would refuse a draft's session.
WATCH_DRAFTS = """\
  - name: watch-drafts
    on: session_spawn
    mode: audit
    when: "contains(labels, 'draft')"
    set:
      proceed: false
"""
#: The two together.
SPAWN_RULES = FROZEN + WATCH_DRAFTS
