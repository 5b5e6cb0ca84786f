"""Crash-safety helpers: a harness that holds its session, a scripted walk, and the
invariants a crash must never break, read back from the database, the tracker, the harness's
own record and the recorder hook (shared by test_runtime_faults.py and scripts/soak.py).

`hold(ld, extra)` rewrites a `LoopDir`'s config so each session records what it was given
(one JSON line: session id, work item, prompt) and then stays alive for two minutes: a
session that ends on its own would be respawned by the poller and blur what a crash did.
With `asking=True` a first session instead asks the agent's question itself (`the-loop ask`
from inside the session), records, and ends; `agents_settled(ld)` says when every session
launched so far has recorded itself and each that asked has ended.
`broken(ld, expected)` returns one sentence per invariant a run broke (empty when none).
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from typing import Any

from runtime_helpers import HARNESSES, LoopDir, alive
from the_loop.runtime.harness import session_alive

#: Records its launch, then holds the session (and its lock) until it is killed. Asking
#: (argv[3]), a session whose prompt carries no person's input asks first and then ends.
HOLD_HARNESS = '''\
import json, os, subprocess, sys, time
prompt = sys.stdin.read()
record = {"session": os.environ.get("THE_LOOP_SESSION", ""), "prompt": prompt,
          "work_item": os.environ.get("THE_LOOP_WORK_ITEM", "")}
asks = sys.argv[3:] == ["ask"] and "Input from @" not in prompt
if asks:
    done = subprocess.run([sys.executable, "-m", "the_loop", "ask", "Which users first?"],
                          capture_output=True, text=True)
    record.update(asked=done.returncode == 0, said=(done.stdout + done.stderr).strip())
with open(sys.argv[1], "a", encoding="utf-8") as f:
    f.write(json.dumps(record) + "\\n")
if not asks:
    time.sleep(float(sys.argv[2]))
'''

#: Drops mallory's input and refuses the start of an item labelled `frozen`.
HOUSE_POLICY = """\
rules:
  - name: no-mallory
    on: input_received
    when: "actor == 'mallory'"
    set:
      proceed: false
      reason: "{{ actor }} may not talk to agents"
  - name: frozen
    on: work_item_start
    when: "contains(labels, 'frozen')"
    set:
      proceed: false
      reason: "the code is frozen"
"""

MARK_RE = re.compile(r"<!-- the-loop:([^>]*) -->")
ANSWER = "Admins first, then everyone else."


def hold(ld: LoopDir, extra: str = "", *, seconds: float = 120.0, policy: bool = True,
         asking: bool = False, recorder: bool = True) -> None:
    """Configure `ld` with the holding harness (`asking`: whose first session asks and
    ends), the recorder hook (unless not `recorder`) and the house policy (unless not
    `policy`)."""
    script = ld.root / "hold_harness.py"
    script.write_text(HOLD_HARNESS, encoding="utf-8")
    hooks = ld.add_recorder() if recorder else ""
    if policy:
        ld.write("policies/house.yaml", HOUSE_POLICY)
        hooks += "  - {name: house, policy: policies}\n"
    ld.write_config(("hooks:\n" + hooks if hooks else "") + extra, harness="sleep")
    python = json.dumps(sys.executable) if asking else "python3"  # asking runs the CLI
    use_harness(ld, f"[{python}, -S, {json.dumps(str(script))}, {json.dumps(str(ld.recorded))}, "
                    f"'{seconds:g}'{', ask' if asking else ''}]")


def use_harness(ld: LoopDir, command: str) -> None:
    """Give `ld`'s config (written with the `sleep` harness) the harness `command` instead
    (a YAML flow list)."""
    text = ld.config.read_text(encoding="utf-8")
    assert HARNESSES["sleep"] in text
    ld.config.write_text(text.replace(HARNESSES["sleep"], command), encoding="utf-8")


def agents_settled(ld: LoopDir) -> bool:
    """Every session launched so far (a lock file) has recorded itself or ended, and each
    that asked its question has ended: what a poll after it must cope with is in place."""
    sessions = ld.state / "sessions"
    records = {r["session"]: r for r in ld.launches()}
    for lock in sessions.glob("*.lock") if sessions.exists() else []:
        record = records.get(lock.stem)
        if (record is None or "asked" in record) and session_alive(sessions, lock.stem, 0):
            return False
    return True


def live_sessions(ld: LoopDir, *, probe: bool = False) -> Counter[str]:
    """Work item → how many of its sessions run now (a session launched but not yet
    registered counts, under the work item its harness record names). Read from each
    session's lock file (its pid) and /proc, without touching the lock: a sampler that took
    the lock would make a dead session look alive to the loop. With `probe` (no loop process
    running), the lock itself is asked, as the loop asks it."""
    sessions = ld.state / "sessions"
    owner = {r["id"]: r["ref"] for r in ld.query("SELECT id, ref FROM sessions")}
    owner.update({r["session"]: r["work_item"] for r in ld.launches()
                  if r["session"] not in owner})
    live: Counter[str] = Counter()
    for lock in sessions.glob("*.lock") if sessions.exists() else []:
        text = lock.read_text(errors="replace").strip()
        if (session_alive(sessions, lock.stem, 0) if probe
                else text.isdigit() and alive(int(text))):
            live[owner.get(lock.stem, "?")] += 1
    return live


def broken(ld: LoopDir, expected: dict[str, str], *, kills: int = 0) -> list[str]:
    """The invariants `ld`'s run broke, one sentence each. `expected`: ref → the state the
    walk must have reached. `kills`: how many times a process was killed at a random moment
    (each may have fired one point whose decision it never recorded: asked again, allowed)."""
    out: list[str] = []
    steps = [s for s in ld.query("SELECT * FROM steps ORDER BY seq") if s["ref"] in expected]
    contexts = [r for r in ld.seen() if r["work_item"]["ref"] in expected]
    for ref, state in expected.items():
        got = ld.work(ref).get("state")
        if got != state:
            out.append(f"item stuck: {ref} is {got!r}, expected {state!r}")
    pending = [s["key"] for s in steps if s["state"] != "done"]
    if pending:
        out.append(f"item stuck: steps still pending: {pending}")
    claims = [r["ref"] for r in ld.query("SELECT ref FROM work WHERE claim != ''")
              if r["ref"] in expected]
    if claims:
        out.append(f"claim left behind on {claims}")

    # No hook asked twice for a recorded step: each point fired once per step recording it.
    recorded = Counter(p for s in steps for p in json.loads(s["decisions"]))
    seen = Counter(r["point"] for r in contexts)
    extra = seen - recorded
    missing = recorded - seen
    if missing:
        out.append(f"decision recorded without the hook being asked: {dict(missing)}")
    if sum(extra.values()) > kills:
        out.append(f"hook asked twice for a recorded step: {dict(extra)} more firings than "
                   f"recorded decisions ({kills} random kill(s) allowed)")
    starts = Counter(r["work_item"]["ref"] for r in contexts
                     if r["point"] == "work_item_start")
    armings = Counter(s["ref"] for s in steps if s["kind"] == "start")
    if any(starts[ref] > armings[ref] + kills for ref in starts):
        out.append(f"work_item_start asked more than once per arming: {dict(starts)}")

    # Every input delivered exactly once: each person's comment on an armed item has one
    # input step, done, whose input_received fired once (by its text).
    inputs = {(s["payload_ref"], s["comment"]): s for s in _inputs(steps)}
    texts = Counter((r["work_item"]["ref"], r["text"]) for r in contexts
                    if r["point"] == "input_received")
    loop_comments: list[str] = []
    bodies: dict[int, str] = {}
    for ref in expected:
        for c in ld.item(ref)["comments"]:
            bodies[c["id"]] = c["body"]
            if c["author"] == "the-loop":
                loop_comments.append(c["body"])
                continue
            step = inputs.get((ref, c["id"]))
            if step is None:
                out.append(f"input lost: comment {c['id']} by {c['author']} on {ref} has no "
                           "input step")
            elif step["state"] != "done":
                out.append(f"input not delivered: {step['key']} is {step['state']}")
            elif "input_received" in json.loads(step["decisions"]) and \
                    texts[ref, c["body"]] > 1 + kills:
                out.append(f"input delivered {texts[ref, c['body']]} times on {ref}: "
                           f"{c['body']!r}")

    # Every marked loop comment (refusals, gate requests, announcements) posted once.
    marks = Counter(m for body in loop_comments for m in MARK_RE.findall(body))
    twice = sorted(k for k, n in marks.items() if n > 1)
    if twice:
        out.append(f"comment posted more than once: {twice}")
    for s in steps:
        if s["outcome"] == "refused" and marks[s["key"]] != 1:
            out.append(f"refusal {s['key']} commented {marks[s['key']]} times")

    # No duplicate session: one row per launch step, one harness launch per session id,
    # a resumed input's text in exactly one launch, at most one live session per item.
    per_step = Counter(r["step"] for r in ld.query("SELECT step, ref FROM sessions")
                       if r["ref"] in expected)
    if any(n > 1 for n in per_step.values()):
        out.append(f"two sessions for one launch step: {dict(per_step)}")
    launched = Counter(r["session"] for r in ld.launches())
    if any(n > 1 for n in launched.values()):
        out.append(f"a session id launched twice: {dict(launched)}")
    done_launches = [s for s in steps if s["kind"] == "launch" and s["outcome"] == "launched"]
    for s in done_launches:
        if per_step[s["key"]] != 1:
            out.append(f"launch step {s['key']} done without its session row")
    for s in _inputs(steps):
        if s["outcome"] == "resumed":
            text = bodies.get(s["comment"], "")
            got = [r for r in ld.launches()
                   if r["work_item"] == s["ref"] and text and text in r["prompt"]]
            if len(got) != 1:
                out.append(f"resumed input {s['key']} reached {len(got)} sessions")
    live = live_sessions(ld, probe=True)
    if any(n > 1 for n in live.values()):
        out.append(f"two live sessions of one item: {dict(live)}")
    return out


def _inputs(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for s in steps:
        if s["kind"] == "input":
            p = json.loads(s["payload"])
            out.append(dict(s, payload_ref=p["endpoint"], comment=int(p["comment"])))
    return out
