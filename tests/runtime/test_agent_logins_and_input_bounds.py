"""Issue 20, items 1 and 2, through a real `serve` on port 0: an agent's token (its session's,
since issue 31 item 3) has an in-session agent's rights and no more, and one huge comment is
refused alone, early, without blocking its work item."""

from __future__ import annotations

import hashlib
import json
import signal

from test_runtime_daemons import Client
from test_security_edges import at_gate

from runtime_helpers import LoopDir, readline
from the_loop.runtime.identity import agent_login

TOKENS = {"ALICE_TOKEN": "alice-secret-20"}


def session_token(ld: LoopDir, ref: str) -> str:
    """The token the loop handed `ref`'s current session (as its harness saw it)."""
    sid = ld.work(ref)["session_id"]
    [token] = {r["env"]["THE_LOOP_SESSION_TOKEN"] for r in ld.launches()
               if r["env"]["THE_LOOP_SESSION"] == sid}
    return token


def test_issue20_item1_an_agent_token_cannot_approve_and_acts_only_on_its_own_item(
        ld: LoopDir) -> None:
    """A session's token (issue 31 item 3: it replaced `serve.agents`): the agent's /approve
    is refused (403) and the gate stays; its input goes only to its own item, written as its
    agent login; alice's /approve still passes the gate."""
    ld.write_config("serve: {tokens: {alice: ALICE_TOKEN}}\n")
    gate = at_gate(ld)
    running = ld.add("Still being written")
    ld.start(running)
    ld.poll()
    sid = ld.work(running)["session_id"]
    assert sid and ld.work(running)["state"] == "running"
    at_gate_token, agent = session_token(ld, gate), session_token(ld, running)
    gate_login = agent_login(ld.work(gate)["session_id"])
    proc = ld.popen("serve", "--port", "0", "--quiet", env=TOKENS)
    try:
        api = Client(readline(proc).split(" on ", 1)[1].strip())
        for body in ({"text": "/approve"}, {"text": "/reject"}):
            status, answer = api.call("POST", "/items/1/input", body, token=at_gate_token)
            assert status == 403, answer
            assert answer["error"].startswith(f"you are {gate_login} (from your token), an "
                                              "agent: an agent cannot answer a gate"), answer
        status, answer = api.call("POST", "/items/1/input", {"text": "fine"},
                                  token=at_gate_token)
        assert status == 403 and "a human gate" in answer["error"], answer
        assert ld.work(gate)["state"] == "gate"
        # Its own item: written as that session's agent, as the CLI would.
        status, answer = api.call("POST", f"/items/{running.rsplit('#', 1)[1]}/input",
                                  {"text": "half done", "session": sid}, token=agent)
        assert (status, answer) == (200, {"ref": running, "actor": agent_login(sid),
                                          "done": "recorded"})
        status, answer = api.call("POST", "/items/1/input", {"text": "x"}, token=agent)
        assert status == 403 and "acts only on its own work item" in answer["error"], answer
        assert api.call("POST", "/webhook", {"event": "closed", "ref": gate},
                        token=agent)[0] == 403
        assert api.call("POST", "/items/1/input", {"text": "/approve"},
                        token="alice-secret-20") == (
            200, {"ref": gate, "actor": "alice", "done": "approved"})
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert ld.work(gate)["state"] == "done"
    assert [c["author"] for c in ld.item(gate)["comments"]].count("alice") == 1
    log = (ld.state / "events.jsonl").read_text()
    assert not any(t in log for t in (*TOKENS.values(), agent, at_gate_token))


def test_an_agent_token_cannot_read_another_items_session_and_act_on_it(ld: LoopDir) -> None:
    """Two running items: a session's token reads no item (403), its own included; a
    person's token still reads both."""
    ld.write_config("serve: {tokens: {alice: ALICE_TOKEN}}\n")
    mine, other = ld.add("The agent's own"), ld.add("Someone else's")
    ld.start(mine)
    ld.start(other)
    ld.poll()
    theirs = ld.work(other)["session_id"]
    login = agent_login(ld.work(mine)["session_id"])
    proc = ld.popen("serve", "--port", "0", "--quiet", env=TOKENS)
    try:
        api = Client(readline(proc).split(" on ", 1)[1].strip())
        for path in ("/items", f"/items/{other.rsplit('#', 1)[1]}",
                     f"/items/{mine.rsplit('#', 1)[1]}", "/metrics"):
            status, answer = api.call("GET", path, token=session_token(ld, mine))
            assert status == 403, answer
            assert answer["error"].startswith(f"you are {login} (from your token), an "
                                              "agent: an agent's token reads no work item"), answer
            assert theirs not in json.dumps(answer)
        status, listed = api.call("GET", "/items", token="alice-secret-20")
        assert status == 200 and {i["ref"] for i in listed} == {mine, other}
        assert not any("session_key" in i["loop"] for i in listed)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert ld.work(other)["state"] == "running"


def test_an_agent_token_cannot_guess_another_items_session_from_its_ref(ld: LoopDir) -> None:
    """A session id was sha256 of its launch step's key (`launch:enter:<ref>:<arm>:<epoch>`),
    so an agent could work out any item's session. Ids are salted per launch (the guess is
    not the id), and naming any session but its own is refused (403) whatever it is; the
    item keeps running. A redo of the same launch still gets the same id
    (tests/runtime/test_graph_complete_after_crash.py)."""
    ld.write_config("serve: {tokens: {alice: ALICE_TOKEN}}\n")
    mine, other = ld.add("Mine"), ld.add("Someone else's")
    ld.start(mine)
    ld.start(other)
    ld.poll()
    key = f"launch:enter:{other}:1:1"
    assert ld.query("SELECT key FROM steps WHERE key=?", key)
    guess = "s-" + hashlib.sha256(key.encode()).hexdigest()[:12]
    assert ld.work(other)["session_id"] != guess
    proc = ld.popen("serve", "--port", "0", "--quiet", env=TOKENS)
    try:
        api = Client(readline(proc).split(" on ", 1)[1].strip())
        for where in (other, mine):
            status, answer = api.call("POST", f"/items/{where.rsplit('#', 1)[1]}/input",
                                      {"text": "/stop", "session": guess},
                                      token=session_token(ld, mine))
            assert status == 403 and "your token belongs to " in answer["error"], answer
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert ld.work(other)["state"] == ld.work(mine)["state"] == "running"


def test_issue20_item1_a_login_that_is_both_a_person_and_an_agent_is_a_config_error(
        ld: LoopDir) -> None:
    ld.write_config("serve: {tokens: {bot: A_TOKEN}, agents: {bot: B_TOKEN}}\n")
    code, _, err = ld.run("serve", "--port", "0")
    assert code != 0
    assert ("cli-config.yaml → serve.agents.bot: bot is both a person (tokens) and an agent "
            "(agents)") in err


# ------------------------------------------------------------------ item 2: one huge comment

PREAMBLE = """
rules:
  - name: house-preamble
    on: session_spawn
    set:
      prompt_prefix: "Follow the house rules. You are working on {{ work_item.ref }}.\\n\\n"
"""
HUGE = "y" * 300_000
TOO_LONG = ("not taken: one input may carry at most 65,536 characters and this one has "
            "300,000; shorten it, or link to a file instead of pasting it")


def test_issue20_item2_a_300kb_comment_through_serve_is_refused_alone_and_approve_still_works(
        ld: LoopDir) -> None:
    """A required prefix rule (the demo's house preamble) and a 300 KB comment on a running
    item, through the input API and the webhook: each is answered 413 with the reason and
    written nowhere; the item keeps running, and a maintainer's /approve at a gate passes."""
    ld.write("policies/sessions.yaml", PREAMBLE)
    ld.write_config("hooks:\n  - {name: house, policy: policies, required: true}\n"
                    "serve: {tokenEnv: OP_TOKEN, tokens: {alice: ALICE_TOKEN}}\n")
    gate = at_gate(ld)
    running = ld.add("Still being written")
    ld.start(running)
    ld.poll()
    number = running.rsplit("#", 1)[1]
    comments = len(ld.item(running)["comments"])
    proc = ld.popen("serve", "--port", "0", "--quiet",
                    env={"OP_TOKEN": "op-secret-20", **TOKENS})
    try:
        api = Client(readline(proc).split(" on ", 1)[1].strip())
        assert api.call("POST", f"/items/{number}/input", {"text": HUGE},
                        token="alice-secret-20") == (413, {"error": f"{running}: {TOO_LONG}"})
        assert api.call("POST", "/webhook", {"event": "comment", "ref": running,
                                             "author": "bob", "body": HUGE},
                        token="op-secret-20") == (413, {"error": f"{running}: {TOO_LONG}"})
        assert api.call("POST", "/items/1/input", {"text": HUGE},
                        token="alice-secret-20")[0] == 413
        assert ld.work(running)["state"] == "running"
        assert len(ld.item(running)["comments"]) == comments
        assert api.call("POST", f"/items/{number}/input", {"text": "short and fine"},
                        token="alice-secret-20") == (
            200, {"ref": running, "actor": "alice", "done": "resumed"})
        assert api.call("POST", "/items/1/input", {"text": "/approve"},
                        token="alice-secret-20") == (
            200, {"ref": gate, "actor": "alice", "done": "approved"})
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    ld.wait_sessions()
    assert ld.work(gate)["state"] == "done"
    assert ld.work(running)["state"] == "running"
    assert ld.launches()[-1]["prompt"].startswith("Follow the house rules.")


def test_issue20_item2_a_huge_comment_already_on_the_item_is_refused_alone(ld: LoopDir) -> None:
    """A comment written on the tracker directly (`items comment`) is taken in by the poller:
    that input alone is refused, with a comment saying why; the item is not blocked. `reply`
    refuses it before writing it (exit 2)."""
    ld.write_config("hooks:\n  - {name: house, policy: policies, required: true}\n")
    ld.write("policies/sessions.yaml", PREAMBLE)
    ref = ld.add()
    ld.start(ref)
    ld.poll()
    code, _, err = ld.run("reply", ref, HUGE, "--actor", "alice")
    assert (code, err) == (2, f"the-loop: {ref}: not posted: {TOO_LONG[len('not taken: '):]}"
                              "\n")
    ld.ok("items", "comment", ref, HUGE, "--author", "bob")
    ld.poll()
    [step] = ld.query("SELECT outcome FROM steps WHERE kind='input'")
    assert step["outcome"] == "refused"
    said = f"Input from @bob was not taken: {TOO_LONG[len('not taken: '):]}."
    assert ld.comments(ref).count(said) == 1
    assert ld.work(ref)["state"] == "running"


def test_issue20_item2_a_policy_may_prefix_a_prompt_longer_than_its_output_bound(
        ld: LoopDir) -> None:
    """The output bound is growth beyond what the decision held: a preamble on a 300,000
    character prompt passes."""
    ld.write("policies/sessions.yaml", PREAMBLE)
    ld.write_config("hooks:\n  - {name: house, policy: policies, required: true}\n")
    context = ld.write("ctx.json", json.dumps({"prompt": HUGE}))
    code, out, err = ld.run("hooks", "run", "session_spawn", "--context", str(context),
                            "--json")
    assert code == 0, err
    done = json.loads(out)
    assert [s["status"] for s in done["trace"]] == ["changed"]
    assert done["context"]["prompt"].startswith("Follow the house rules.")
    assert done["context"]["prompt"].endswith(HUGE)


def test_many_long_comments_join_one_launch_only_up_to_its_bound(ld: LoopDir) -> None:
    """Twenty 60,000-character comments, each under the one-input bound, taken in by one
    poll: they used to join one queued launch, a 1.2 MB prompt that a url: hook's server
    (1 MiB a request) refuses, so a required hook blocked the item. The launch carries at
    most 196,608 characters of joined input; each comment past that is refused alone with a
    sentence, and the item keeps running."""
    ref = ld.add()
    ld.start(ref)
    ld.poll()
    for n in range(20):
        ld.ok("items", "comment", ref, f"part {n}: " + "z" * 60_000, "--author", "bob")
    ld.poll()
    resumed = [launch["prompt"] for launch in ld.launches() if "part 0:" in launch["prompt"]]
    assert len(resumed) == 1 and len(resumed[0]) <= 196_608 + 65_536
    assert "part 2:" in resumed[0] and "part 3:" not in resumed[0]
    said = ("Input from @bob was not taken: more input is waiting for this item's next "
            "session than one launch carries (196,608 characters); send it again once the "
            "session has started.")
    assert ld.comments(ref).count(said) == 17
    assert ld.work(ref)["state"] == "running"
