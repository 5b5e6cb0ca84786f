"""Round 4, sixth stop: attacks on the loop's database path as a hostile environment would
make them, through real `the-loop poll` daemons and `poll --once` subprocesses, real SQLite
files, real PostgreSQL and SIGKILL / SIGSTOP of real processes.

- A daemon whose decision-log rows the database refuses (a trigger), for a while and then
  every few rows: every item still finishes, the refusals are `decisions.failed` events,
  no traceback, no item stuck or blocked.
- PostgreSQL: a visit whose workspace checkout outlasts the lease does not stop its host's
  heartbeat, so no other host takes the live host for dead and doubles its sessions.
- SQLite: two pollers on one state folder, one SIGKILLed at random moments, agents asking
  and completing through the door and as one-shots: nothing launched twice, lost or stuck,
  `state check` clean, one readable decision-log row per recorded point.
- A state folder under a path with `#`, `?` or `%`: `policy replay` reads its log (and
  makes no stray file outside it).
- PostgreSQL: a host stopped (SIGSTOP) inside a visit's open transaction does not hold the
  item's row locked for ever: another host takes it over; the stopped one, resumed, writes
  nothing for it.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from hosts_helpers import GRAPH as ONE_NODE_GRAPH
from runtime_helpers import LoopDir, on, until
from the_loop.config import read_config
from the_loop.runtime.service import Loop

#: An agent that reports its node complete as soon as it starts (a one-shot, as agents do).
COMPLETE_AGENT = '''\
import json, os, subprocess, sys
prompt = sys.stdin.read()
with open(sys.argv[1], "a", encoding="utf-8") as f:
    f.write(json.dumps({"session": os.environ["THE_LOOP_SESSION"], "prompt": prompt,
                        "work_item": os.environ["THE_LOOP_WORK_ITEM"]}) + "\\n")
done = subprocess.run([sys.executable, "-m", "the_loop", "graph", "complete", "--summary",
                       "ok"], capture_output=True, text=True, timeout=60)
with open(sys.argv[1] + ".out", "a", encoding="utf-8") as f:
    f.write(json.dumps({"code": done.returncode, "err": done.stderr[-2000:]}) + "\\n")
'''



def completing(ld: LoopDir, extra: str = "") -> None:
    """`ld` with a one-node graph whose agent completes it at once."""
    ld.write("graph1.yaml", ONE_NODE_GRAPH)
    script = ld.write("complete_agent.py", COMPLETE_AGENT)
    ld.write_config(extra, graph="graph1.yaml")
    text = ld.config.read_text(encoding="utf-8")
    command = f"[{json.dumps(sys.executable)}, {json.dumps(str(script))}, " \
              f"{json.dumps(str(ld.recorded))}]"
    text = text.replace(text.split("command: ", 1)[1].split("\n", 1)[0], command, 1)
    ld.config.write_text(text + "maxSessions: 8\n", encoding="utf-8")


def refuse(ld: LoopDir, *, every: int = 0) -> None:
    """A trigger that refuses decision-log rows: all of them, or (`every`) about one in
    `every` (PostgreSQL: by a sequence, which a rollback does not undo; SQLite: at random)."""
    if ld.database:
        when = "TRUE" if not every else f"mod(nextval('refusals'), {every}) = 0"
        if every:
            on(ld, "CREATE SEQUENCE IF NOT EXISTS refusals")
        on(ld, "CREATE OR REPLACE FUNCTION refuse_row() RETURNS trigger LANGUAGE plpgsql AS "
               f"$$ BEGIN IF {when} THEN RAISE EXCEPTION 'the log is read-only today'; "
               "END IF; RETURN NEW; END $$")
        on(ld, "CREATE TRIGGER refuse BEFORE INSERT ON decision_log "
               "FOR EACH ROW EXECUTE FUNCTION refuse_row()")
        return
    when = "" if not every else f" WHEN abs(random()) % {every} = 0"
    on(ld, f"CREATE TRIGGER refuse BEFORE INSERT ON decision_log{when} "
           "BEGIN SELECT RAISE(ABORT, 'the log is read-only today'); END")


def unrefuse(ld: LoopDir) -> None:
    on(ld, "DROP TRIGGER refuse ON decision_log" if ld.database else "DROP TRIGGER refuse")


def stop(proc: Any) -> str:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    return str(err)


def done_states(ld: LoopDir, refs: list[str]) -> dict[str, str]:
    return {ref: str(ld.work(ref).get("state")) for ref in refs}


@pytest.mark.parametrize("every", [0, 3])
def test_a_daemon_whose_log_rows_are_refused_finishes_every_item(
        tmp_path: Path, database: str, every: int) -> None:
    """A running `poll` daemon: the decision log's rows are refused (all, or one in three
    as it goes on), then accepted again. Every item is walked to done, once; no item is
    blocked by the log; each refused row it did not write again is a `decisions.failed`
    event; the daemon prints no traceback and no failed cycle."""
    with LoopDir(tmp_path, database=database) as ld:
        completing(ld)
        first = ld.add("Item 0")
        ld.start(first)
        until(lambda: ld.cli("poll", "--once") and ld.work(first).get("state") == "done",
              timeout=60, what="the first item done (the log's table made)")
        refuse(ld, every=every)
        refs = [ld.add(f"Item {i}") for i in range(1, 9)]
        for ref in refs:
            ld.start(ref)
        daemon = ld.popen("poll", "--interval", "0.1")
        try:
            if not every:
                until(lambda: ld.events("decisions.failed"), timeout=60,
                      what="a refused row recorded")
                unrefuse(ld)
            until(lambda: set(done_states(ld, refs).values()) <= {"done", "blocked"}
                  and not ld.query("SELECT key FROM steps WHERE state='pending'"),
                  timeout=120, what=f"every item settled: {done_states(ld, refs)}")
        finally:
            err = stop(daemon)
        failed = [(e["work_item"], e["step"], e["attempts"], e["error"])
                  for e in ld.events("step.failed")]
        assert done_states(ld, refs) == dict.fromkeys(refs, "done"), (failed, err)
        for _, _, attempts, error in failed:  # a refused record is not the step's failure
            assert attempts == 0 and "the decision log refused" in error, failed
        assert "Traceback" not in err and "cycle failed" not in err, err
        launched = [r["work_item"] for r in ld.launches()]
        assert sorted(launched) == sorted([first, *refs]), launched
        outs = [json.loads(x) for x in Path(str(ld.recorded) + ".out").read_text().splitlines()]
        assert [o for o in outs if o["code"]] == []  # every agent's graph complete went in
        assert ld.events("decisions.failed"), "no refusal was recorded"
        for e in ld.events("decisions.failed"):
            assert "the log is read-only today" in e["error"], e


#: A post-checkout hook: a slow checkout (a big repository) once `flag` exists; it marks
#: `mark` when it starts.
SLOW_CHECKOUT = """#!/bin/sh
if [ -e {flag} ]; then
  touch {mark}
  sleep 6
fi
exit 0
"""


def slow_repository(root: Path, flag: Path, mark: Path) -> Path:
    import subprocess

    repo = root / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True, timeout=60)
    (repo / "README").write_text("hello\n", encoding="utf-8")
    subprocess.run([*git, "add", "README"], check=True, timeout=60)
    subprocess.run([*git, "commit", "-q", "-m", "first"], check=True, timeout=60)
    hook = repo / ".git" / "hooks" / "post-checkout"
    hook.write_text(SLOW_CHECKOUT.format(flag=flag, mark=mark), encoding="utf-8")
    hook.chmod(0o755)
    return repo


def test_a_slow_workspace_checkout_does_not_stop_the_hosts_heartbeat(
        tmp_path: Path, pg_dsn: str) -> None:
    """PostgreSQL: host A's visit of a new item makes its git worktree, which takes longer
    than the lease (a big checkout). A is alive and beating all along: host B, started
    meanwhile, must not judge A dead and take over A's other item, whose session runs on A
    (a second live session of that item). (The slow item itself is anyone's once its claim
    lapses: its transaction ends at the lease.) The read that opened the visit's transaction
    locks the item's work row, and A's heartbeat renews every claim of A's in one UPDATE:
    it must not wait for that row through the checkout."""
    from test_hosts import walk

    from hosts_helpers import Host
    from runtime_helpers import pg_query

    flag, mark = tmp_path / "slow", tmp_path / "in-checkout"
    repo = slow_repository(tmp_path, flag, mark)
    a = Host(tmp_path, "host-a", pg_dsn, work=60.0, expiry=2.0,
             extra=f"repository: {json.dumps(str(repo))}\n")
    b = Host(tmp_path, "host-b", pg_dsn, work=0.2, expiry=2.0)
    try:
        [running] = walk([a], 1)
        a.start()
        until(lambda: pg_query(pg_dsn, "SELECT id FROM sessions WHERE ref=?", running),
              timeout=60, what="A's session of the first item")
        flag.touch()
        [slow] = walk([a], 1)
        until(mark.exists, timeout=60, what="A inside the second item's checkout")
        b.start()
        until(lambda: pg_query(pg_dsn, "SELECT id FROM sessions WHERE ref=?", slow),
              timeout=60, what="the second item's session")
        sessions = pg_query(pg_dsn, "SELECT ref, host, lost FROM sessions WHERE ref=?",
                            running)
        assert [(s["host"], s["lost"]) for s in sessions] == [("host-a", 0)], sessions
        assert running not in [e["work_item"] for e in b.events("session.launched")]
    finally:
        for h in (a, b):
            h.stop()



def test_a_host_stopped_inside_a_visits_transaction_holds_no_item_hostage(
        tmp_path: Path, pg_dsn: str) -> None:
    """PostgreSQL: host A is stopped (SIGSTOP) while a transaction of its is open: mostly a
    visit's (launching, its session_spawn decision written and the item's work row locked),
    on a loaded machine sometimes its first heartbeat's (which ended the daemon until this
    stop: test_round4_seventh_attacks.py). B takes the item over once A's lease lapses and
    finishes it; A, resumed, goes on polling and writes nothing for it (its transaction's
    locks were not the item's for ever, and its claim is stale)."""
    import signal as signals

    from test_hosts import walk

    from hosts_helpers import Host, all_done, broken
    from runtime_helpers import pg_query

    a = Host(tmp_path, "host-a", pg_dsn, work=0.2, expiry=2.0)
    b = Host(tmp_path, "host-b", pg_dsn, work=0.2, expiry=2.0)
    idle = ("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND state = 'idle in transaction'")
    try:
        [ref] = walk([a], 1)
        a.start(env={"THE_LOOP_PAUSEPOINT": "launch-room=8"})  # holds its transaction open
        until(lambda: pg_query(pg_dsn, idle), timeout=60, what="A inside the launch")
        assert a.proc is not None
        a.proc.send_signal(signals.SIGSTOP)  # its checkout goes on; A does not
        b.start()
        until(lambda: all_done(pg_dsn, [ref]), timeout=60,
              what=f"B finishing the item A holds: {pg_query(pg_dsn, 'SELECT * FROM work')}")
        until(lambda: not pg_query(pg_dsn, "SELECT id FROM sessions WHERE exited=0"),
              timeout=30, what="B's session's end recorded")
        tables = {"work": "SELECT ref, state, node, session_id, host, fence FROM work",
                  "sessions": "SELECT id, ref, host, lost, exited FROM sessions ORDER BY id",
                  "steps": "SELECT key, state, outcome, decisions FROM steps ORDER BY seq",
                  "comments": "SELECT id, body FROM comments ORDER BY id",
                  "log": "SELECT id, point, host FROM decision_log ORDER BY id"}
        before = {name: pg_query(pg_dsn, sql) for name, sql in tables.items()}
        sessions = before["sessions"]
        cycles = len(a.events("poll.cycle"))
        a.proc.send_signal(signals.SIGCONT)
        # Resumed, A is fenced out, or finds its connection ended by the server (its visit
        # fails as the database's error) and then the item B's: either way it goes on.
        try:
            until(lambda: len(a.events("poll.cycle")) > cycles + 2, timeout=90,
                  what="A's cycles after it was resumed")
        except AssertionError as exc:
            said = (a.dir / f"poll-{a.started}.err").read_text()[-3000:]
            tail = (a.dir / "state" / "events.jsonl").read_text().splitlines()[-15:]
            raise AssertionError(f"{exc}\nA's stderr:\n{said}\nA's last events:\n"
                                 + "\n".join(tail)) from None
        assert {name: pg_query(pg_dsn, sql) for name, sql in tables.items()} == before
        assert [s["host"] for s in sessions] == ["host-b"]
    finally:
        if a.proc is not None:
            a.proc.send_signal(signal.SIGCONT)
        for h in (a, b):
            h.stop()
    assert broken([a, b], [ref], pg_dsn) == []



#: Asks its question first (a session without input), completes its node once answered;
#: each command through the poller's door or, at random, as a one-shot of its own.
ASKING_AGENT = '''\
import json, os, random, subprocess, sys
prompt = sys.stdin.read()
env = dict(os.environ)
door = random.random() < 0.5 and "THE_LOOP_AGENT_DOOR" in env
if not door:
    env.pop("THE_LOOP_AGENT_DOOR", None)
answered = "Input from @" in prompt
argv = ["graph", "complete", "--summary", "ok"] if answered else ["ask", "Which users first?"]
done = subprocess.run([sys.executable, "-m", "the_loop", *argv], env=env, capture_output=True,
                      text=True, timeout=120)
with open(sys.argv[1], "a", encoding="utf-8") as f:
    f.write(json.dumps({"session": env["THE_LOOP_SESSION"], "work_item":
                        env["THE_LOOP_WORK_ITEM"], "prompt": prompt, "door": door,
                        "command": argv[0], "code": done.returncode,
                        "said": (done.stdout + done.stderr)[-2000:]}) + "\\n")
'''


def test_two_sqlite_pollers_one_killed_at_random_moments_with_asking_agents(
        tmp_path: Path) -> None:
    """SQLite: two `poll` daemons on one state folder, one of them SIGKILLed (and started
    again) at random moments; each item's agent asks, is answered, then completes, through
    the door or as one-shots. Every item done, each launch once, each answer delivered
    once, nothing pending or claimed, `state check` clean, and the decision log holds one
    readable row per recorded point, read alike by `policy replay`."""
    import random
    from collections import Counter

    from fault_helpers import broken

    rng = random.Random(int(os.environ.get("THE_LOOP_TEST_SEED", "4606")))
    with LoopDir(tmp_path) as ld:
        ld.write("graph1.yaml", ONE_NODE_GRAPH)
        script = ld.write("asking_agent.py", ASKING_AGENT)
        ld.write_config("hooks:\n" + ld.add_recorder(), graph="graph1.yaml")
        text = ld.config.read_text(encoding="utf-8")
        command = f"[{json.dumps(sys.executable)}, {json.dumps(str(script))}, " \
                  f"{json.dumps(str(ld.recorded))}]"
        text = text.replace(text.split("command: ", 1)[1].split("\n", 1)[0], command, 1)
        ld.config.write_text(text + "maxSessions: 8\n", encoding="utf-8")
        refs = [ld.add(f"Item {i}") for i in range(10)]
        for ref in refs:
            ld.start(ref)
        pollers = [ld.popen("poll", "--interval", "0.1"), ld.popen("poll", "--interval", "0.1")]
        errs: list[str] = []
        answered: set[str] = set()
        kills = 0
        try:
            next_kill = rng.uniform(0.2, 1.0)

            began = time.monotonic()
            while time.monotonic() - began < 90:
                states = done_states(ld, refs)
                if set(states.values()) == {"done"}:
                    break
                for ref, state in states.items():
                    if state == "waiting" and ref not in answered:
                        ld.ok("reply", ref, f"Admins first on {ref}.", "--actor", "bob")
                        answered.add(ref)
                if kills < 5 and time.monotonic() - began > next_kill:
                    victim = rng.randrange(2)
                    pollers[victim].kill()
                    errs.append(pollers[victim].communicate(timeout=30)[1])
                    pollers[victim] = ld.popen("poll", "--interval", "0.1")
                    kills += 1
                    next_kill += rng.uniform(0.2, 1.0)
                time.sleep(0.05)
            until(lambda: set(done_states(ld, refs).values()) == {"done"}, timeout=60,
                  what=f"every item done: {done_states(ld, refs)}")
            ld.wait_sessions()
        finally:
            errs += [stop(p) for p in pollers]
        for err in errs:
            assert "Traceback" not in err and "cycle failed" not in err, err
        assert broken(ld, dict.fromkeys(refs, "done"), kills=kills) == []
        records = ld.launches()
        # A command whose poller was killed under it says so (the agent may try again); a
        # session that ended without finishing its node is respawned.
        failed = [r["said"] for r in records if r["code"]]
        assert all("stopped before it answered" in said for said in failed), failed
        assert len(failed) <= kills, failed
        # Every item asked (it went waiting and was answered once), and the session that
        # completed it was given its own item's answer. (An asking session still running when
        # its answer arrives is ended, SIGTERM first, so it may not write a record of its own.)
        assert answered == set(refs), answered
        for r in records:
            if r["command"] == "graph":
                assert f"Admins first on {r['work_item']}." in r["prompt"], r
        assert {r["door"] for r in records} == {True, False}  # both ways taken
        completes = Counter(r["work_item"] for r in records if r["command"] == "graph")
        assert set(completes) == set(refs), completes
        check = ld.cli("state", "check", ok=False)
        assert check.returncode == 0, check.stdout + check.stderr
        rows = on(ld, "SELECT point, work_item FROM decision_log")
        recorded = Counter((p, s["ref"]) for s in ld.query("SELECT ref, decisions FROM steps")
                           for p in json.loads(s["decisions"]))
        logged = Counter((str(p), str(r)) for p, r in rows)
        assert recorded - logged == Counter(), (recorded, logged)  # every recorded point
        assert sum((logged - recorded).values()) <= kills, (recorded, logged)
        replay = json.loads(ld.cli("policy", "replay", "--json").stdout)
        assert (replay["replayed"], replay["unreadable"]) == (len(rows), []), replay


@pytest.mark.parametrize("name", ["C#", "what?", "50%25"])
def test_policy_replay_reads_the_log_of_a_state_folder_whose_path_has_uri_characters(
        tmp_path: Path, name: str) -> None:
    """A loop in a folder named `C#` (or with `?` or `%`): `policy replay` reads the points
    its loop.db holds (it read the log through a `file:` URI, in which `#` starts a fragment
    and `?` a query: it said there was no log yet, and made an empty file named after the
    path up to that character, outside the state folder)."""
    root = tmp_path / name / "loop"
    root.mkdir(parents=True)
    with LoopDir(root) as ld:
        ref = ld.add()
        ld.start(ref)
        ld.poll()
        rows = on(ld, "SELECT count(*) FROM decision_log")[0][0]
        assert rows > 0
        replay = json.loads(ld.cli("policy", "replay", "--json").stdout)
        assert replay["replayed"] == rows, replay
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


def test_a_slow_git_checkout_holds_no_lock_of_the_visit(tmp_path: Path) -> None:
    """SQLite: while a visit makes an item's git worktree (a big checkout takes as long as it
    takes), its writes so far are committed and the state folder's write lock is free, so
    every other process of the loop (another poller, a person's reply, an agent's command)
    writes meanwhile instead of waiting for the checkout."""
    flag, mark = tmp_path / "slow", tmp_path / "in-checkout"
    repo = slow_repository(tmp_path, flag, mark)
    flag.touch()
    with LoopDir(tmp_path / "loop", f"repository: {json.dumps(str(repo))}\n") as ld:
        ref = ld.add()
        ld.start(ref)
        poll = ld.popen("poll", "--once")
        try:
            until(mark.exists, timeout=60, what="the poller inside the item's checkout")
            other = sqlite3.connect(ld.state / "loop.db", timeout=0.5, isolation_level=None)
            try:
                other.execute("BEGIN IMMEDIATE")  # the write lock, at once
                other.execute("ROLLBACK")
                state = other.execute("SELECT state FROM work WHERE ref=?", (ref,)).fetchone()
            finally:
                other.close()
            assert state == ("running",)  # the visit's writes before the checkout: committed
        finally:
            poll.communicate(timeout=120)


def idle_limit(folder: Path, dsn: str) -> str:
    """The idle-transaction limit a loop with a 12 s lease on `dsn` runs its transactions
    under."""
    ld = LoopDir(folder, "lease: {expirySeconds: 12}\n", database=dsn)
    loop = Loop(read_config(ld.config), strict_hooks=True, source="test")
    try:
        got = loop.db.conn.execute("SHOW idle_in_transaction_session_timeout").fetchone()
    finally:
        loop.close()
    return str(got["idle_in_transaction_session_timeout"])


def test_the_loops_idle_transaction_limit_is_its_lease_unless_the_database_sets_a_shorter_one(
        tmp_path: Path, pg_dsn: str) -> None:
    """PostgreSQL: the loop's connections end a transaction left idle longer than the lease
    (set per connection, not as a startup option a pooler may refuse); a shorter limit the
    operator set (here in the DSN's own options) is kept."""
    from urllib.parse import quote

    assert idle_limit(tmp_path / "a", pg_dsn) == "12s"
    shorter = pg_dsn + ("&" if "?" in pg_dsn else "?") + "options=" + quote(
        "-c idle_in_transaction_session_timeout=1500")
    assert idle_limit(tmp_path / "b", shorter) == "1500ms"
