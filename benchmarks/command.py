"""`command:` hooks: the cost of one call beside an in-process hook and a `url:` call, one run.

Every row answers the same session_spawn context with the same decision (a prompt), through
`Chain.run`, in alternating rounds (`ROUNDS`) so the machine's drift in load falls on all of
them alike; each row's figure is its median round, per call:

- in process: a `LifecycleHooks` class (`path:`), the floor of any hook;
- url: `RemoteExecutor` → `the-loop hooks serve --path` of that class on loopback;
- command: a shell one-liner (`sh -c …`) and a Python script, each a fresh process per call;
- beside each command, its floor: `subprocess.run` of the same program on the same stdin with
  nothing read back — what starting that program costs before the-loop does anything.

Run: `python benchmarks/command.py` (under a minute).
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from the_loop.events import EventLog
from the_loop.hooks import load_chain
from the_loop.hooks.engine.points import SessionSpawn, WorkItem
from the_loop.hooks.executors.remote import request_body

ROUNDS = 7
CTX = SessionSpawn(prompt="Implement the login page described in the ticket. " * 8,
                   work_item=WorkItem(ref="local:acme/app#12", kind="issue"), loop="acme",
                   labels=["loop", "frontend"], harness="demo", model="demo-1")
HOOK = """\
from the_loop.sdk.hooks import LifecycleHooks, SessionSpawn

class Prefix(LifecycleHooks):
    def session_spawn(self, ctx: SessionSpawn) -> SessionSpawn:
        ctx.prompt = "ACME: " + ctx.prompt
        return ctx
"""
SHELL = ["sh", "-c", "cat >/dev/null; echo '{\"prompt\": \"ACME\"}'"]
SCRIPT = """\
import json, sys
request = json.load(sys.stdin)
print(json.dumps({"prompt": "ACME: " + request["params"]["prompt"]}))
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _serve(folder: Path) -> tuple[str, subprocess.Popen[bytes]]:
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "the_loop", "hooks", "serve", "--path",
                             "prefix.py", "--port", str(port), "--quiet"], cwd=folder,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(url + "health", timeout=1).read()
            return url, proc
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise SystemExit("hooks serve --path did not start") from None
            time.sleep(0.1)


def _run(folder: Path, entry: dict[str, object]) -> Callable[[], object]:
    """`Chain.run(CTX)` of a chain of that one entry (JSON is YAML too)."""
    config = folder / "cli-config.yaml"
    config.write_text(f"loop: acme\nstateDir: state\nhooks:\n  - {json.dumps(entry)}\n",
                      encoding="utf-8")
    chain = load_chain(config, log=EventLog())
    return lambda: chain.run(CTX)


def _floor(argv: list[str], cwd: Path) -> Callable[[], object]:
    body = request_body("session_spawn", CTX, 1)
    return lambda: subprocess.run(argv, input=body, cwd=cwd, env={}, capture_output=True,
                                  check=True)


def _per_call(fn: Callable[[], object], n: int) -> float:
    started = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - started) / n


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "prefix.py").write_text(HOOK, encoding="utf-8")
        (folder / "hook.py").write_text(SCRIPT, encoding="utf-8")
        url, server = _serve(folder)
        py = os.path.realpath(sys.executable)
        try:
            rows: dict[str, tuple[Callable[[], object], int]] = {
                "in process (path:)": (_run(folder, {"name": "p", "path": "prefix.py"}),
                                       20_000),
                "url: → hooks serve --path, loopback": (_run(folder, {"name": "u", "url": url}),
                                                        300),
                "command: shell one-liner": (_run(folder, {"name": "s", "command": SHELL}), 40),
                "floor: subprocess.run of that sh": (_floor(SHELL, folder), 40),
                "command: Python script": (_run(folder, {"name": "y",
                                                         "command": [py, "hook.py"]}), 6),
                "floor: subprocess.run of that python": (_floor([py, "hook.py"], folder), 6),
            }
            for fn, _ in rows.values():  # one call each first: every answer is the prefix
                fn()
            assert all(str(getattr(fn(), "prompt", "ACME")).startswith("ACME")
                       for fn, _ in rows.values())
            times: dict[str, list[float]] = {name: [] for name in rows}
            for _ in range(ROUNDS):
                for name, (fn, n) in rows.items():
                    times[name].append(_per_call(fn, n))
        finally:
            server.terminate()
            server.wait(timeout=10)
    median = {name: statistics.median(t) for name, t in times.items()}
    base = median["in process (path:)"]
    print(f"One session_spawn call through Chain.run; median of {ROUNDS} alternating rounds, "
          "per call.\n")
    print("| hook | per call | × in process | × its floor |")
    print("|---|---:|---:|---:|")
    floors = {"command: shell one-liner": "floor: subprocess.run of that sh",
              "command: Python script": "floor: subprocess.run of that python"}
    for name, t in median.items():
        shown = f"{t * 1e6:.1f} µs" if t < 1e-3 else f"{t * 1e3:.2f} ms"
        floor = f"{t / median[floors[name]]:.2f}×" if name in floors else ""
        print(f"| {name} | {shown} | {t / base:,.0f}× | {floor} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
