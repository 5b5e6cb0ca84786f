"""Server CPU per served call against the raw asyncio floor, for every stack that can serve.

Each server runs in its own process; the same keep-alive `http.client` callers (1 and 4
threads) send the same session_spawn body (benchmarks/remote.py's) in alternating rounds,
and the server's CPU time (user + system, from /proc/PID/stat, its children included) is
divided by the calls it answered. Rows:

- the floor: a raw asyncio server (stdlib loop) that frames the request by hand, parses the
  JSON body and answers a constant JSON-RPC result (the same JSON work as a real call);
- for scale: the same on uvloop, and uvicorn (httptools + uvloop) with an ASGI app doing
  the same JSON work;
- what the-loop serves a 100-rule policy folder with (benchmarks/served_policy.py's):
  `hooks serve --policy` (httptools on uvloop), the ASGI app under uvicorn
  (httptools + uvloop), the WSGI app under gunicorn -w 2 -k gthread; and `hooks serve
  --path` with an empty hook class (the thread-pool path). Each with its decision log off
  (the stack's own cost), and `hooks serve --policy` once more with it on (the default).

Target (issue 22): server CPU per served decision ≤ 2× the floor, with 1 and 4 threads.
Run: `python benchmarks/http_floor.py` (`--rounds N`, default 5).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from remote import BODY, _free_port, _gunicorn, _stop, _throughput
from served_policy import EMPTY_SOURCE, _client, _cpu, policy_folder

ROUND_SECONDS = 0.5
ANSWER = {"jsonrpc": "2.0", "result": {"prompt": "ACME"}, "id": 1}


# ------------------------------------------------------------------- the floor servers


class _Floor(asyncio.Protocol):
    """Frames a request by hand (head to the blank line, Content-Length), parses the JSON
    body, answers the constant: the least an HTTP JSON-RPC server can do per call."""

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.buf = b""

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].lower()
            at = head.find(b"content-length:")
            length = int(head[at + 15:head.find(b"\r\n", at) if head.find(b"\r\n", at) > 0
                              else None]) if at >= 0 else 0
            if len(self.buf) < end + 4 + length:
                return
            doc = json.loads(self.buf[end + 4:end + 4 + length])
            self.buf = self.buf[end + 4 + length:]
            body = json.dumps({**ANSWER, "id": doc["id"]}, separators=(",", ":")).encode()
            self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body))


async def _json_asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    doc = json.loads(body)
    out = json.dumps({**ANSWER, "id": doc["id"]}, separators=(",", ":")).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(out)).encode())]})
    await send({"type": "http.response.body", "body": out})


def _serve_floor(kind: str, port: int) -> None:
    if kind == "uvicorn-json":
        import uvicorn
        uvicorn.run(_json_asgi, host="127.0.0.1", port=port, http="httptools", loop="uvloop",
                    log_level="warning", access_log=False, lifespan="off")
        return
    if kind == "uvloop":
        import uvloop
        loop = uvloop.new_event_loop()
    else:
        loop = asyncio.new_event_loop()
    loop.run_until_complete(loop.create_server(_Floor, "127.0.0.1", port))
    print("ready", flush=True)
    loop.run_forever()


# -------------------------------------------------------------------------- the stacks


def _wait_ready(url: str, proc: subprocess.Popen[Any]) -> None:
    import urllib.request
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(url + "health", timeout=1).read()
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise SystemExit(f"the server for {url} did not start") from None
            time.sleep(0.1)


def _spawn(args: list[str], port: int, env: dict[str, str] | None = None,
           cwd: Path | None = None) -> tuple[str, subprocess.Popen[Any]]:
    proc = subprocess.Popen(args, env={**os.environ, **(env or {})}, cwd=cwd,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/"
    if "--floor" in args:
        deadline = time.monotonic() + 30
        while True:  # the floor answers no GET: wait for the port
            import socket
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise SystemExit("the floor server did not start") from None
                time.sleep(0.1)
    else:
        _wait_ready(url, proc)
    return url, proc


def _hooks_serve(folder: Path, *args: str) -> tuple[str, subprocess.Popen[Any]]:
    port = _free_port()
    return _spawn([sys.executable, "-m", "the_loop", "hooks", "serve", *args, "--port",
                   str(port), "--quiet"], port, cwd=folder)


def _stacks(folder: Path) -> list[tuple[str, Callable[[], tuple[str, Any]]]]:
    policy = str(policy_folder(folder))
    (folder / "empty.py").write_text(EMPTY_SOURCE, encoding="utf-8")
    me = str(Path(__file__).resolve())

    def floor(kind: str) -> Callable[[], tuple[str, Any]]:
        def start() -> tuple[str, Any]:
            port = _free_port()
            return _spawn([sys.executable, me, "--floor", kind, str(port)], port)
        return start

    def uvicorn_policy() -> tuple[str, Any]:
        port = _free_port()
        return _spawn([sys.executable, "-m", "uvicorn", "--factory", "--http", "httptools",
                       "--loop", "uvloop", "--no-access-log", "--log-level", "warning",
                       "--port", str(port), "the_loop.hooks.serving.asgi:app_from_env"], port,
                      {"THE_LOOP_HOOK_POLICY": policy, "THE_LOOP_HOOK_DECISION_LOG": "off"},
                      folder)

    return [
        ("**floor: raw asyncio server, JSON parsed, constant answer**", floor("asyncio")),
        ("the same on uvloop", floor("uvloop")),
        ("uvicorn (httptools + uvloop), ASGI app doing the same JSON work",
         floor("uvicorn-json")),
        ("**`hooks serve --policy` (httptools on uvloop), decision log off**",
         lambda: _hooks_serve(folder, "--policy", policy, "--decision-log", "off")),
        ("`hooks serve --policy`, its decision log on (the default: a SQLite file)",
         lambda: _hooks_serve(folder, "--policy", policy)),
        ("`hooks serve --path` an empty hook class (thread pool), decision log off",
         lambda: _hooks_serve(folder, "--path", "empty.py", "--decision-log", "off")),
        ("ASGI app under uvicorn (httptools + uvloop), the policy", uvicorn_policy),
        ("WSGI app under gunicorn -w 2 -k gthread, the policy",
         lambda: _gunicorn(folder, "gthread", {"THE_LOOP_HOOK_POLICY": policy,
                                               "THE_LOOP_HOOK_DECISION_LOG": "off"})),
    ]


def main() -> int:
    rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 5
    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        stacks = _stacks(folder)
        running = []
        try:
            for name, start in stacks:
                url, proc = start()
                running.append((name, url, proc))
            table = _measure(running, rounds)
        finally:
            for _, _, proc in running:
                _stop(proc)
    floor = {n: table[0][1][n] for n in (1, 4)}
    print("### Server CPU per call (µs, from /proc), keep-alive callers, loopback\n")
    print(f"{rounds} alternating rounds of {ROUND_SECONDS} s per server and thread count.\n")
    print("| server | 1 thread: µs/call | × floor | calls/s | 4 threads: µs/call | × floor "
          "| calls/s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, cpu, rate in table:
        print(f"| {name} | {cpu[1]:.0f} | {cpu[1] / floor[1]:.2f} | {rate[1]:,.0f} | "
              f"{cpu[4]:.0f} | {cpu[4] / floor[4]:.2f} | {rate[4]:,.0f} |")
    served = table[3][1]
    worst = max(served[n] / floor[n] for n in (1, 4))
    print(f"\nTarget: `hooks serve --policy` ≤ 2× the floor in server CPU per call: "
          f"{worst:.2f}× ({'met' if worst <= 2 else 'MISSED'}). CPUs: {os.cpu_count()}; "
          f"Python {sys.version.split()[0]}; load average {os.getloadavg()[0]:.1f}; run "
          f"{time.perf_counter() - began:.0f} s.")
    return 0


def _measure(running: list[tuple[str, str, Any]], rounds: int
             ) -> list[tuple[str, dict[int, float], dict[int, float]]]:
    cpu = {(name, n): 0.0 for name, _, _ in running for n in (1, 4)}
    calls = {(name, n): 0 for name, _, _ in running for n in (1, 4)}
    rate = {(name, n): 0.0 for name, _, _ in running for n in (1, 4)}
    for _ in range(rounds):
        for n in (1, 4):
            for name, url, proc in running:
                before = _cpu(proc.pid)
                r, values = _throughput(_client(url, BODY), n, ROUND_SECONDS)
                cpu[name, n] += _cpu(proc.pid) - before
                calls[name, n] += len(values)
                rate[name, n] = max(rate[name, n], r)
    return [(name, {n: cpu[name, n] / calls[name, n] * 1e6 for n in (1, 4)},
             {n: rate[name, n] for n in (1, 4)}) for name, _, _ in running]


if __name__ == "__main__":
    if "--floor" in sys.argv:
        at = sys.argv.index("--floor")
        _serve_floor(sys.argv[at + 1], int(sys.argv[at + 2]))
        raise SystemExit(0)
    raise SystemExit(main())
