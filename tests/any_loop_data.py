"""Shared data for the interop tests: requests shaped as the other the-loop sends them, the
rules that answer them, a hook file in that loop's style, and what each point must decide."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

#: The `params` the open-source the-loop sends, per point, every field at its default.
PARAMS: dict[str, dict[str, Any]] = json.loads(
    (Path(__file__).parent / "data" / "upstream-wire" / "params.json").read_text("utf-8")
)

ITEM = {"ref": "github:acme/app#7", "provider": "github", "host": "github.com",
        "owner": "acme", "repo": "app", "repository": "acme/app", "number": 7,
        "url": "https://github.com/acme/app/issues/7", "id": "issue-7"}

#: Values filled into the shape above (never a key it does not have).
VALUES: dict[str, dict[str, Any]] = {
    "work_item_start": {"work_item": ITEM, "loop": "pdlc", "command": "start",
                        "actor": "mallory", "harness": "claude", "instance": "east"},
    "session_spawn": {"work_item": ITEM, "endpoint": ITEM, "harness": "claude",
                      "cwd": "/w/app", "effort": "high", "harness_args": ["--x"],
                      "prompt": "Fix the login bug."},
    "session_spawned": {"work_item": ITEM, "endpoint": ITEM, "harness": "claude",
                        "harness_session_id": "quiet-42", "tmux_target": "t:1"},
    "waiting_for_input": {"work_item": ITEM, "node": "design", "actor": "agent",
                          "question": "Which database?"},
    "input_received": {"work_item": ITEM, "kind": "command", "actor": "mallory",
                       "source": "verb", "command": "stop", "event": "issue_comment",
                       "text": "/stop"},
    "phase_changed": {"work_item": ITEM, "from_node": "requirements", "to_node": "design",
                      "from_phase": "requirements", "to_phase": "design",
                      "outcome": "approved", "actor": "human"},
    "work_item_complete": {"work_item": ITEM, "state": "merged", "kind": "pull-request",
                           "reason": "pr-merged", "source": "webhook"},
}

#: What our rules decide for each request above (only the decisions that change).
EXPECTED: dict[str, dict[str, Any]] = {
    "work_item_start": {"proceed": False,
                        "reason": "only alice starts github items (github:acme/app#7)"},
    "session_spawn": {"prompt": "[acme/app] Fix the login bug."},
    "session_spawned": {"announce": False},
    "waiting_for_input": {"summary": "asked at design of github:acme/app#7"},
    "input_received": {"proceed": False, "reason": "only alice may stop (mallory asked)"},
    "phase_changed": {"notify": False},
    "work_item_complete": {"announce": False},
}

#: The same decisions as policy rules; each reads a fact the other loop sends, some through
#: the names it maps (provider → tracker, command → control, harness_session_id →
#: session_id, kind "" → question, work_item_complete's kind → work_item.kind).
RULES = """\
rules:
  - name: github-starts-need-alice
    on: work_item_start
    when: "work_item.tracker == 'github' && actor != 'alice'"
    set:
      proceed: false
      reason: "only alice starts github items ({{ work_item.ref }})"
  - name: repository-prefix
    on: session_spawn
    when: "work_item.kind == 'issue'"
    set:
      prompt_prefix: "[{{ work_item.repository }}] "
  - name: quiet-sessions
    on: session_spawned
    when: "starts_with(session_id, 'quiet-')"
    set:
      announce: false
  - name: question-summary
    on: waiting_for_input
    when: "kind == 'question'"
    set:
      summary: "asked at {{ node }} of {{ work_item.ref }}"
  - name: stop-needs-alice
    on: input_received
    when: "control == 'stop' && actor != 'alice'"
    set:
      proceed: false
      reason: "only alice may stop ({{ actor }} asked)"
  - name: no-design-notices
    on: phase_changed
    when: "to_phase == 'design'"
    set:
      notify: false
  - name: merged-prs-are-quiet
    on: work_item_complete
    when: "work_item.kind == 'pull-request'"
    set:
      announce: false
"""

#: The same decisions written as a hook file for the other loop's SDK would be: only the
#: names both SDKs share (written for these tests, in that style).
THEIR_STYLE_HOOK = '''\
"""House rules for the delivery loop, as one hook class."""

from typing import Optional

from the_loop.sdk.hooks import (
    POINTS,
    Context,
    DecisionTypeError,
    InputReceived,
    LifecycleHooks,
    PhaseChanged,
    SessionSpawn,
    SessionSpawned,
    WaitingForInput,
    WorkItem,
    WorkItemComplete,
    WorkItemStart,
)


def _item(ctx: Context) -> WorkItem:
    # A record rebuilt from its ref must agree with the one the loop sent.
    rebuilt = WorkItem.from_ref(ctx.work_item.ref, kind=ctx.work_item.kind)
    assert rebuilt.provider == ctx.work_item.provider, (rebuilt, ctx.work_item)
    return ctx.work_item


class HouseRules(LifecycleHooks):
    """Refuse, rewrite and quieten, point by point."""

    def work_item_start(self, ctx: WorkItemStart) -> Optional[WorkItemStart]:
        if _item(ctx).provider == "github" and ctx.to_params()["actor"] != "alice":
            ctx.apply({"proceed": False,
                       "reason": f"only alice starts github items ({ctx.work_item.ref})"})
            return ctx
        return None

    def session_spawn(self, ctx: SessionSpawn) -> Optional[SessionSpawn]:
        try:
            ctx.apply({"proceed": "yes"})
        except DecisionTypeError:
            pass  # refused, never coerced: nothing was set
        if ctx.work_item.kind == "issue":
            ctx.prompt = f"[{ctx.work_item.repository}] " + ctx.prompt
        return ctx

    def session_spawned(self, ctx: SessionSpawned) -> Optional[SessionSpawned]:
        if ctx.session_id.startswith("quiet-"):
            ctx.announce = False
        return ctx

    def waiting_for_input(self, ctx: WaitingForInput) -> Optional[WaitingForInput]:
        if ctx.kind == "question":
            ctx.summary = f"asked at {ctx.node} of {ctx.work_item.ref}"
        return ctx

    def input_received(self, ctx: InputReceived) -> Optional[InputReceived]:
        if ctx.control == "stop" and ctx.actor != "alice":
            ctx.proceed = False
            ctx.reason = f"only alice may stop ({ctx.actor} asked)"
        return ctx

    def phase_changed(self, ctx: PhaseChanged) -> Optional[PhaseChanged]:
        if "notify" in ctx.decisions() and ctx.to_phase == "design":
            ctx.notify = False
        return ctx

    def work_item_complete(self, ctx: WorkItemComplete) -> Optional[WorkItemComplete]:
        if ctx.work_item.kind == "pull-request":
            ctx.announce = False
        return ctx


assert all(HouseRules().handles(point) for point in POINTS)
'''


def upstream_request(point: str, rid: int = 1) -> dict[str, Any]:
    """A JSON-RPC request whose params have exactly the keys the other loop sends."""
    params = copy.deepcopy(PARAMS[point])
    for key, value in VALUES[point].items():
        assert key in params, (point, key)
        if isinstance(value, dict):
            assert set(value) <= set(params[key]), (point, key)
            params[key].update(value)
        else:
            params[key] = value
    return {"jsonrpc": "2.0", "id": rid, "method": point, "params": params}
