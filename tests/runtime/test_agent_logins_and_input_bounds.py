"""Issue 20, items 1 and 2, through a real `serve` on port 0: an agent harness's token has an
in-session agent's rights and no more, and one huge comment is refused alone, early, without
blocking its work item."""

from __future__ import annotations

import signal

from test_runtime_daemons import Client
from test_security_edges import at_gate

from runtime_helpers import LoopDir, readline

TOKENS = {"ALICE_TOKEN": "alice-secret-20", "AGENT_TOKEN": "agentbot-secret-20"}


def test_issue20_item1_an_agent_token_cannot_approve_and_acts_only_on_its_own_item(
        ld: LoopDir) -> None:
    """`serve.agents` as docs/security.md sets it up: the agent's /approve is refused (403)
    and the gate stays; its input goes only to the item whose current session it names,
    written as `agent:<session>`; alice's /approve still passes the gate."""
    ld.write_config("serve: {tokens: {alice: ALICE_TOKEN}, agents: {agentbot: AGENT_TOKEN}}\n")
    gate = at_gate(ld)
    running = ld.add("Still being written")
    ld.start(running)
    ld.poll()
    sid = ld.work(running)["session_id"]
    assert sid and ld.work(running)["state"] == "running"
    proc = ld.popen("serve", "--port", "0", "--quiet", env=TOKENS)
    try:
        api = Client(readline(proc).split(" on ", 1)[1].strip())
        agent = "agentbot-secret-20"
        for body in ({"text": "/approve"}, {"text": "/approve", "session": sid},
                     {"text": "/reject", "session": sid}):
            status, answer = api.call("POST", "/items/1/input", body, token=agent)
            assert status == 403, answer
            assert answer["error"].startswith("you are agent:agentbot (from your token), an "
                                              "agent: an agent cannot answer a gate"), answer
        status, answer = api.call("POST", "/items/1/input", {"text": "fine", "session": sid},
                                  token=agent)
        assert status == 403 and "a human gate" in answer["error"], answer
        assert ld.work(gate)["state"] == "gate"
        # Its own item, its own session: written as that session's agent, as the CLI would.
        status, answer = api.call("POST", f"/items/{running.rsplit('#', 1)[1]}/input",
                                  {"text": "half done", "session": sid}, token=agent)
        assert (status, answer) == (200, {"ref": running, "actor": f"agent:{sid}",
                                          "done": "recorded"})
        status, answer = api.call("POST", f"/items/{running.rsplit('#', 1)[1]}/input",
                                  {"text": "half done"}, token=agent)
        assert status == 403 and "acts only on its own work item" in answer["error"], answer
        status, answer = api.call("POST", f"/items/{running.rsplit('#', 1)[1]}/input",
                                  {"text": "x", "session": "s-someone-else"}, token=agent)
        assert status == 403 and "is not" in answer["error"], answer
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
    assert not any(t in log for t in TOKENS.values())


def test_issue20_item1_a_login_that_is_both_a_person_and_an_agent_is_a_config_error(
        ld: LoopDir) -> None:
    ld.write_config("serve: {tokens: {bot: A_TOKEN}, agents: {bot: B_TOKEN}}\n")
    code, _, err = ld.run("serve", "--port", "0")
    assert code != 0
    assert ("cli-config.yaml → serve.agents.bot: bot is both a person (tokens) and an agent "
            "(agents)") in err
