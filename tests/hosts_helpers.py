"""Several simulated hosts on one PostgreSQL loop (issue 24.5), shared by tests/runtime/
test_hosts.py and scripts/soak.py's `--hosts` mode.

A `Host` is a folder of its own (cli-config.yaml, stateDir with its workspaces, session
logs and locks) naming the same `database:`, and a `poll` daemon started with its own
`--host-id`. Its harness records each launch (session, work item, host, prompt) in the
host's `launches.jsonl`, sleeps, then runs `the-loop graph complete` as an agent does.
`kill()` ends the whole host at once (SIGKILL to its poller and to every process holding one
of its session locks); `pause()` / `resume()` stop and continue the same processes.
`broken(hosts, refs, dsn)` returns one sentence per promise the run broke.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

from runtime_helpers import alive, child_env, pg_query
from the_loop.runtime.harness import lock_holders

#: Records the launch, works for argv[2] seconds, then reports its node complete.
AGENT = '''\
import json, os, subprocess, sys, time
prompt = sys.stdin.read()
record = {"session": os.environ["THE_LOOP_SESSION"], "item": os.environ["THE_LOOP_WORK_ITEM"],
          "host": os.environ.get("THE_LOOP_HOST_ID", ""), "prompt": prompt, "at": time.time()}
with open(sys.argv[1], "a", encoding="utf-8") as f:
    f.write(json.dumps(record) + "\\n")
time.sleep(float(sys.argv[2]))
subprocess.run([sys.executable, "-m", "the_loop", "graph", "complete", "--summary", "ok"],
               capture_output=True, timeout=60)
'''

GRAPH = """\
start: work
nodes:
  - {name: work, phase: work, actor: agent, prompt: "Work on {title} ({ref})."}
  - {name: done, phase: done, terminal: true}
edges:
  - {from: work, outcome: done, to: done}
"""


class Host:
    """One simulated host: its folder, its config and its poller."""

    def __init__(self, root: Path, name: str, dsn: str, *, work: float = 0.2,
                 max_sessions: int = 4, expiry: float = 2.0, extra: str = "") -> None:
        self.name = name
        self.dir = root / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.dsn = dsn
        self.config = self.dir / "cli-config.yaml"
        self.launches = self.dir / "launches.jsonl"
        (self.dir / "agent.py").write_text(AGENT, encoding="utf-8")
        (self.dir / "graph.yaml").write_text(GRAPH, encoding="utf-8")
        agent = json.dumps(str(self.dir / "agent.py"))
        self.config.write_text(
            f"loop: acme\nstateDir: state\ndatabase: {dsn}\ngraph: graph.yaml\n"
            f"harness: agent\nharnesses:\n  - name: agent\n    command: [python3, {agent}, "
            f"{json.dumps(str(self.launches))}, '{work:g}']\n"
            f"maxSessions: {max_sessions}\n"
            f"lease: {{expirySeconds: {expiry:g}, heartbeatSeconds: {expiry / 4:g}}}\n"
            + extra, encoding="utf-8")
        self.proc: subprocess.Popen[str] | None = None
        self.started = 0

    @property
    def sessions(self) -> Path:
        return self.dir / "state" / "sessions"

    def env(self) -> dict[str, str]:
        return child_env(HOME=str(self.dir))

    def cli(self, *args: str) -> str:
        """A one-shot command of this host, in this process (it launches nothing); stdout."""
        from the_loop.cli import main

        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            code = main(["--config", str(self.config), *args])
        assert code == 0, f"{args}: {out.getvalue()}{err.getvalue()}"
        return out.getvalue()

    def start(self, interval: float = 0.1, env: dict[str, str] | None = None) -> None:
        self.started += 1
        err = open(self.dir / f"poll-{self.started}.err", "w", encoding="utf-8")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "the_loop", "--config", str(self.config), "poll",
             "--interval", str(interval), "--quiet", "--host-id", self.name],
            env={**self.env(), **(env or {})}, text=True, stdout=subprocess.DEVNULL, stderr=err,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        err.close()

    def processes(self) -> list[int]:
        """The poller and every process holding one of this host's session locks."""
        pids = [self.proc.pid] if self.proc is not None and self.proc.poll() is None else []
        for lock in self.sessions.glob("*.lock") if self.sessions.exists() else []:
            pids += lock_holders(self.sessions, lock.stem)
        return sorted(set(pids))

    def signal(self, sig: signal.Signals) -> list[int]:
        pids = self.processes()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        return pids

    def kill(self) -> None:
        """The host dies: its poller and its sessions, at once."""
        pids = self.signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(timeout=10)
        deadline = time.monotonic() + 10
        while any(alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.02)

    def stop(self) -> None:
        """A clean stop of the poller (SIGTERM), then whatever it left running."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=20)
        self.kill()

    def records(self) -> list[dict[str, Any]]:
        if not self.launches.exists():
            return []
        return [json.loads(x) for x in self.launches.read_text().splitlines() if x.strip()]

    def errors(self) -> str:
        return "".join(p.read_text(errors="replace") for p in sorted(self.dir.glob("poll-*.err")))

    def events(self, name: str) -> list[dict[str, Any]]:
        path = self.dir / "state" / "events.jsonl"
        if not path.exists():
            return []
        return [r for r in map(json.loads, path.read_text().splitlines()) if r["event"] == name]


def all_done(dsn: str, refs: list[str]) -> bool:
    rows = pg_query(dsn, "SELECT ref, state FROM work")
    pending = pg_query(dsn, "SELECT key FROM steps WHERE state='pending'")
    return not pending and sorted(r["ref"] for r in rows if r["state"] == "done") == sorted(refs)


def broken(hosts: list[Host], refs: list[str], dsn: str) -> list[str]:
    """The promises a multi-host run broke, one sentence each (empty: none)."""
    out: list[str] = []
    work = {r["ref"]: r for r in pg_query(dsn, "SELECT * FROM work")}
    stuck = {ref: work.get(ref, {}).get("state") for ref in refs
             if work.get(ref, {}).get("state") != "done"}
    if stuck:
        out.append(f"items stuck: {stuck}")
    pending = pg_query(dsn, "SELECT key FROM steps WHERE state='pending'")
    if pending:
        out.append(f"steps still pending: {[p['key'] for p in pending]}")
    records = [r for h in hosts for r in h.records()]
    twice = [sid for sid, n in Counter(r["session"] for r in records).items() if n > 1]
    if twice:
        out.append(f"session ids launched twice: {twice}")
    sessions = pg_query(dsn, "SELECT id, ref, host, exited, lost FROM sessions")
    running = [s["id"] for s in sessions if not s["exited"]]
    if running:
        out.append(f"sessions still recorded as running: {running}")
    live = [pid for h in hosts for pid in h.processes()]
    if live:
        out.append(f"processes left alive: {live}")
    completes = Counter(r["ref"] for r in pg_query(
        dsn, "SELECT ref FROM steps WHERE kind='complete' AND outcome='completed'"))
    if completes != Counter(refs):
        out.append(f"items completed other than once each: {dict(completes)}")
    out += _inputs(dsn)
    return out


def _inputs(dsn: str) -> list[str]:
    """Every person's comment is one input step, done; a resumed one reached a session, and
    at most one that its host did not lose (a host that dies between launching a session and
    recording the launch done leaves the launch to be redone elsewhere)."""
    out: list[str] = []
    comments = pg_query(dsn, "SELECT c.id, c.body, c.created, i.repository, i.number FROM "
                             "comments c JOIN items i ON i.id = c.item WHERE c.author <> "
                             "'the-loop'")
    steps = {int(s["key"].rsplit(":", 1)[1]): s for s in pg_query(
        dsn, "SELECT key, state, outcome FROM steps WHERE kind='input'")}
    closed = {s["ref"]: float(s["created"]) for s in pg_query(
        dsn, "SELECT ref, created FROM steps WHERE kind='complete'")}
    launches = pg_query(dsn, "SELECT key, payload, outcome FROM steps WHERE kind='launch'")
    prompts = {s["key"]: json.loads(s["payload"])["prompt"] for s in launches}
    sessions = pg_query(dsn, "SELECT id, step, lost FROM sessions")
    for c in comments:
        step = steps.get(int(c["id"]))
        ref = f"local:{c['repository']}#{c['number']}"
        if step is None and float(c["created"]) >= closed.get(ref, float("inf")):
            continue  # written after the item was done: not input to anything
        if step is None or step["state"] != "done":
            out.append(f"comment {c['id']} not delivered: {step}")
            continue
        got = [s for s in sessions if c["body"] in prompts.get(s["step"], "")]
        kept = [s["id"] for s in got if not s["lost"]]
        # A resume whose node the agent finished first is stale: no session is owed it.
        carrying = [s["outcome"] for s in launches if c["body"] in prompts[s["key"]]]
        stale = bool(carrying) and all(o == "stale" for o in carrying)
        if step["outcome"] == "resumed" and ((not got and not stale) or len(kept) > 1):
            out.append(f"comment {c['id']} (resumed) reached sessions {got}")
    return out
