"""Issue 31, item 3, through a real `serve` on port 0 and real sessions: each session is handed
a token of its own, bound to it; no comment names a session; an agent's token cannot stop
another work item, whatever session id it names."""

from __future__ import annotations

import hashlib
import json
import re
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

from test_runtime_daemons import Client

from runtime_helpers import LoopDir, readline
from the_loop.runtime.identity import agent_login

TOKENS = {"ALICE_TOKEN": "alice-secret-31"}
SESSION_ID = re.compile(r"s-[0-9a-f]{12}")


@contextmanager
def serving(ld: LoopDir) -> Iterator[Client]:
    proc = ld.popen("serve", "--port", "0", "--quiet", env=TOKENS)
    try:
        yield Client(readline(proc).split(" on ", 1)[1].strip())
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err


def session_tokens(ld: LoopDir) -> dict[str, str]:
    """Each launched session's token, as its harness saw it in its environment."""
    launches = ld.launches()
    return {r["env"]["THE_LOOP_SESSION"]: r["env"]["THE_LOOP_SESSION_TOKEN"] for r in launches}


def running_items(ld: LoopDir, n: int) -> list[str]:
    refs = [ld.add(f"Item {i}") for i in range(n)]
    for ref in refs:
        ld.start(ref)
    ld.poll()
    assert all(ld.work(ref)["state"] == "running" for ref in refs)
    return refs


def number(ref: str) -> str:
    return ref.rsplit("#", 1)[1]


def test_issue31_item3_a_session_token_acts_only_on_its_own_session(ld: LoopDir) -> None:
    """Item A's session token: every input to item B is 403 — naming B's session, naming
    none, or naming B's session on A's own path — and B keeps running; A's own input is
    taken, written as A's agent login (not its session id)."""
    ld.write_config("serve: {tokens: {alice: ALICE_TOKEN}}\n")
    mine, theirs = running_items(ld, 2)
    sid_mine, sid_theirs = ld.work(mine)["session_id"], ld.work(theirs)["session_id"]
    token = session_tokens(ld)[sid_mine]
    with serving(ld) as api:
        for path, body in ((theirs, {"text": "/stop", "session": sid_theirs}),
                           (theirs, {"text": "/stop"}),
                           (theirs, {"text": "please stop", "session": sid_mine}),
                           (mine, {"text": "/stop", "session": sid_theirs})):
            status, answer = api.call("POST", f"/items/{number(path)}/input", body,
                                      token=token)
            assert status == 403, (path, body, answer)
            assert answer["error"].startswith(f"you are {agent_login(sid_mine)} (from your "
                                              "token), an agent: your token belongs to "), answer
        assert ld.work(theirs)["state"] == "running"
        status, answer = api.call("POST", f"/items/{number(mine)}/input",
                                  {"text": f"half done, my token is {token}"}, token=token)
        assert (status, answer) == (200, {"ref": mine, "actor": agent_login(sid_mine),
                                          "done": "recorded"})
        assert api.call("GET", f"/items/{number(mine)}", token=token)[0] == 403
        assert api.call("GET", "/items/1", token="alice-secret-31")[0] == 200
    [posted] = [c for c in ld.item(mine)["comments"] if c["author"].startswith("agent:")]
    assert posted["body"] == "half done, my token is [redacted]"
    # Never in the database in clear, nor in the event log, nor in a comment.
    dump = "\n".join(subprocess.run(["sqlite3", str(ld.state / "loop.db"), ".dump"],
                                    capture_output=True, text=True, check=True).stdout
                     .splitlines())
    for secret in session_tokens(ld).values():
        assert secret not in dump
        assert secret not in (ld.state / "events.jsonl").read_text()
    assert ld.work(mine)["session_key"] == hashlib.sha256(token.encode()).hexdigest()


def test_issue31_item3_a_stale_session_token_and_a_guess_are_not_credentials(
        ld: LoopDir) -> None:
    """A session's token dies when its item launches the next session (401), and a token
    nobody was handed is a 401 too: neither reaches any item."""
    ld.write_config("serve: {tokens: {alice: ALICE_TOKEN}}\n")
    [ref] = running_items(ld, 1)
    first = session_tokens(ld)[ld.work(ref)["session_id"]]
    ld.reply(ref, "more detail please")  # alice's input resumes the node: a new session
    assert len(session_tokens(ld)) == 2
    with serving(ld) as api:
        for token in (first, "x" * 43):
            status, answer = api.call("POST", f"/items/{number(ref)}/input",
                                      {"text": "/stop"}, token=token)
            assert (status, answer) == (401, {"error": "missing or wrong bearer token"})
    assert ld.work(ref)["state"] == "running"


def test_issue31_item3_serve_refuses_a_shared_agent_token(ld: LoopDir) -> None:
    """`serve.agents` (one token every session shared, so bound to none) stops `serve`
    from starting, saying what replaces it."""
    ld.write_config("serve: {tokens: {alice: ALICE_TOKEN}, agents: {agentbot: AGENT_TOKEN}}\n")
    done = ld.cli("serve", "--port", "0", ok=False, env=dict(TOKENS, AGENT_TOKEN="shared-1"))
    assert done.returncode == 2, done.stderr
    assert ("refusing to start: serve.agents (agentbot) is a token every session would "
            "share, which cannot be bound to one session; remove it: each session is handed "
            "a token of its own ($THE_LOOP_SESSION_TOKEN)") in done.stderr


def test_issue31_item3_no_comment_names_a_session(ld: LoopDir) -> None:
    """An agent asks (`ask` in its session), writes input (`reply` in its session and through
    `serve`), is answered and stopped: no comment's author or text names any session."""
    ld.write_config("serve: {tokens: {alice: ALICE_TOKEN}}\n")
    [ref] = running_items(ld, 1)
    sid = ld.work(ref)["session_id"]
    inside = {"THE_LOOP_SESSION": sid}
    ld.cli("ask", "Which users?", "--work-item", ref, env=inside)
    ld.poll()
    ld.cli("reply", ref, "a note from the agent", env=inside)
    ld.cli("reply", ref, "/approve", env=inside)  # refused: an agent answers no gate
    ld.poll()
    assert ld.reply(ref, "admins only") == f"{ref}: resumed"
    sid2 = ld.work(ref)["session_id"]
    with serving(ld) as api:
        assert api.call("POST", f"/items/{number(ref)}/input", {"text": "/stop"},
                        token=session_tokens(ld)[sid2])[0] == 200
    assert ld.work(ref)["state"] == "stopped"
    comments = ld.item(ref)["comments"]
    assert any(c["author"] == agent_login(sid) for c in comments)
    assert any("Question from the agent" in c["body"] for c in comments)
    text = json.dumps(comments)
    sids = [r["id"] for r in ld.query("SELECT id FROM sessions")]
    assert len(sids) == 2 and not any(s in text for s in sids)
    assert not SESSION_ID.search(text), text


def test_issue31_item3_soak_every_agent_tries_to_stop_every_other_item(ld: LoopDir) -> None:
    """The attack as it was run, bounded (5 items, 40 tries): each item's agent reads every
    other item's thread for a session id (none is there), then tries `/stop` and a comment
    on each with that item's real session id (read from the database, as a leak would give
    it), with its own and without. Every try is 403 and every item still runs."""
    ld.write_config("serve: {tokens: {alice: ALICE_TOKEN}}\n")
    refs = running_items(ld, 5)
    for ref in refs:  # each agent asks once, so every thread holds a question
        ld.cli("ask", "Ready?", "--work-item", ref,
               env={"THE_LOOP_SESSION": ld.work(ref)["session_id"]})
    ld.poll()
    tokens = session_tokens(ld)
    statuses: list[int] = []
    with serving(ld) as api:
        for attacker in refs:
            token = tokens[ld.work(attacker)["session_id"]]
            for victim in (r for r in refs if r != attacker):
                thread = ld.ok("items", "show", victim, "--json")
                assert not SESSION_ID.search(thread), thread
                sid = ld.work(victim)["session_id"]
                for body in ({"text": "/stop", "session": sid}, {"text": "hi", "session": sid}):
                    statuses.append(api.call("POST", f"/items/{number(victim)}/input", body,
                                             token=token)[0])
    assert len(statuses) == 40 and set(statuses) == {403}
    assert {ld.work(ref)["state"] for ref in refs} == {"waiting"}
