"""A helper's hostile review of issue 34's statement cuts (commits 8b54e35 .. e9b0d42): races
between the agent door's one-statement `graph complete`, a visit's claim that returned the
item's queue, the one-statement registration, and the rest. Each test failed on the commit
named in it and passes since the fix: on PostgreSQL a visit reads its queue after its claim
(44337c4), and a phase's relabel there is a delete and an insert that cannot conflict."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from runtime_helpers import child_env

REF = "local:acme/app#1"

#: One process of the race: `door` queues done steps as an agent's `graph complete` does
#: with nobody holding the claim (Store.queue_unclaimed, after the check's read in the
#: door's batch); `visit` claims the item as a poll visit does (db.batched, Store.claim)
#: and compares the queue the claim returned with what is pending once it holds the claim.
RACE = textwrap.dedent('''
    import json, sys, time
    from the_loop.runtime.db import open_database
    from the_loop.runtime.stepactions import StepAction
    from the_loop.runtime.store import Store

    dsn, role, seconds, ref = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    db = open_database(dsn)
    store = Store(db)
    deadline = time.monotonic() + seconds
    if role == "door":
        ok = i = 0
        while time.monotonic() < deadline:
            i += 1
            with db.batched():
                w = store.work(ref)
                if w["claim"]:
                    continue
                if store.queue_unclaimed(f"done:{i}", ref, StepAction.DONE, {
                        "node": "write", "epoch": 1, "actor": "agent", "summary": ""}, w):
                    ok += 1
        print(json.dumps({"queued": ok}))
        raise SystemExit(0)
    claims, missed = 0, []
    while time.monotonic() < deadline and not missed:
        with db.batched():
            if not store.claim(ref):
                continue
            claims += 1
            store.next_step(ref)  # the queue the visit runs from (the claim's, or read)
            returned = {s.key for s in db.memo().get(("queue", ref), [])}
            # Under the claim nobody queues a done step (it needs claim=''): whatever
            # is pending now was committed before this claim took the row.
            pending = {r["key"] for r in db._pg.execute(
                "SELECT key FROM steps WHERE ref=? AND state='pending'", (ref,))}
            missed = sorted(pending - returned)
            db._pg.execute("UPDATE steps SET state='done' WHERE ref=?", (ref,))
            store.release(ref)
    print(json.dumps({"claims": claims, "missed": missed}))
''')


def race(tmp_path: Path, pg_dsn: str, script: str, rival: str) -> dict[str, Any]:
    """Run `script` as two real processes on an item at an agent node: `rival` for 6 s and
    `visit` for 5; what the visit reports."""
    from the_loop.runtime.db import open_database

    db = open_database(pg_dsn)
    db.conn.execute("INSERT INTO work(ref, state, arm_seq, node, session_id, epoch, updated) "
                    "VALUES (?, 'running', 1, 'write', 'S', 1, 0)", (REF,))
    db.close()
    path = tmp_path / f"{rival}.py"
    path.write_text(script, encoding="utf-8")
    argv = [sys.executable, str(path), pg_dsn]
    other = subprocess.Popen([*argv, rival, "6", REF], env=child_env(), text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    visit = subprocess.run([*argv, "visit", "5", REF], env=child_env(), text=True,
                           capture_output=True, timeout=120, check=False)
    other.kill()
    other.communicate()
    assert visit.returncode == 0, visit.stderr
    return dict(json.loads(visit.stdout))


def test_a_done_step_the_door_queued_before_the_claim_is_in_the_queue_the_claim_returns(
        tmp_path: Path, pg_dsn: str) -> None:
    """8b54e35 + 61bae44 on PostgreSQL: the door's INSERT ... SELECT ... FOR UPDATE locks the
    work row without changing it, so a claim whose statement began (its READ COMMITTED
    snapshot taken) while the door's transaction was open, and reached the row just after
    it committed, takes the row (no update to re-check) and returns the pending steps of
    its older snapshot: the door's done step is missing from the queue the visit runs
    from, though it was committed before the claim and nobody can queue one after it.
    A visit that then writes (an input recorded) decides from that queue: check_session
    finds nothing pending, respawns the node whose session finished -- or, after one
    respawn, blocks the item, and its done step is then dropped as stale."""
    got = race(tmp_path, pg_dsn, RACE, "door")
    assert got["claims"] > 100, got
    assert got["missed"] == [], (
        f"the claim returned a queue without the done step(s) {got['missed']} the door "
        "had committed before it")


#: The other race: `slow` is an owner whose lease has lapsed (expiry < 0: as one paused past
#: it, or whose heartbeat stopped) and that nobody has taken over yet, so its commits are
#: still its own: it queues a step, commits, finishes it and gives the claim up in its
#: visit's last transaction (`_seal`). `visit` claims as a poll visit does and compares the
#: queue its claim returned with the steps finished before that claim.
LAPSED = textwrap.dedent('''
    import json, random, sys, time
    from the_loop.runtime.db import Fenced, open_database
    from the_loop.runtime.stepactions import StepAction
    from the_loop.runtime.store import Store

    dsn, role, seconds, ref = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    db = open_database(dsn)
    deadline = time.monotonic() + seconds
    if role == "slow":
        store = Store(db, expiry=-1.0)
        i = 0
        while time.monotonic() < deadline:
            i += 1
            try:
                with db.batched():
                    if not store.claim(ref):
                        continue
                    try:
                        with db.transaction() as conn:
                            store.add_step(conn, f"done:{i}", ref, StepAction.DONE, {
                                "node": "write", "epoch": 1, "actor": "agent",
                                "summary": ""})
                        db.settle()
                        store.finish(store.next_step(ref), "advanced")
                    finally:
                        store.release(ref)  # the finish commits with the release
            except Fenced:
                pass  # taken over before it committed: it wrote nothing
        raise SystemExit(0)
    store = Store(db)
    claims, again = 0, []
    while time.monotonic() < deadline and not again:
        time.sleep(random.random() * 0.004)
        with db.batched():
            if not store.claim(ref):
                continue
            claims += 1
            store.next_step(ref)  # the queue the visit runs from (the claim's, or read)
            returned = {s.key for s in db.memo().get(("queue", ref), [])}
            # Under this claim nobody else finishes a step (a finish's commit is fenced):
            # what is done now was done before the claim took the row.
            done = {r["key"] for r in db._pg.execute(
                "SELECT key FROM steps WHERE ref=? AND state='done'", (ref,))}
            again = sorted(returned & done)
            store.release(ref)
    print(json.dumps({"claims": claims, "again": again}))
''')


def test_a_claim_does_not_return_as_pending_a_step_finished_before_it(
        tmp_path: Path, pg_dsn: str) -> None:
    """61bae44 on PostgreSQL: a claim whose statement began while the lapsed owner's last
    transaction (its finishes and its release) was open, and reached the row once that
    committed, re-checks the row (READ COMMITTED re-reads an updated row) and takes it --
    but the pending steps its RETURNING reads come from the statement's older snapshot: a
    step the last owner ran and finished comes back as pending, and this visit runs it
    again (its hooks asked again, its effect done twice). Before, the queue was read by a
    statement after the claim had committed."""
    got = race(tmp_path, pg_dsn, LAPSED, "slow")
    assert got["claims"] > 20, got
    assert got["again"] == [], (
        f"the claim returned step(s) {got['again']} as pending, finished before it")


def test_a_phase_relabel_goes_through_while_a_person_adds_the_same_label(pg_dsn: str) -> None:
    """7fcc691 on PostgreSQL: the rename's NOT EXISTS reads the labels as of its statement's
    start; a person's `items label <ref> loop:review` in flight (its row not committed yet)
    is not seen, the UPDATE then waits on that row's key and, once it commits, fails with
    a unique violation -- the phase step raises (its visit's uncommitted writes rolled back,
    an attempt counted: three and the item is blocked). The remove-then-add it replaced
    (INSERT ... ON CONFLICT DO NOTHING) went through."""
    import threading

    import psycopg

    from the_loop.runtime.db import open_database
    from the_loop.runtime.tracker import LocalTracker

    db = open_database(pg_dsn)
    try:
        tracker = LocalTracker(db, "acme/app")
        ref = tracker.add("Login page", labels=["loop:writing"])
        [item] = db.conn.execute("SELECT id FROM items").fetchall()
        errors: list[BaseException] = []
        with psycopg.connect(pg_dsn) as person:  # its label's transaction, not committed yet
            person.execute("INSERT INTO labels(item, label) VALUES (%s, 'loop:review') "
                           "ON CONFLICT DO NOTHING", (item["id"],))

            def relabel() -> None:
                try:
                    tracker.relabel(ref, "loop:writing", "loop:review")
                except BaseException as exc:  # reported below
                    errors.append(exc)
            t = threading.Thread(target=relabel)
            t.start()
            t.join(0.5)  # waiting on the person's row
            person.commit()
            t.join(10)
        assert not errors, f"the phase's relabel failed: {errors[0]!r}"
        assert tracker.get(ref, comments=False).labels == ["loop:review"]
    finally:
        db.close()
