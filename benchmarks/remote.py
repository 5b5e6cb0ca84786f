"""Remote hooks: round-trip latency against the HTTP floor, throughput, and 40 ms stalls.

One run, under a minute, prints markdown tables:

1. Latency of one remote point through `Chain.run` with a `RemoteExecutor` against
   `HookServer`, beside the floor: a raw `http.client` keep-alive POST of the same body to
   a minimal `http.server` handler answering a constant in one write. For scale, a raw
   socket server answering the constant, and the same minimal handler written the naive way
   (headers and body in two writes, Nagle on) — the delayed-ACK stall the design avoids.
   The floor, the raw server and the round trip are measured in alternating rounds
   (`ROUNDS`), so the machine's drift in load falls on all three alike; the target line
   gives the spread of the per-round ratios too.
2. Throughput of `HookServer` and of the WSGI app under gunicorn (2 workers: sync, then
   gthread for keep-alive) with 1 and 4 client threads.
3. A served policy folder of 100 rules against an empty executor on the same stack
   (`hooks serve`; gunicorn gthread with THE_LOOP_HOOK_POLICY vs THE_LOOP_HOOK_PATH):
   calls/s, p99 and the server's CPU per call (issue 14; see benchmarks/served_policy.py).

Targets: executor round trip ≤ 1.5× the floor (issue 22); no call ≥ 40 ms anywhere
(counted per row); a served policy ≥ 0.8× the empty executor's throughput on each stack
(judged on server CPU per call, which the machine's load barely moves).
Run: `python benchmarks/remote.py` (`--served` for table 3 alone).
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import socketserver
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from served_policy import print_served, served_rows
from the_loop.events import EventLog
from the_loop.hooks.engine.chain import Chain, Link
from the_loop.hooks.engine.points import POINTS, SessionSpawn, WorkItem, context_to_json
from the_loop.hooks.executors.remote import RemoteExecutor
from the_loop.hooks.serving.server import HookServer
from the_loop.sdk.hooks import LifecycleHooks

STALL_MS = 40.0
FLOOR = "floor: http.client → http.server constant, one write"
TRIP = "**Chain.run → RemoteExecutor → HookServer**"
LATENCY_CALLS = 1500
ROUNDS = 10  # the latency rows alternate in this many rounds
NAIVE_CALLS = 25  # each may cost 40 ms: a few are enough to see it
SECONDS = 1.5  # per throughput row

CTX = SessionSpawn(
    prompt="Implement the login page described in the ticket. " * 8,
    work_item=WorkItem(ref="local:acme/app#12", tracker="local", repository="acme/app",
                       owner="acme", repo="app", number=12, url="http://x/12", id="12"),
    loop="acme", labels=["loop", "frontend"], harness="demo", model="demo-1",
    command=["python3", "-m", "the_loop.demo.agent"], cwd="/tmp/ws/12", node="design",
)
BODY = json.dumps({"jsonrpc": "2.0", "method": "session_spawn",
                   "params": context_to_json(CTX), "id": 1}, separators=(",", ":")).encode()
CONSTANT = b'{"jsonrpc":"2.0","result":{"prompt":"ACME"},"id":1}'

HOOK_SOURCE = """\
from the_loop.sdk.hooks import LifecycleHooks, SessionSpawn

class Prefix(LifecycleHooks):
    def session_spawn(self, ctx: SessionSpawn) -> SessionSpawn:
        ctx.prompt = "ACME: " + ctx.prompt[:20]
        return ctx
"""


class Prefix(LifecycleHooks):
    def session_spawn(self, ctx: SessionSpawn) -> SessionSpawn:
        ctx.prompt = "ACME: " + ctx.prompt[:20]
        return ctx


class _Quiet(EventLog):
    def emit(self, event: str, **fields: Any) -> dict[str, Any]:
        return {}


# ------------------------------------------------------------------------ floor servers


class _Constant(BaseHTTPRequestHandler):
    """The floor: http.server, keep-alive, the constant answer in one write."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    answer = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n%s" % (len(CONSTANT), CONSTANT))

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.wfile.write(self.answer)

    def log_message(self, *args: Any) -> None:
        pass


class _Naive(_Constant):
    """The usual way: send_response/end_headers, then the body — two writes, Nagle on."""

    disable_nagle_algorithm = False

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(CONSTANT)))
        self.end_headers()
        self.wfile.write(CONSTANT)


class _Raw(socketserver.BaseRequestHandler):
    """Below the floor: a socket loop, no HTTP parsing at all."""

    def handle(self) -> None:
        sock: socket.socket = self.request
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = b""
        while True:
            while b"\r\n\r\n" not in buf:
                data = sock.recv(65536)
                if not data:
                    return
                buf += data
            head, buf = buf.split(b"\r\n\r\n", 1)
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            while len(buf) < length:
                data = sock.recv(65536)
                if not data:
                    return
                buf += data
            buf = buf[length:]
            sock.sendall(_Constant.answer)


def _serve(server: socketserver.TCPServer) -> tuple[int, Callable[[], None]]:
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()

    def stop() -> None:
        server.shutdown()
        server.server_close()

    return int(server.server_address[1]), stop


# ----------------------------------------------------------------------- measurement


def _floor_call(port: int) -> Callable[[], None]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    headers = {"Content-Type": "application/json"}

    def call() -> None:
        conn.request("POST", "/", body=BODY, headers=headers)
        conn.getresponse().read()

    return call


def _chain_call(url: str, token_env: str = "") -> tuple[Callable[[], None], RemoteExecutor]:
    ex = RemoteExecutor(name="bench", url=url, token_env=token_env, timeout=10)
    chain = Chain([Link("bench", ex, frozenset(POINTS))], log=_Quiet())

    def call() -> None:
        out = chain.run(CTX)
        if not out.prompt.startswith("ACME"):
            raise SystemExit(f"the remote hook did not answer: {out.prompt[:40]!r}")

    return call, ex


def _latencies(call: Callable[[], None], n: int, warmup: int = 50) -> list[float]:
    for _ in range(min(warmup, n)):
        call()
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        call()
        out.append((time.perf_counter() - t0) * 1000.0)
    return out


def _interleaved(calls: dict[str, Callable[[], None]], n: int, rounds: int = ROUNDS
                 ) -> tuple[dict[str, list[float]], list[dict[str, float]]]:
    """`n` latencies of each call, taken in `rounds` rounds that alternate their order;
    also each round's median per call."""
    out: dict[str, list[float]] = {name: [] for name in calls}
    medians: list[dict[str, float]] = []
    for call in calls.values():
        for _ in range(50):
            call()
    for r in range(rounds):
        names = list(calls) if r % 2 == 0 else list(reversed(calls))
        medians.append({})
        for name in names:
            values = _latencies(calls[name], n // rounds, warmup=5)
            out[name] += values
            medians[-1][name] = statistics.median(values)
    return out, medians


def _throughput(make: Callable[[], Callable[[], None]], threads: int,
                seconds: float = SECONDS) -> tuple[float, list[float]]:
    calls = [make() for _ in range(threads)]
    for c in calls:
        c()
    lat: list[list[float]] = [[] for _ in range(threads)]
    start = threading.Barrier(threads + 1)
    stop_at = [0.0]

    def worker(i: int) -> None:
        start.wait()
        while time.perf_counter() < stop_at[0]:
            t0 = time.perf_counter()
            calls[i]()
            lat[i].append((time.perf_counter() - t0) * 1000.0)

    workers = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    stop_at[0] = time.perf_counter() + seconds
    t0 = time.perf_counter()
    start.wait()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - t0
    every = [x for series in lat for x in series]
    return len(every) / elapsed, every


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _stalls(values: list[float]) -> int:
    return sum(1 for v in values if v >= STALL_MS)


# ------------------------------------------------------------------------------ gunicorn


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def _gunicorn(folder: Path, worker_class: str, serve: dict[str, str] | None = None
              ) -> tuple[str, subprocess.Popen[bytes]]:
    """gunicorn with the WSGI app: the Prefix class with a token, or `serve`'s variables."""
    port = _free_port()
    if serve is None:
        hook = folder / "prefix.py"
        hook.write_text(HOOK_SOURCE, encoding="utf-8")
        serve = {"THE_LOOP_HOOK_PATH": str(hook), "BENCH_TOKEN": "bench-token",
                 "THE_LOOP_HOOK_TOKEN_ENV": "BENCH_TOKEN"}
    env = {**os.environ, **serve}
    args = [sys.executable, "-m", "gunicorn", "-w", "2", "-b", f"127.0.0.1:{port}",
            "-k", worker_class, "the_loop.hooks.serving.wsgi:app_from_env()"]
    if worker_class == "gthread":
        args[5:5] = ["--threads", "4"]
    proc = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, cwd=folder)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(url + "health", timeout=1) as resp:
                resp.read()
            return url, proc
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise SystemExit("gunicorn did not start") from None
            time.sleep(0.1)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# ---------------------------------------------------------------------------------- main


def main() -> int:
    began = time.perf_counter()
    if "--served" in sys.argv[1:]:
        with tempfile.TemporaryDirectory() as tmp:
            met = print_served(served_rows(Path(tmp), BODY, _throughput, _gunicorn, _stop))
        print(f"\nTarget: a served policy ≥ 0.8× the empty executor (server CPU per call): "
              f"{'met' if met else 'MISSED'}. CPUs: {os.cpu_count()}; Python "
              f"{sys.version.split()[0]}; run {time.perf_counter() - began:.1f} s.")
        return 0
    os.environ["BENCH_TOKEN"] = "bench-token"
    lat_rows: list[tuple[str, list[float]]] = []
    thr_rows: list[tuple[str, int, float, list[float]]] = []
    executors: list[RemoteExecutor] = []

    const_port, stop_const = _serve(ThreadingHTTPServer(("127.0.0.1", 0), _Constant))
    naive_port, stop_naive = _serve(ThreadingHTTPServer(("127.0.0.1", 0), _Naive))
    raw = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Raw)
    raw.daemon_threads = True
    raw_port, stop_raw = _serve(raw)
    hook_server = HookServer(Prefix())
    hook_server.serve_in_thread()
    try:
        call, ex = _chain_call(hook_server.url)
        executors.append(ex)
        measured, rounds = _interleaved({
            FLOOR: _floor_call(const_port),
            "raw socket server answering the constant": _floor_call(raw_port),
            TRIP: call,
        }, LATENCY_CALLS)
        lat_rows += measured.items()
        floor = measured[FLOOR]
        lat_rows.append(("naive http.server: headers and body in two writes, Nagle on",
                         _latencies(_floor_call(naive_port), NAIVE_CALLS, warmup=2)))

        def hook_client() -> Callable[[], None]:
            c, e = _chain_call(hook_server.url)
            executors.append(e)
            return c

        for n in (1, 4):
            rate, values = _throughput(hook_client, n)
            thr_rows.append(("HookServer (httptools on uvloop)", n, rate, values))
        with tempfile.TemporaryDirectory() as tmp:
            for worker in ("sync", "gthread"):
                url, proc = _gunicorn(Path(tmp), worker)
                try:
                    def guni_client(url: str = url) -> Callable[[], None]:
                        c, e = _chain_call(url, token_env="BENCH_TOKEN")
                        executors.append(e)
                        return c

                    for n in (1, 4):
                        rate, values = _throughput(guni_client, n)
                        thr_rows.append((f"WSGI app under gunicorn -w 2 -k {worker}", n, rate,
                                         values))
                finally:
                    _stop(proc)
            served = served_rows(Path(tmp), BODY, _throughput, _gunicorn, _stop)
    finally:
        for ex in executors:
            ex.close()
        hook_server.shutdown()
        stop_const()
        stop_naive()
        stop_raw()

    base = statistics.median(floor)
    print("### Remote hook round trip (one point, keep-alive, loopback)\n")
    print("| path | calls | median ms | p99 ms | max ms | × floor (median) | calls ≥ 40 ms |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, values in lat_rows:
        med = statistics.median(values)
        print(f"| {name} | {len(values)} | {med:.3f} | {_p(values, 0.99):.3f} | "
              f"{max(values):.3f} | {med / base:.2f} | {_stalls(values)} |")
    print("\n### Throughput through the RemoteExecutor (chain → HTTP → hook, loopback)\n")
    print("| server | client threads | calls/s | median ms | p99 ms | calls ≥ 40 ms |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, threads, rate, values in thr_rows:
        print(f"| {name} | {threads} | {rate:,.0f} | {statistics.median(values):.3f} | "
              f"{_p(values, 0.99):.3f} | {_stalls(values)} |")
    served_met = print_served(served)
    executor_med = statistics.median(dict(lat_rows)[TRIP])
    per_round = sorted(r[TRIP] / r[FLOOR] for r in rounds)
    stalls = sum(_stalls(v) for name, v in lat_rows if not name.startswith("naive")) + sum(
        _stalls(v) for *_, v in thr_rows)
    print(f"\nTargets: executor round trip {executor_med / base:.2f}× the floor (rounds "
          f"{per_round[0]:.2f}–{per_round[-1]:.2f}; ≤ 1.5×: "
          f"{'met' if executor_med <= 1.5 * base else 'MISSED'}); calls ≥ 40 ms outside the naive "
          f"row: {stalls} ({'met' if stalls == 0 else 'MISSED'}); a served policy ≥ 0.8× the "
          f"empty executor (server CPU): {'met' if served_met else 'MISSED'}. CPUs: "
          f"{os.cpu_count()}; Python {sys.version.split()[0]}; whole run "
          f"{time.perf_counter() - began:.1f} s.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
