"""Helpers for the runtime tests: a loop folder, the CLI, the log and the db.

`LoopDir(tmp_path)` writes a `cli-config.yaml` (a recording harness by default), runs the
CLI (the daemons in a fresh interpreter, one-shot commands in this one), reads
`events.jsonl` and the tracker, waits for the harness processes the loop launched, and
kills what is left at `close()` (use it as a context manager so a failing test leaks
nothing).
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from contextlib import closing, suppress
from pathlib import Path
from typing import Any

from cli_helpers import PYCACHE, in_process
from the_loop.events import read_events

#: A harness that records what it was launched with: one JSON line per launch in argv[1]
#: (stdin, the THE_LOOP_* environment, its cwd), then says so on stdout (the session log).
RECORD_HARNESS = '''\
import json, os, sys
prompt = sys.stdin.read()
env = {k: v for k, v in os.environ.items() if k.startswith("THE_LOOP_")}
with open(sys.argv[1], "a", encoding="utf-8") as f:
    f.write(json.dumps({"prompt": prompt, "env": env, "cwd": os.getcwd()}) + "\\n")
print(f"recorder: got {len(prompt)} characters for {env.get('THE_LOOP_WORK_ITEM')}")
'''

#: A hook that records every context it sees (facts and decisions) as JSON lines in `out`.
#: Declare it with `recorder_entry(path)`; read back with `LoopDir.seen()`.
RECORDER_HOOK = '''\
import dataclasses, json
from the_loop.sdk.hooks import LifecycleHooks


class Recorder(LifecycleHooks):
    def __init__(self, out):
        self.out = out

    def _record(self, ctx):
        with open(self.out, "a", encoding="utf-8") as f:
            f.write(json.dumps({"point": ctx.POINT, **dataclasses.asdict(ctx)}) + "\\n")

    def work_item_start(self, ctx):
        self._record(ctx)

    def session_spawn(self, ctx):
        self._record(ctx)

    def session_spawned(self, ctx):
        self._record(ctx)

    def waiting_for_input(self, ctx):
        self._record(ctx)

    def input_received(self, ctx):
        self._record(ctx)

    def phase_changed(self, ctx):
        self._record(ctx)

    def work_item_complete(self, ctx):
        self._record(ctx)
'''

#: A short graph: one agent node, one human gate, done (fewer processes than the builtin).
SHORT_GRAPH = """\
start: write
nodes:
  - {name: write, phase: writing, actor: agent, prompt: "Write {title} ({ref})."}
  - {name: review, phase: review, actor: human,
     request: "GRAPH-REQUEST: review the draft, reply /approve or /reject."}
  - {name: done, phase: done, terminal: true}
edges:
  - {from: write, outcome: done, to: review}
  - {from: review, outcome: approved, to: done}
  - {from: review, outcome: rejected, to: write}
"""

HARNESSES = {
    "record": "[python3, {script}, {out}]",
    "demo": "[python3, -m, the_loop.demo.agent]",
    "sleep": "[python3, -c, 'import time; time.sleep(120)']",
}

MARKER_RE = re.compile(r"\n\n<!-- the-loop:[^>]*-->$")


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a the-loop child process: this one's without any THE_LOOP_
    setting, its bytecode cached in `PYCACHE`, then `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("THE_LOOP_")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return {**env, "PYTHONPYCACHEPREFIX": str(PYCACHE), **extra}

#: Commands `LoopDir.cli` runs in this process: they launch nothing and only write steps.
ONE_SHOT = frozenset({"items", "reply", "ask", "graph", "start", "events", "policy", "hooks"})
FAILPOINT = "THE_LOOP_FAILPOINT"


class LoopDir:
    """One loop's folder: cli-config.yaml, stateDir, hooks, and the processes it started."""

    def __init__(self, root: Path, extra: str = "", *, harness: str = "record",
                 graph: str = "short", channels: str = "", database: str = "") -> None:
        self.root = root
        self.database = database  # a postgresql:// DSN, or '' for SQLite in stateDir
        self.config = root / "cli-config.yaml"
        self.state = root / ".the-loop"
        self.home = root / "_home"
        self.home.mkdir(parents=True, exist_ok=True)
        self.recorded = root / "harness.jsonl"
        self.script = root / "record_harness.py"
        self.script.write_text(RECORD_HARNESS, encoding="utf-8")
        self.channel = self.state / "channel.jsonl"
        self.write_config(extra, harness=harness, graph=graph, channels=channels)

    # ------------------------------------------------------------------ setup
    def write_config(self, extra: str = "", *, harness: str = "record", graph: str = "short",
                     channels: str = "") -> Path:
        """(Re)write cli-config.yaml; `extra` is appended YAML (e.g. a hooks: list)."""
        if graph == "short":
            (self.root / "graph.yaml").write_text(SHORT_GRAPH, encoding="utf-8")
            graph = "graph.yaml"
        command = HARNESSES[harness].format(script=json.dumps(str(self.script)),
                                            out=json.dumps(str(self.recorded)))
        text = (
            "loop: acme\nstateDir: .the-loop\ntracker: {kind: local, repository: acme/app}\n"
            f"harness: {harness}\nharnesses:\n  - name: {harness}\n    command: {command}\n"
            f"    model: m-1\ngraph: {graph}\n"
        )
        text += channels or "channels:\n  - {kind: file, path: channel.jsonl}\n"
        if self.database:
            text += f"database: {self.database}\n"
        text += textwrap.dedent(extra)
        self.config.write_text(text, encoding="utf-8")
        return self.config

    def write(self, rel: str, text: str) -> Path:
        """A file next to cli-config.yaml (a hook module, a policy, a graph)."""
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        return path

    # ------------------------------------------------------------------ the CLI
    def env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        return child_env(HOME=str(self.home), **(extra or {}))

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "the_loop", "--config", str(self.config), *args]

    def cli(self, *args: str, env: dict[str, str] | None = None, ok: bool = True,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run the CLI to completion; with ok=True a non-zero exit fails the test.

        A one-shot command (`ONE_SHOT`) runs in this process; a daemon, `demo`, and any
        run with a failpoint or a PYTHONPATH of its own run in a fresh interpreter."""
        extra = env or {}
        if args and args[0] in ONE_SHOT and not {"PYTHONPATH", FAILPOINT} & set(extra) \
                and args[:2] != ("hooks", "serve"):
            done = in_process(self.argv(*args)[3:], cwd=self.root, stdin="",
                              env=self.env(extra))
        else:
            done = subprocess.run(self.argv(*args), cwd=self.root, env=self.env(extra),
                                  text=True, capture_output=True, timeout=timeout, check=False)
        if ok and done.returncode != 0:
            raise AssertionError(f"the-loop {' '.join(args)} exited {done.returncode}:\n"
                                 f"{done.stdout}\n{done.stderr}")
        return done

    def run(self, *args: str) -> tuple[int, str, str]:
        """The CLI in this process (for commands that launch nothing): (code, out, err)."""
        done = in_process(["--config", str(self.config), *args], cwd=self.root, stdin="",
                          env=self.env())
        return done.returncode, done.stdout, done.stderr

    def ok(self, *args: str) -> str:
        """`run` that must succeed; returns stdout."""
        code, out, err = self.run(*args)
        assert code == 0, f"the-loop {' '.join(args)} exited {code}: {err}"
        return out

    def popen(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        # Ctrl-C reaches the child as it would from a terminal, even when this run started
        # with SIGINT ignored (as CI may: an ignored signal stays ignored across exec).
        return subprocess.Popen(self.argv(*args), cwd=self.root, env=self.env(env), text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))

    def add(self, title: str = "Add a login page", *args: str) -> str:
        """`items add` (in-process: it launches nothing); returns the ref."""
        code, out, err = self.run("items", "add", title, *args)
        assert code == 0, err
        return out.strip()

    def start(self, ref: str, actor: str = "alice") -> None:
        """`start REF` (in-process: arming launches nothing; the poller starts it)."""
        code, out, err = self.run("start", ref, "--actor", actor)
        assert code == 0 and "armed" in out, err

    def poll(self, *, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """`poll --once`, then wait for every session the loop has launched to end."""
        done = self.cli("poll", "--once", env=env)
        self.wait_sessions()
        return done

    def reply(self, ref: str, text: str, actor: str = "alice") -> str:
        """`reply` (it writes the input on the item), then one poll delivers it; returns
        `REF: outcome` as `reply --wait` would print it (without a refusal's reason)."""
        done = self.cli("reply", ref, text, "--actor", actor)
        cid = int(done.stdout.split("comment ", 1)[1].split()[0])
        self.poll()
        [step] = self.query("SELECT outcome FROM steps WHERE key LIKE ?", f"input:%:{cid}")
        return f"{ref}: {step['outcome']}"

    def complete(self, ref: str, *args: str) -> str:
        """`graph complete` as the agent would run it, then one poll enters the next node."""
        out = self.cli("graph", "complete", "--work-item", ref, *args).stdout.strip()
        self.poll()
        return out

    # ------------------------------------------------------------------ reading
    def events(self, pattern: str = "") -> list[dict[str, Any]]:
        path = self.state / "events.jsonl"
        records = list(read_events(path)) if path.exists() else []
        return [r for r in records if not pattern or r["event"] == pattern]

    def names(self) -> list[str]:
        return [r["event"] for r in self.events()]

    def points(self, point: str = "") -> list[dict[str, Any]]:
        return [r for r in self.events("lifecycle.point") if not point or r["point"] == point]

    def db(self) -> sqlite3.Connection:
        conn = sqlite3.connect(str(self.state / "loop.db"), timeout=30)
        conn.row_factory = sqlite3.Row
        return conn

    def query(self, sql: str, *params: Any) -> list[dict[str, Any]]:
        if self.database:
            return pg_query(self.database, sql, *params)
        if not (self.state / "loop.db").exists():
            return []
        with closing(self.db()) as conn:
            return [dict(r) for r in conn.execute(sql, params).fetchall()]

    def work(self, ref: str) -> dict[str, Any]:
        rows = self.query("SELECT * FROM work WHERE ref=?", ref)
        return rows[0] if rows else {}

    def item(self, ref: str) -> dict[str, Any]:
        """The item as `items show --json` gives it, read through the tracker in-process."""
        from the_loop.runtime.db import open_database
        from the_loop.runtime.tracker import LocalTracker

        db = open_database(self.database or self.state / "loop.db")
        try:
            return LocalTracker(db, "acme/app").get(ref).to_json()
        finally:
            db.close()

    def comments(self, ref: str, author: str = "the-loop", *, raw: bool = False) -> list[str]:
        """Comments by `author` as a reader sees them (the loop's hidden idempotency
        marker, an HTML comment a tracker does not render, dropped unless raw=True)."""
        bodies = [c["body"] for c in self.item(ref)["comments"] if c["author"] == author]
        return bodies if raw else [MARKER_RE.sub("", b) for b in bodies]

    def add_recorder(self) -> str:
        """Write the recording hook; returns its hooks: entry (YAML list item)."""
        self.write("hooks/recorder.py", RECORDER_HOOK)
        out = json.dumps(str(self.root / "seen.jsonl"))
        return f"  - {{name: recorder, path: hooks/recorder.py, with: {{out: {out}}}}}\n"

    def seen(self, point: str = "") -> list[dict[str, Any]]:
        """The contexts the recording hook saw, in order."""
        path = self.root / "seen.jsonl"
        records = [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []
        return [r for r in records if not point or r["point"] == point]

    def launches(self) -> list[dict[str, Any]]:
        """What the recording harness received, one record per launch."""
        if not self.recorded.exists():
            return []
        return [json.loads(line) for line in self.recorded.read_text().splitlines() if line]

    def channel_messages(self) -> list[dict[str, Any]]:
        if not self.channel.exists():
            return []
        return [json.loads(line) for line in self.channel.read_text().splitlines() if line]

    # ------------------------------------------------------------------ processes
    def session_pids(self) -> list[int]:
        return [int(r["pid"]) for r in self.query("SELECT pid FROM sessions")]

    def wait_sessions(self, timeout: float = 30.0) -> None:
        """Until every harness process the loop registered has ended (new ones included)."""
        deadline = time.monotonic() + timeout
        while True:
            live = [pid for pid in self.session_pids() if alive(pid)]
            if not live:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"harness processes still running after {timeout} s: "
                                     f"{live}")
            time.sleep(0.02)

    def close(self) -> None:
        """Kill whatever the loop launched and is still running, and wait for it."""
        for pid in self.session_pids():
            if alive(pid):
                with suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
        until(lambda: not any(alive(p) for p in self.session_pids()), timeout=10)

    def __enter__(self) -> LoopDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()



def on(ld: LoopDir, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """`sql` on the loop's database as another process would run it (autocommit): its rows."""
    if ld.database:
        import psycopg

        with psycopg.connect(ld.database, autocommit=True) as conn:
            cur = conn.execute(sql.replace("?", "%s"), params)  # type: ignore[arg-type]
            return list(cur.fetchall()) if cur.description else []
    conn = sqlite3.connect(ld.state / "loop.db", isolation_level=None, timeout=30)
    try:
        return [tuple(r) for r in conn.execute(sql, params).fetchall()]
    finally:
        conn.close()

def pg_query(dsn: str, sql: str, *params: Any) -> list[dict[str, Any]]:
    """`sql` (sqlite3's `?` placeholders) on PostgreSQL, rows as dicts ([] before the loop
    made its tables)."""
    import psycopg
    from psycopg.rows import dict_row

    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as conn:
        if conn.execute("SELECT to_regclass('work') AS t").fetchone()["t"] is None:  # type: ignore[index]
            return []
        return conn.execute(sql.replace("%", "%%").replace("?", "%s"), params).fetchall()


def alive(pid: int) -> bool:
    """Whether a process is running (a zombie or a missing pid is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def until(cond: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    """Poll `cond` until it is truthy; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def before(names: list[str], first: str, then: str, start: int = 0) -> bool:
    """The first `first` at or after `start` comes before the first `then` after it."""
    i = names.index(first, start)
    return then in names[i + 1:]


def order_of(records: list[dict[str, Any]], key: Callable[[dict[str, Any]], bool]) -> int:
    """Index of the first record matching `key` (ValueError when none)."""
    for i, r in enumerate(records):
        if key(r):
            return i
    raise ValueError("no matching record")


def readline(proc: subprocess.Popen[str], timeout: float = 30.0) -> str:
    """The next line of a process's stdout, failing (not hanging) after `timeout` s."""
    import select

    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    if not ready:
        raise AssertionError(f"no output from {proc.args!r} within {timeout} s")
    return proc.stdout.readline()


def iter_lines(path: Path) -> Iterator[str]:
    yield from (path.read_text().splitlines() if path.exists() else [])
