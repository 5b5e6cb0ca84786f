"""`input_received.source` says where input came from (issue 20.14): `comment` for a comment
written on the tracker, `reply` for `the-loop reply`, `api` for the control plane's input
route; a policy rule on each matches that input and no other."""

from __future__ import annotations

import json
import threading
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from runtime_helpers import LoopDir

TOKEN = "control-plane-secret"

GATE_GRAPH = """\
start: review
nodes:
  - {name: review, phase: review, actor: human, request: "Review it: /approve."}
  - {name: done, phase: done, terminal: true}
edges:
  - {from: review, outcome: approved, to: done}
"""

#: One rule per source, each dropping the input with a reason that names it.
BY_SOURCE = """\
rules:
  - name: from-comment
    on: input_received
    when: "source == 'comment'"
    set: {proceed: false, reason: "SOURCE=comment"}
  - name: from-reply
    on: input_received
    when: "source == 'reply'"
    set: {proceed: false, reason: "SOURCE=reply"}
  - name: from-api
    on: input_received
    when: "source == 'api'"
    set: {proceed: false, reason: "SOURCE=api"}
"""


def _post(url: str, body: dict[str, str]) -> dict[str, str]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Authorization": f"Bearer {TOKEN}",
                                          "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return dict(json.loads(resp.read()))


def test_each_input_source_is_recorded_and_a_rule_on_it_matches(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from the_loop.config import read_config
    from the_loop.runtime.control import ControlServer
    from the_loop.runtime.service import Loop

    monkeypatch.setenv("LOOP_TOKEN", TOKEN)
    with LoopDir(tmp_path) as ld:
        ld.write("gate.yaml", GATE_GRAPH)
        ld.write("policies/sources.yaml", BY_SOURCE)
        ld.write_config("serve: {tokenEnv: LOOP_TOKEN}\n"
                        "hooks:\n  - {name: house, policy: policies}\n", graph="gate.yaml")
        ref = ld.add("Review the login page")
        ld.start(ref)
        ld.cli("poll", "--once")
        assert ld.work(ref)["state"] == "gate"
        ld.ok("items", "comment", ref, "written on the tracker", "--author", "bob")
        ld.ok("reply", ref, "sent with the-loop reply", "--actor", "carol")

        loop = Loop(read_config(ld.config), strict_hooks=True, source="serve")
        server = ControlServer(loop, "127.0.0.1", 0, "LOOP_TOKEN")
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:  # serve delivers what is queued on the item, then its own input
            got = _post(f"{server.url}/items/{urllib.parse.quote(ref, safe='')}/input",
                        {"text": "sent to the control plane", "actor": "dave"})
        finally:
            server.shutdown()
            server.server_close()
            thread.join()
            server.close_loops()
        assert got["done"] == "refused"

        refused = {r["actor"]: r["reason"] for r in ld.events("input.refused")}
        assert refused == {"bob": "SOURCE=comment", "carol": "SOURCE=reply",
                           "dave": "SOURCE=api"}
        drops = sorted(c for c in ld.comments(ref) if "was dropped" in c)
        assert drops == sorted(
            f"Input from @{who} was dropped by hook `house` at `input_received`: SOURCE={s}"
            for who, s in (("bob", "comment"), ("carol", "reply"), ("dave", "api")))
