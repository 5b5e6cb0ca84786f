"""Table 3 of benchmarks/remote.py: a served 100-rule policy folder vs an empty hook class.

Both run on the same stack — `the-loop hooks serve` (HookServer) in its own process, and
the WSGI app under gunicorn -w 2 -k gthread — and are called by the same keep-alive
`http.client` callers with the same session_spawn body. Each pair is measured in short
alternating rounds. Two views:

- calls/s (best round per side) and p99: what a caller sees, but on a shared machine the
  load moves it by tens of percent from one round to the next;
- the server processes' CPU time per call (from /proc, summed over every round): what the
  policy costs the server, which the load barely moves. The × CPU column is the empty
  executor's CPU per call over the policy's: the throughput ratio of a server that is
  CPU-bound, and the figure the ≥ 0.8× target is judged on.
"""

from __future__ import annotations

import http.client
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROUNDS = 9
ROUND_SECONDS = 0.5
TICK = os.sysconf("SC_CLK_TCK")

EMPTY_SOURCE = """\
from the_loop.sdk.hooks import LifecycleHooks, SessionSpawn

class Empty(LifecycleHooks):
    def session_spawn(self, ctx: SessionSpawn) -> None:
        return None
"""

#: (stack, threads, empty calls/s, empty ms, policy calls/s, policy ms, empty µs, policy µs)
Row = tuple[str, int, float, list[float], float, list[float], float, float]
Throughput = Callable[..., tuple[float, list[float]]]


def policy_folder(folder: Path) -> Path:
    """100 rules at session_spawn over the facts a caller sends; two match the benchmark body."""
    rules = ["rules:"]
    for i in range(98):
        rules += [f"  - name: rule-{i}", "    on: session_spawn",
                  f"    when: \"contains(labels, 'team-{i}') || work_item.number == "
                  f"`{1000 + i}` || harness == 'h{i}'\"",
                  "    set:", f"      prompt_prefix: \"[{i}] \""]
    rules += ["  - name: frontend", "    on: session_spawn",
              "    when: \"contains(labels, 'frontend') && work_item.repository == 'acme/app'\"",
              "    set:", "      prompt_prefix: \"[frontend] \"",
              "  - name: pull-requests", "    on: session_spawn",
              "    when: \"work_item.kind == 'pull-request' && !contains(labels, 'trusted')\"",
              "    set:", "      proceed: false",
              "      reason: \"{{ work_item.ref }} needs the trusted label\""]
    out = folder / "policy-100"
    out.mkdir(exist_ok=True)
    (out / "rules.yaml").write_text("\n".join(rules) + "\n", encoding="utf-8")
    return out


def _client(url: str, body: bytes) -> Callable[[], Callable[[], None]]:
    host, port = url.split("/")[2].rsplit(":", 1)

    def make() -> Callable[[], None]:
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        headers = {"Content-Type": "application/json"}

        def call() -> None:
            conn.request("POST", "/", body=body, headers=headers)
            resp = conn.getresponse()
            if resp.status != 200 or b'"result"' not in resp.read():
                raise SystemExit(f"the served hook did not answer: HTTP {resp.status}")

        return call

    return make


def _cpu(pid: int) -> float:
    """CPU seconds (user + system) of `pid` and its children still running."""
    pids = [pid]
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                pids.append(int(entry))
    total = 0
    for p in pids:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / TICK


def _pair(stack: str, n: int, body: bytes, throughput: Throughput,
          empty: tuple[str, int], policy: tuple[str, int]) -> Row:
    rate = {"e": 0.0, "p": 0.0}
    lat: dict[str, list[float]] = {"e": [], "p": []}
    cpu = {"e": 0.0, "p": 0.0}
    for _ in range(ROUNDS):
        for side, (url, pid) in (("e", empty), ("p", policy)):
            before = _cpu(pid)
            r, values = throughput(_client(url, body), n, ROUND_SECONDS)
            cpu[side] += _cpu(pid) - before
            rate[side] = max(rate[side], r)
            lat[side] += values
    return (stack, n, rate["e"], lat["e"], rate["p"], lat["p"],
            cpu["e"] / len(lat["e"]) * 1e6, cpu["p"] / len(lat["p"]) * 1e6)


def _hooks_serve(folder: Path, *args: str) -> tuple[str, subprocess.Popen[str]]:
    proc = subprocess.Popen([sys.executable, "-m", "the_loop", "hooks", "serve", *args,
                             "--port", "0", "--quiet"], cwd=folder, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    if not url:
        raise SystemExit("hooks serve did not start")
    return url, proc


def served_rows(folder: Path, body: bytes, throughput: Throughput,
                gunicorn: Callable[..., tuple[str, Any]], stop: Callable[[Any], None]
                ) -> list[Row]:
    """Every row of the table; `throughput`, `gunicorn` and `stop` are remote.py's."""
    policy_dir = policy_folder(folder)
    (folder / "empty.py").write_text(EMPTY_SOURCE, encoding="utf-8")
    rows: list[Row] = []
    procs: list[Any] = []
    try:
        e_url, e_proc = _hooks_serve(folder, "--path", "empty.py")
        procs.append(e_proc)
        p_url, p_proc = _hooks_serve(folder, "--policy", str(policy_dir))
        procs.append(p_proc)
        for n in (1, 4):
            rows.append(_pair("hooks serve (HookServer)", n, body, throughput,
                              (e_url, e_proc.pid), (p_url, p_proc.pid)))
        for proc in procs:
            proc.terminate()
            proc.wait(10)
        procs.clear()
        ge_url, ge_proc = gunicorn(folder, "gthread",
                                   {"THE_LOOP_HOOK_PATH": str(folder / "empty.py")})
        procs.append(ge_proc)
        gp_url, gp_proc = gunicorn(folder, "gthread", {"THE_LOOP_HOOK_POLICY": str(policy_dir)})
        procs.append(gp_proc)
        for n in (1, 4):
            rows.append(_pair("gunicorn -w 2 -k gthread", n, body, throughput,
                              (ge_url, ge_proc.pid), (gp_url, gp_proc.pid)))
    finally:
        for proc in procs:
            stop(proc)
    return rows


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def print_served(rows: list[Row]) -> bool:
    """Print the table; True when every row meets the ≥ 0.8× target (on server CPU)."""
    print("\n### A served policy folder of 100 rules vs an empty executor (same stack)\n")
    print(f"{ROUNDS} alternating rounds of {ROUND_SECONDS} s per side: best calls/s, p99 over "
          "all rounds, server CPU per call summed over all rounds.\n")
    print("| stack | client threads | empty calls/s | policy calls/s | × calls/s | empty p99 ms "
          "| policy p99 ms | empty CPU µs/call | policy CPU µs/call | × CPU |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    met = True
    for stack, n, e_rate, e_lat, p_rate, p_lat, e_cpu, p_cpu in rows:
        met = met and e_cpu / p_cpu >= 0.8
        print(f"| {stack} | {n} | {e_rate:,.0f} | {p_rate:,.0f} | {p_rate / e_rate:.2f} | "
              f"{_p99(e_lat):.3f} | {_p99(p_lat):.3f} | {e_cpu:.0f} | {p_cpu:.0f} | "
              f"{e_cpu / p_cpu:.2f} |")
    return met
