"""Questions, gates and a person's input through real processes: waiting_for_input and
input_received decide what is posted and what is delivered (issue 7: items 2, 3, 8;
R2.7, R3.6)."""

from __future__ import annotations

from runtime_helpers import LoopDir

REWORD_HOOK = '''
from the_loop.sdk.hooks import LifecycleHooks, WaitingForInput


class Reword(LifecycleHooks):
    def waiting_for_input(self, ctx: WaitingForInput) -> WaitingForInput:
        ctx.question = f"[{ctx.kind}] HOOK: {ctx.question}"
        ctx.summary = "HOOK SUMMARY"
        return ctx
'''

REDACT_HOOK = '''
from the_loop.sdk.hooks import InputReceived, LifecycleHooks


class Redact(LifecycleHooks):
    def input_received(self, ctx: InputReceived) -> InputReceived:
        ctx.text = ctx.text.replace("hunter2", "[redacted]")
        return ctx
'''

DROP_POLICY = """
rules:
  - name: no-mallory
    on: input_received
    when: "actor == 'mallory'"
    set:
      proceed: false
      reason: "{{ actor }} may not talk to agents"
"""


def running(ld: LoopDir, title: str = "Add a login page") -> str:
    """A work item started by the poller, its first session launched and ended."""
    ref = ld.add(title)
    ld.start(ref)
    ld.poll()
    assert ld.work(ref)["state"] == "running"
    return ref


def test_r2_7_question_and_summary_replaced_by_hook(ld: LoopDir) -> None:
    """`the-loop ask` posts the hook's question and summary, not the agent's."""
    ld.write("hooks/reword.py", REWORD_HOOK)
    ld.write_config("hooks:\n  - {name: reword, path: hooks/reword.py}\n")
    ref = running(ld)
    done = ld.cli("ask", "Which users?", "--summary", "agent summary", "--work-item", ref)
    assert done.stdout.strip() == (f"asked: the loop posts your question on {ref}; answers "
                                   "resume this work")
    assert ld.points("waiting_for_input") == []  # the one-shot `ask` runs no hook
    ld.poll()

    question = ld.comments(ref)[-1]
    assert question.startswith("**Question from the agent**")
    assert "[question] HOOK: Which users?" in question and "HOOK SUMMARY" in question
    assert "agent summary" not in question
    events = ld.events()
    [point] = [i for i, r in enumerate(events)
               if r["event"] == "lifecycle.point" and r["point"] == "waiting_for_input"]
    assert events[point]["decisions"] == {"question": "[question] HOOK: Which users?",
                                          "summary": "HOOK SUMMARY"}
    assert events[point + 1]["event"] == "question.posted"
    assert ld.work(ref)["state"] == "waiting"


def test_r2_7_gate_request_is_the_graphs_text_and_hook_change_is_ignored(ld: LoopDir) -> None:
    """Entering a human gate fires waiting_for_input (kind gate); a hook's question or
    summary there is not posted, and hooks.ignored records it."""
    ld.write("hooks/reword.py", REWORD_HOOK)
    ld.write_config("hooks:\n  - {name: reword, path: hooks/reword.py}\n")
    ref = running(ld)
    assert ld.complete(ref) == f"write done; the loop moves {ref} on"

    assert ld.comments(ref)[-1] == \
        "GRAPH-REQUEST: review the draft, reply /approve or /reject."
    assert not any("HOOK" in c for c in ld.comments(ref))
    [ignored] = ld.events("hooks.ignored")
    assert (ignored["point"], ignored["hook"], ignored["fields"]) == (
        "waiting_for_input", "reword", ["question", "summary"])
    names = ld.names()
    assert names.index("lifecycle.point", names.index("phase.changed")) < \
        names.index("hooks.ignored") < names.index("gate.entered")
    assert ld.work(ref)["state"] == "gate"


def test_r2_7_input_text_replaced_is_what_the_resumed_session_gets(ld: LoopDir) -> None:
    """A hook's `text` at input_received is what the resumed session's prompt carries."""
    ld.write("hooks/redact.py", REDACT_HOOK)
    ld.write_config("hooks:\n  - {name: redact, path: hooks/redact.py}\n")
    ref = running(ld)
    assert ld.reply(ref, "Use password hunter2 for the test account") == f"{ref}: resumed"

    resumed = ld.launches()[-1]
    assert resumed["prompt"].startswith(f"Resuming {ref}")
    assert "Use password [redacted] for the test account" in resumed["prompt"]
    assert "hunter2" not in resumed["prompt"]
    names = ld.names()
    i = names.index("lifecycle.point", names.index("poll.cycle"))
    assert ld.events()[i]["point"] == "input_received"
    assert i < names.index("input.delivered", i) < names.index("session.launched", i)
    [delivered] = ld.events("input.delivered")
    assert (delivered["kind"], delivered["done"]) == ("comment", "resumed")


def test_r2_7_input_refused_is_dropped_with_one_marked_comment(ld: LoopDir) -> None:
    """proceed: false at input_received: nothing delivered, one comment, hooks.refused —
    by `reply` and by a comment the poller finds, each once."""
    ld.write("policies/input.yaml", DROP_POLICY)
    ld.write_config("hooks:\n  - {name: house, policy: policies}\n")
    ref = running(ld)
    assert ld.reply(ref, "Delete the database", actor="mallory") == f"{ref}: refused"
    ld.ok("items", "comment", ref, "Really, delete it", "--author", "mallory")
    ld.poll()
    ld.poll()

    drops = [c for c in ld.comments(ref, raw=True) if "was dropped" in c]
    assert len(drops) == 2
    assert drops[0].startswith("Input from @mallory was dropped by hook `house` at "
                               "`input_received`: mallory may not talk to agents")
    assert all("<!-- the-loop:input:" in c for c in drops)
    assert [(r["point"], r["hook"]) for r in ld.events("hooks.refused")] == [
        ("input_received", "house")] * 2
    assert len(ld.events("input.refused")) == 2
    assert ld.events("input.delivered") == []
    assert not any("elete" in launch["prompt"] for launch in ld.launches())


def test_stop_disarms_and_later_comments_are_not_input(ld: LoopDir) -> None:
    """`/stop` (a control command) stops the item; the poller then ignores its comments."""
    ref = running(ld)
    assert ld.reply(ref, "/stop") == f"{ref}: stopped"
    assert ld.work(ref)["state"] == "stopped"
    [disarmed] = ld.events("loop.disarmed")
    assert disarmed["why"] == "/stop by alice"
    assert ld.comments(ref)[-1] == f"Stopped by @alice; re-arm with `the-loop start {ref}`."
    [point] = ld.points("input_received")
    assert point["decisions"]["text"] == "/stop"

    ld.ok("items", "comment", ref, "are you there?", "--author", "bob")
    ld.poll()
    assert len(ld.points("input_received")) == 1
    assert len(ld.launches()) == 1


def test_issue11_rule1_a_broken_declaration_lets_no_one_shot_command_act_and_they_say_so(
        ld: LoopDir) -> None:
    """With a declaration that cannot load, `ask`, `reply` and `graph complete` only write
    what they ask for: no hook runs half-loaded, nothing is posted, delivered or launched;
    the poller refuses to start, so nothing moves until the declaration is fixed — and
    each says so instead of promising that the loop acts (issue 20, item 15), and records
    hooks.load_failed (issue 30 item 5)."""
    ref = running(ld)
    launches, fired = len(ld.launches()), len(ld.points())
    good = ld.config.read_text()
    ld.write_config("hooks:\n  - {name: ghost, path: hooks/missing.py}\n")
    why = "no daemon can start on it (hooks[0] ('ghost') → path: no file at "
    code, out, err = ld.run("ask", "Which users?", "--work-item", ref)
    assert code == 0 and out == (f"asked: your question on {ref} is queued; no daemon can "
                                 "start to post it until the hooks declaration loads\n")
    assert err.startswith("the-loop: nothing will act on your question until the hooks "
                          f"declaration is mended: {why}"), err
    code, out, err = ld.run("reply", ref, "Admins first", "--actor", "mallory")
    assert code == 0 and out.endswith("; no daemon can start to deliver it until the hooks "
                                      "declaration loads\n"), out
    assert err.startswith("the-loop: nothing will act on comment ") and why in err, err
    code, out, err = ld.run("graph", "complete", "--work-item", ref)
    assert code == 0 and out == (f"write done; nothing moves {ref} on until the hooks "
                                 "declaration loads (no daemon can start on it)\n"), out
    assert err.startswith("the-loop: nothing will act on write's completion until the hooks "
                          f"declaration is mended: {why}"), err
    # R3.6, abuse case 6: each one-shot records the failed load (issue 30 item 5)
    failed = ld.events("hooks.load_failed")
    assert [r["source"] for r in failed] == ["ask", "reply", "graph"]
    assert all("hooks[0] ('ghost') → path: no file at " in r["error"] for r in failed)
    assert len(ld.points()) == fired
    assert not any(c.startswith("**Question") for c in ld.comments(ref))
    refused = ld.cli("poll", "--once", ok=False)
    assert refused.returncode == 1 and "refusing to start" in refused.stderr
    assert len(ld.launches()) == launches
    assert (ld.work(ref)["node"], ld.work(ref)["state"]) == ("write", "waiting")
    assert [r["kind"] for r in ld.query("SELECT kind FROM steps WHERE state='pending'")] == [
        "question", "done"]

    ld.config.write_text(good)  # fixed: the poller takes it all in, in order
    ld.poll()
    question, request = ld.comments(ref)[-2:]
    assert question.startswith("**Question from the agent**") and "Which users?" in question
    assert request == "GRAPH-REQUEST: review the draft, reply /approve or /reject."
    assert ld.work(ref)["state"] == "gate"
    [got] = [s for s in ld.query("SELECT kind, outcome FROM steps WHERE kind='input'")]
    assert got == {"kind": "input", "outcome": "recorded"}


def test_ask_at_a_human_gate_is_refused_and_the_gate_still_passes(ld: LoopDir) -> None:
    """An agent that asks after completing its node cannot take the gate from the person."""
    ref = running(ld)
    ld.complete(ref)
    done = ld.cli("ask", "One more thing?", "--work-item", ref, ok=False)
    assert done.returncode == 1
    assert f"{ref} is at review, a human gate" in done.stderr
    assert ld.points("waiting_for_input")[-1]["decisions"]["question"] == ""
    assert ld.work(ref)["state"] == "gate"
    assert ld.reply(ref, "/approve") == f"{ref}: approved"


SWAP_HOOK = '''
from the_loop.sdk.hooks import InputReceived, LifecycleHooks


class Swap(LifecycleHooks):
    def input_received(self, ctx: InputReceived) -> InputReceived:
        ctx.text = "/reject" if ctx.control else "/approve"
        return ctx
'''


def test_input_text_cannot_pass_a_gate_or_choose_its_edge(ld: LoopDir) -> None:
    """`text` replaces what is delivered, not what is run: a hook that rewrites a comment
    into /approve approves nothing, and one that rewrites /approve into /reject does not
    reject (a decision cannot approve a gate or choose an edge)."""
    ld.write("hooks/swap.py", SWAP_HOOK)
    ld.write_config("hooks:\n  - {name: swap, path: hooks/swap.py}\n")
    ref = running(ld)
    ld.complete(ref)
    assert ld.reply(ref, "looks fine to me") == f"{ref}: recorded"
    assert ld.work(ref)["state"] == "gate"
    assert ld.reply(ref, "/approve") == f"{ref}: approved"
    assert ld.item(ref)["state"] == "closed"
    assert [p["decisions"]["text"] for p in ld.points("input_received")] == [
        "/approve", "/reject"]


def test_reject_at_a_gate_without_a_rejected_edge_is_ignored_not_fatal(ld: LoopDir) -> None:
    """A person's /reject where the operator's graph has no rejected edge: a comment says
    so; the poller goes on (it used to raise out of the cycle and stop the daemon)."""
    ld.write("flow.yaml", """
        nodes:
          - {name: write, actor: agent}
          - {name: review, actor: human}
          - {name: done, terminal: true}
        edges:
          - {from: write, outcome: done, to: review}
          - {from: review, outcome: approved, to: done}
    """)
    ld.write_config(graph="flow.yaml")
    ref = running(ld)
    ld.complete(ref)
    ld.ok("items", "comment", ref, "/reject", "--author", "bob")
    done = ld.poll()
    assert "Traceback" not in done.stderr and done.stdout.startswith("started 0, inputs 1")
    assert ld.comments(ref)[-1] == ("`/reject` from @bob ignored: gate review has no "
                                    "'rejected' edge (its outcomes: approved).")
    assert ld.work(ref)["state"] == "gate"
