"""The phase graph and the channels: phase_changed and work_item_complete decide what the
channels hear; operator graphs fail at load naming the node or edge (issue 7: items 1, 4,
5, 6; R2.7, R7.1)."""

from __future__ import annotations

import json
import sqlite3
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

from runtime_helpers import LoopDir
from serving_helpers import free_port
from the_loop.errors import ConfigError
from the_loop.runtime.graph import PHASES, builtin_graph, parse_graph

QUIET_REVIEW_HOOK = '''
from the_loop.sdk.hooks import LifecycleHooks, PhaseChanged


class QuietReview(LifecycleHooks):
    def phase_changed(self, ctx: PhaseChanged) -> PhaseChanged:
        ctx.notify = ctx.to_phase != "review"
        return ctx
'''

NO_ANNOUNCE_HOOK = '''
from the_loop.sdk.hooks import LifecycleHooks, WorkItemComplete


class Silent(LifecycleHooks):
    def work_item_complete(self, ctx: WorkItemComplete) -> WorkItemComplete:
        ctx.announce = False
        return ctx
'''


def at_gate(ld: LoopDir, *, in_process: bool = True) -> str:
    """A work item whose agent node completed: it waits at the review gate."""
    ref = ld.add("Add a login page")
    ld.start(ref)
    ld.poll()
    args = ("graph", "complete", "--work-item", ref, "--summary", "drafted")
    if in_process:
        ld.ok(*args)
    else:
        ld.cli(*args)
    ld.poll()  # the daemon enters the next node
    assert ld.work(ref)["state"] == "gate"
    return ref


# ------------------------------------------------------------------ decisions, end to end

def test_r2_7_r7_1_notify_false_skips_that_phase_message_only(ld: LoopDir) -> None:
    """notify: false for writing → review: no phase message for it; the label still moves,
    and review → done is published."""
    ld.write("hooks/quiet.py", QUIET_REVIEW_HOOK)
    ld.write_config("hooks:\n  - {name: quiet, path: hooks/quiet.py}\n")
    ref = at_gate(ld, in_process=False)
    assert ld.item(ref)["labels"] == ["loop:review"]
    assert ld.channel_messages() == []
    [point] = ld.points("phase_changed")
    assert point["decisions"] == {"notify": False}
    assert "phase.published" not in ld.names()

    ld.reply(ref, "/approve")
    assert [(m["type"], m["from_phase"], m["to_phase"]) for m in ld.channel_messages()
            if m["type"].startswith("phase.")] == [("phase.completed", "review", "done")]
    assert [r["to_phase"] for r in ld.events("phase.published")] == ["done"]


def test_r2_7_r7_1_announce_false_at_completion_skips_the_closure_message(ld: LoopDir) -> None:
    """announce: false at work_item_complete: the ticket closes, no item.closed message."""
    ld.write("hooks/silent.py", NO_ANNOUNCE_HOOK)
    ld.write_config("hooks:\n  - {name: silent, path: hooks/silent.py}\n")
    ref = at_gate(ld)
    assert ld.reply(ref, "/approve") == f"{ref}: approved"

    assert ld.item(ref)["state"] == "closed" and ld.work(ref)["state"] == "done"
    types = [m["type"] for m in ld.channel_messages()]
    assert types == ["phase.changed", "phase.completed"]
    [point] = ld.points("work_item_complete")
    assert point["decisions"] == {"announce": False}
    assert "item.completed" in ld.names() and "item.announced" not in ld.names()


def test_reject_at_a_gate_goes_back_to_the_agent_node(ld: LoopDir) -> None:
    """`/reject` takes the rejected edge: phase_changed (outcome rejected), a new session
    at the agent node through session_spawn, whose prompt carries the reviewer's feedback."""
    ld.write_config("hooks:\n" + ld.add_recorder())
    ref = at_gate(ld)
    assert ld.reply(ref, "/reject needs more detail") == f"{ref}: rejected"

    w = ld.work(ref)
    assert (w["state"], w["node"]) == ("running", "write")
    assert ld.item(ref)["labels"] == ["loop:writing"]
    changed = ld.seen("phase_changed")[-1]
    assert (changed["from_node"], changed["to_node"], changed["outcome"], changed["actor"]) \
        == ("review", "write", "rejected", "alice")
    spawn = ld.seen("session_spawn")[-1]
    assert (spawn["node"], spawn["actor"]) == ("write", "alice")
    assert ld.launches()[-1]["prompt"] == (
        "Write Add a login page (local:acme/app#1).\n\nFeedback from @alice:\n\n"
        "needs more detail"
    )


def test_a_person_closing_the_ticket_fires_work_item_complete_from_the_tracker(
        ld: LoopDir) -> None:
    """`items close` by a person: the poller fires work_item_complete (source tracker, the
    person as actor), then announces the closure on the channels."""
    ld.write_config("hooks:\n" + ld.add_recorder())
    ref = ld.add()
    ld.start(ref)
    ld.poll()
    ld.cli("items", "close", ref, "--actor", "dave")
    assert ld.poll().stdout.startswith(
        "started 0, inputs 0, refused 0, launched 0, closed 1")

    [complete] = ld.seen("work_item_complete")
    assert (complete["source"], complete["actor"], complete["state"], complete["node"]) == (
        "tracker", "dave", "closed", "write")
    names = ld.names()
    assert names.index("lifecycle.point", names.index("loop.started") + 1) < \
        names.index("item.completed") < names.index("item.announced")
    assert ld.channel_messages() == [
        {"type": "item.closed", "id": f"complete:{ref}:1", "work_item": ref,
         "source": "tracker", "actor": "dave"}]
    assert ld.work(ref)["state"] == "done"

    ld.poll()
    assert len(ld.seen("work_item_complete")) == 1


class _Sink(BaseHTTPRequestHandler):
    received: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append({"auth": self.headers.get("Authorization"),
                                    "message": json.loads(body)})
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return None


def test_webhook_channels_post_json_and_a_failing_one_is_recorded(ld: LoopDir) -> None:
    """A webhook channel gets each message as a JSON POST (bearer from tokenEnv); one that
    cannot be reached is recorded as channel.failed and the loop goes on to close."""
    _Sink.received = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        ld.write_config(channels=(
            "channels:\n  - {kind: file, path: channel.jsonl}\n"
            f"  - {{kind: webhook, url: 'http://127.0.0.1:{free_port()}/down'}}\n"
            f"  - {{kind: webhook, url: 'http://127.0.0.1:{port}/hook', "
            "tokenEnv: CHAT_TOKEN}\n"))
        ref = ld.add()
        ld.start(ref)
        ld.poll()
        ld.cli("graph", "complete", "--work-item", ref, env={"CHAT_TOKEN": "s3cret-token"})
        ld.poll(env={"CHAT_TOKEN": "s3cret-token"})
        ld.cli("reply", ref, "/approve", env={"CHAT_TOKEN": "s3cret-token"})
        ld.poll(env={"CHAT_TOKEN": "s3cret-token"})
    finally:
        server.shutdown()
        server.server_close()
        thread.join()

    sent = [m["message"]["type"] for m in _Sink.received]
    assert sent == ["phase.changed", "phase.completed", "item.closed"]
    assert {m["auth"] for m in _Sink.received} == {"Bearer s3cret-token"}
    assert [m["type"] for m in ld.channel_messages()] == sent
    failed = ld.events("channel.failed")
    assert [f["message"] for f in failed] == sent
    assert all(f["channel"].endswith("/down") and "cannot reach" in f["error"]
               for f in failed)
    assert ld.item(ref)["state"] == "closed"
    assert "s3cret-token" not in (ld.state / "events.jsonl").read_text()


class _LockProbe(BaseHTTPRequestHandler):
    """A webhook that, while the loop waits for its answer, tries to take the loop's SQLite
    write lock as another process would."""

    db: ClassVar[str] = ""
    free: ClassVar[list[bool]] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        other = sqlite3.connect(type(self).db, timeout=0.5)
        try:
            other.execute("BEGIN IMMEDIATE")
            other.execute("ROLLBACK")
            type(self).free.append(True)
        except sqlite3.OperationalError:  # database is locked: the visit held its writes
            type(self).free.append(False)
        finally:
            other.close()
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return None


def test_a_visit_holds_no_write_lock_while_a_webhook_channel_is_called(
        ld: LoopDir) -> None:
    """A webhook is another machine's to answer: the visit commits what it wrote before it
    calls one, so the loop's other processes can write meanwhile (a file channel, appended
    to here, is written with the visit's writes still open: issue 34)."""
    _LockProbe.db, _LockProbe.free = str(ld.state / "loop.db"), []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _LockProbe)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        ld.write_config(channels=(
            "channels:\n  - {kind: file, path: channel.jsonl}\n"
            f"  - {{kind: webhook, url: 'http://127.0.0.1:{server.server_address[1]}/h'}}\n"))
        ref = ld.add()
        ld.start(ref)
        ld.poll()
        ld.cli("graph", "complete", "--work-item", ref)
        ld.poll()
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    assert _LockProbe.free == [True]  # the phase message, sent with no write lock held
    assert [m["type"] for m in ld.channel_messages()] == ["phase.changed"]


# ------------------------------------------------------------------ graphs at load

def test_builtin_graph_walks_four_phases_with_a_gate_after_each() -> None:
    g = builtin_graph()
    walk, node = [], g.start
    while not g.node(node).terminal:
        walk.append(node)
        nxt = g.next(node, "done" if g.node(node).actor == "agent" else "approved")
        assert nxt is not None
        node = nxt.name
    assert walk == [n for p in PHASES for n in (p, f"{p}-review")]
    assert all(g.next(f"{p}-review", "rejected").name == p for p in PHASES)  # type: ignore[union-attr]
    assert node == "done"


GOOD = {
    "start": "a",
    "nodes": [{"name": "a", "phase": "p", "actor": "agent"},
              {"name": "g", "phase": "p", "actor": "human"},
              {"name": "end", "terminal": True}],
    "edges": [{"from": "a", "outcome": "done", "to": "g"},
              {"from": "g", "outcome": "approved", "to": "end"}],
}


def variant(**change: Any) -> dict[str, Any]:
    data = json.loads(json.dumps(GOOD))
    for key, value in change.items():
        if key == "edge":
            data["edges"].append(value)
        elif key == "node":
            data["nodes"].append(value)
        else:
            data[key] = value
    return data


@pytest.mark.parametrize(("data", "message"), [
    (variant(edge={"from": "g", "outcome": "rejected", "to": "nowhere"}),
     "edge g --rejected--> nowhere: no node named 'nowhere'"),
    (variant(edge={"from": "end", "outcome": "again", "to": "a"}),
     "edge end --again--> a: a terminal node has no outgoing edges"),
    (variant(edge={"from": "a", "outcome": "done", "to": "end"}),
     "edge a --done--> end: node 'a' already has an edge for outcome 'done'"),
    (variant(node={"name": "x", "actor": "robot"}),
     "node 'x' → actor: expected agent or human, got 'robot'"),
    (variant(node={"name": "x", "actor": "agent"}),
     "node 'x': an agent node needs an edge with outcome done"),
    (variant(node={"name": "x", "actor": "human"}),
     "node 'x': a human gate needs an edge with outcome approved"),
    (variant(node={"name": "a"}), "node 'a': defined twice"),
    (variant(node={"name": "x", "colour": "red"}),
     "node 'x' → colour: unknown key. Allowed keys: name, phase, actor, terminal, prompt, "
     "request"),
    (variant(start="b"), "start: no node named 'b'"),
    (variant(edge={"from": "a", "to": "g"}),
     "edges[2] → outcome: missing; an edge is {from, outcome, to}"),
    (variant(edge=["a", "done", "g"]),
     "edges[2]: expected {from, outcome, to}, got ['a', 'done', 'g'] (list)"),
    (variant(node={"name": "x", "actor": "none"}),
     "node 'x' → actor: a node that is not terminal needs agent or human"),
    (variant(node={"name": "x", "terminal": "yes"}),
     "node 'x' → terminal: expected true or false, got 'yes' (str)"),
    (variant(node={"name": "x", "prompt": 5}), "node 'x' → prompt: expected a string, got 5"),
    (variant(node={"phase": "p"}), "nodes[3] → name: missing; every node needs a name"),
    (variant(nodes="a"), "nodes: expected a list of nodes, got 'a' (str)"),
    (variant(start="ab"), "start: no node named 'ab' (did you mean 'a'?)"),
    (variant(nodes=[{"name": "a", "actor": "agent"}], edges=[]),
     "node 'a': an agent node needs an edge with outcome done"),
    (variant(nodes=[{"name": "a", "actor": "human"}, {"name": "b", "actor": "agent"}],
             edges=[{"from": "a", "outcome": "approved", "to": "b"},
                    {"from": "b", "outcome": "done", "to": "a"}]),
     "no terminal node; mark the last node `terminal: true`"),
])
def test_yaml_graph_errors_name_the_node_or_edge(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_graph(data, "flow.yaml")
    assert str(err.value).startswith("graph flow.yaml: ")
    assert message in str(err.value)


def test_yaml_graph_error_stops_the_poller_naming_the_edge(ld: LoopDir) -> None:
    """A broken `graph:` file: `poll` exits 1 with the file and the edge in the message."""
    ld.write("flow.yaml", """
        nodes:
          - {name: a, actor: agent}
          - {name: end, terminal: true}
        edges:
          - {from: a, outcome: done, to: ending}
    """)
    ld.write_config(graph="flow.yaml")
    done = ld.cli("poll", "--once", ok=False)
    assert done.returncode == 1
    assert f"graph {ld.root / 'flow.yaml'}: edge a --done--> ending: no node named 'ending'" \
        in done.stderr


@pytest.mark.parametrize(("channel", "message"), [
    ("{kind: webhook, url: 'http://chat.example/hook', tokenEnv: CHAT_TOKEN}",
     "channels[0].url: a bearer token is never sent in clear: use https:// for chat.example"),
    ("{kind: webhook, url: 'https://bot:pw@chat.example/hook'}",
     "channels[0].url: credentials in the URL are not allowed (URL not shown)"),
    ("{kind: smoke-signal}", "channels[0]: expected {kind: file, path: P} or {kind: webhook"),
])
def test_webhook_channel_settings_refuse_a_token_in_clear(ld: LoopDir, channel: str,
                                                           message: str) -> None:
    """Checked at load, with the key named; the URL's secret part is never echoed."""
    ld.write_config(channels=f"channels:\n  - {channel}\n")
    code, _, err = ld.run("items", "list")
    assert code == 1
    assert f"{ld.config} → {message}" in err
    assert "pw@" not in err


def test_webhook_channel_with_token_to_loopback_http_is_allowed(ld: LoopDir) -> None:
    ld.write_config(channels="channels:\n  - {kind: webhook, url: 'http://127.0.0.1:9/h', "
                             "tokenEnv: T}\n")
    assert ld.run("items", "list")[0] == 0


def test_a_re_armed_item_starts_over_with_one_phase_label(ld: LoopDir) -> None:
    """Stopped at the review phase and armed again: back to the start node, and the
    ticket carries one loop:<phase> label, not the old one as well."""
    ref = at_gate(ld)
    assert ld.reply(ref, "/stop") == f"{ref}: stopped"
    assert ld.item(ref)["labels"] == ["loop:review"]
    ld.start(ref)
    ld.poll()
    assert ld.item(ref)["labels"] == ["loop:writing"]
    assert (ld.work(ref)["state"], ld.work(ref)["node"]) == ("running", "write")
    assert len(ld.points("work_item_start")) == 2
