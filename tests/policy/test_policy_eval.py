"""Evaluating policy rules through the real chain (issue 5, build item 4). Names: i5_<item>."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from the_loop.events import EventLog
from the_loop.hooks.declaring.loading import load_chain
from the_loop.hooks.engine.chain import Chain, Link
from the_loop.hooks.engine.executor import LifecycleHooks
from the_loop.hooks.engine.points import (
    InputReceived,
    PhaseChanged,
    SessionSpawn,
    WorkItem,
    WorkItemStart,
)
from the_loop.hooks.executors.policy import PolicyExecutor, load_policy

ITEM = WorkItem(ref="local:acme/app#1", tracker="local", owner="acme", repo="app",
                repository="acme/app", number=1, kind="issue")
PR = WorkItem(ref="local:acme/app#2", repository="acme/app", number=2, kind="pull-request")
ROOT = Path(__file__).resolve().parents[2]


def write(folder: Path, name: str, rules: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    body = "rules:\n" + textwrap.indent(textwrap.dedent(rules), "  ")
    (folder / name).write_text(body, encoding="utf-8")


def chain_of(
    folder: Path, *before: LifecycleHooks, required: bool = False, reference: bool = False
) -> tuple[Chain, PolicyExecutor]:
    executor = load_policy("house", folder, reference=reference)
    links = [Link(f"h{i}", h, frozenset(h.overridden_points())) for i, h in enumerate(before)]
    links.append(Link("house", executor, frozenset(executor.points()), required))
    chain = Chain(links, log=EventLog())
    executor.bind_log(chain.log)
    return chain, executor


# ------------------------------------------------------------------ refusals


def test_i5_4_refusal_sticks_across_rules_and_first_reason_is_kept(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", """
        - {name: first, on: work_item_start, set: {proceed: false, reason: "first says no"}}
        - {name: second, on: work_item_start, set: {proceed: false, reason: "second says no"}}
        - {name: later-reason, on: work_item_start, set: {reason: "overwritten?"}}
    """)
    chain, _ = chain_of(tmp_path)
    out = chain.run(WorkItemStart(work_item=ITEM))
    assert (out.proceed, out.reason) == (False, "first says no")
    decided = chain.log.of("hooks.decided")[0]
    assert decided["rules"] == ["first", "second", "later-reason"]
    assert chain.log.of("hooks.refused")[0]["reason"] == "first says no"


def test_i5_4_refusal_sticks_across_files(tmp_path: Path) -> None:
    write(tmp_path, "10-first.yaml", """
        - {name: from-a, on: session_spawn, set: {proceed: false, reason: "a"}}
    """)
    write(tmp_path, "20-second.yaml", """
        - {name: from-b, on: session_spawn, set: {proceed: false, reason: "b"}}
    """)
    out = chain_of(tmp_path)[0].run(SessionSpawn(work_item=ITEM))
    assert (out.proceed, out.reason) == (False, "a")


def test_i5_4_a_reason_set_before_the_refusal_is_replaced_by_the_refusals(
    tmp_path: Path,
) -> None:
    write(tmp_path, "a.yaml", """
        - {name: note, on: work_item_start, set: {reason: "just a note"}}
        - {name: refuse, on: work_item_start, set: {proceed: false}}
    """)
    out = chain_of(tmp_path)[0].run(WorkItemStart(work_item=ITEM))
    assert (out.proceed, out.reason) == (False, "refused by policy rule 'refuse'")


def test_i5_4_an_earlier_hooks_refusal_sticks_through_the_policy(tmp_path: Path) -> None:
    class Refuse(LifecycleHooks):
        def work_item_start(self, ctx: WorkItemStart) -> WorkItemStart:
            ctx.proceed, ctx.reason = False, "code hook says no"
            return ctx

    write(tmp_path, "a.yaml", """
        - name: sees-the-refusal
          on: work_item_start
          when: "proceed == `false`"
          set: {proceed: false, reason: "policy says no too"}
    """)
    out = chain_of(tmp_path, Refuse())[0].run(WorkItemStart(work_item=ITEM))
    assert (out.proceed, out.reason) == (False, "code hook says no")


# ------------------------------------------------------------------ composition


def test_i5_4_prefixes_and_suffixes_compose_in_rule_order(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", """
        - {name: a, on: session_spawn, set: {prompt_prefix: "A<", prompt_suffix: ">A"}}
        - {name: b, on: session_spawn, set: {prompt_prefix: "B<", prompt_suffix: ">B"}}
    """)
    out = chain_of(tmp_path)[0].run(SessionSpawn(work_item=ITEM, prompt="P"))
    assert out.prompt == "A<B<P>A>B"


def test_i5_4_affixes_wrap_a_prompt_another_rule_replaced(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", """
        - {name: wrap, on: session_spawn, set: {prompt_prefix: "[", prompt_suffix: "]"}}
        - {name: replace, on: session_spawn, set: {prompt: "new"}}
    """)
    out = chain_of(tmp_path)[0].run(SessionSpawn(work_item=ITEM, prompt="old"))
    assert out.prompt == "[new]"


def test_i5_4_text_affixes_at_input_received(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", """
        - name: tag
          on: input_received
          set: {text_prefix: "[{{ actor }}] ", text_suffix: " (via {{ source }})"}
    """)
    out = chain_of(tmp_path)[0].run(
        InputReceived(work_item=ITEM, actor="alice", source="comment", text="looks good")
    )
    assert out.text == "[alice] looks good (via comment)"


def test_i5_4_later_plain_decision_wins(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", """
        - {name: off, on: phase_changed, set: {notify: false}}
        - {name: on-again, on: phase_changed, when: "terminal", set: {notify: true}}
    """)
    chain = chain_of(tmp_path)[0]
    assert chain.run(PhaseChanged(work_item=ITEM, terminal=False)).notify is False
    assert chain.run(PhaseChanged(work_item=ITEM, terminal=True)).notify is True


# ------------------------------------------------------------------ what rules see


def test_i5_4_rules_see_the_context_as_it_entered(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", """
        - {name: rewrite, on: session_spawn, set: {prompt: "rewritten"}}
        - name: sees-original
          on: session_spawn
          when: "prompt == 'original'"
          set: {prompt_suffix: " / saw {{ prompt }}"}
    """)
    out = chain_of(tmp_path)[0].run(SessionSpawn(work_item=ITEM, prompt="original"))
    assert out.prompt == "rewritten / saw original"


def test_i5_4_order_never_changes_which_rules_match(tmp_path: Path) -> None:
    rules = [
        '- {name: refuse, on: work_item_start, set: {proceed: false, reason: "no"}}\n',
        '- {name: only-if-open, on: work_item_start, when: "proceed", set: {reason: "x"}}\n',
    ]
    results = []
    for i, order in enumerate((rules, rules[::-1])):
        folder = tmp_path / str(i)
        write(folder, "a.yaml", "".join(order))
        chain = chain_of(folder)[0]
        chain.run(WorkItemStart(work_item=ITEM))
        results.append(sorted(chain.log.of("hooks.decided")[0]["rules"]))
    assert results[0] == results[1] == ["only-if-open", "refuse"]


def test_i5_2_templates_render_strings_numbers_lists_and_null(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", """
        - name: all-kinds
          on: work_item_start
          set:
            proceed: false
            reason: "{{ work_item.ref }} #{{ work_item.number }} {{ labels }} [{{ labels[5] }}] {{ upper(actor) }}"
    """)  # noqa: E501
    out = chain_of(tmp_path)[0].run(
        WorkItemStart(work_item=ITEM, labels=["loop", "x"], actor="bob")
    )
    assert out.reason == 'local:acme/app#1 #1 ["loop","x"] [] BOB'


def test_i5_4_when_uses_jmespath_truth(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", """
        - {name: has-labels, on: phase_changed, when: "labels", set: {notify: false}}
    """)
    chain = chain_of(tmp_path)[0]
    assert chain.run(PhaseChanged(work_item=ITEM, labels=[])).notify is True
    assert chain.run(PhaseChanged(work_item=ITEM, labels=["a"])).notify is False


def test_i5_4_only_rules_declared_for_the_point_are_looked_at(tmp_path: Path) -> None:
    # This rule would fail at run time (length of a number) if it were evaluated anywhere.
    write(tmp_path, "a.yaml", """
        - {name: elsewhere, on: phase_changed, when: "length(not_null(work_item.number)) > `0`",
           set: {notify: false}}
        - {name: here, on: session_spawn, set: {prompt_prefix: "x"}}
    """)
    chain, executor = chain_of(tmp_path)
    assert executor.rules_at("session_spawn") == ["here"]
    assert chain.run(SessionSpawn(work_item=ITEM, prompt="p")).prompt == "xp"
    assert chain.log.of("hooks.failed") == []


def test_i5_4_no_matching_rule_passes_through(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", """
        - {name: prs, on: session_spawn, when: "work_item.kind == 'pull-request'",
           set: {proceed: false}}
    """)
    chain = chain_of(tmp_path)[0]
    outcome = chain.invoke(SessionSpawn(work_item=ITEM))
    assert outcome.steps[0].status == "unchanged" and outcome.context.proceed is True
    assert chain.log.of("hooks.decided") == []


# ------------------------------------------------------------------ audit


def test_i5_4_audit_changes_nothing_and_is_recorded(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", """
        - name: strict
          on: work_item_start
          mode: audit
          when: "!contains(labels, 'loop')"
          set: {proceed: false, reason: "{{ work_item.ref }} has no loop label"}
    """)
    chain = chain_of(tmp_path)[0]
    out = chain.run(WorkItemStart(work_item=ITEM, labels=[]))
    assert (out.proceed, out.reason) == (True, "")
    assert chain.log.of("hooks.decided") == [] and chain.log.of("hooks.refused") == []
    [audit] = chain.log.of("hooks.audit")
    assert audit["point"] == "work_item_start" and audit["hook"] == "house"
    assert audit["rules"] == ["strict"]
    assert audit["would"] == {
        "strict": {"proceed": False, "reason": "local:acme/app#1 has no loop label"}
    }
    assert audit["work_item"] == "local:acme/app#1"


def test_i5_4_audit_beside_enforce_names_each_in_its_own_event(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", """
        - {name: trial, on: session_spawn, mode: audit, set: {prompt_prefix: "TRIAL "}}
        - {name: real, on: session_spawn, set: {prompt_prefix: "REAL "}}
    """)
    chain = chain_of(tmp_path)[0]
    assert chain.run(SessionSpawn(work_item=ITEM, prompt="p")).prompt == "REAL p"
    assert chain.log.of("hooks.decided")[0]["rules"] == ["real"]
    assert chain.log.of("hooks.audit")[0]["rules"] == ["trial"]


def test_i5_4_failing_audit_rule_is_recorded_and_changes_nothing(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", """
        - {name: trial, on: work_item_start, mode: audit,
           when: "length(not_null(work_item.number)) > `0`",
           set: {proceed: false}}
    """)
    chain = chain_of(tmp_path, required=True)[0]
    out = chain.run(WorkItemStart(work_item=ITEM))
    assert out.proceed is True and chain.log.of("hooks.failed") == []
    [audit] = chain.log.of("hooks.audit")
    assert audit["rules"] == []
    assert "policy rule 'trial'" in audit["errors"][0]
    assert "'length(not_null(work_item.number)) > `0`' failed at run time" in audit["errors"][0]


# ------------------------------------------------------------------ run-time errors


def test_i5_4_runtime_error_fails_the_executor_naming_file_rule_expression(
    tmp_path: Path,
) -> None:
    write(tmp_path, "a.yaml", """
        - name: bad-regex
          on: input_received
          when: "regex_match(text, 'x')"
          set: {proceed: false}
    """)
    chain = chain_of(tmp_path)[0]
    out = chain.run(InputReceived(work_item=ITEM, text="(unclosed"))
    assert out.proceed is True  # not required: skipped, recorded
    [failed] = chain.log.of("hooks.failed")
    assert failed["hook"] == "house" and failed["point"] == "input_received"
    assert failed["error"].startswith(
        "policy rule 'bad-regex' (a.yaml) → when: \"regex_match(text, 'x')\" "
        "failed at run time:"
    )
    assert "invalid regular expression" in failed["error"]


def test_i5_4_runtime_error_in_a_required_policy_refuses(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", """
        - name: tpl
          on: work_item_start
          set: {reason: "{{ length(not_null(work_item.number)) }}"}
    """)
    chain = chain_of(tmp_path, required=True)[0]
    out = chain.run(WorkItemStart(work_item=ITEM))
    assert out.proceed is False
    assert out.reason.startswith("required hook 'house' failed: policy rule 'tpl'")
    assert ("→ set.reason: '{{ length(not_null(work_item.number)) }}' failed at run "
            "time") in out.reason


# ------------------------------------------------------------------ declared in config


def test_i5_4_hooks_decided_names_the_rules_from_a_declared_entry(
    tmp_path: Path, write_config: Any
) -> None:
    write(tmp_path / "policies", "a.yaml", """
        - {name: preamble, on: session_spawn, set: {prompt_prefix: "Rules. "}}
    """)
    config = write_config("""
        hooks:
          - name: house-rules
            policy: policies
            on: [session_spawn]
    """)
    log = EventLog()
    chain = load_chain(config, log=log)
    assert chain.names("session_spawn") == ["house-rules"]
    assert chain.names("phase_changed") == []
    assert chain.run(SessionSpawn(work_item=ITEM, prompt="go")).prompt == "Rules. go"
    [decided] = log.of("hooks.decided")
    assert decided["hook"] == "house-rules" and decided["rules"] == ["preamble"]
    assert decided["changed"] == ["prompt"]


@pytest.mark.parametrize("point_ctx", [
    WorkItemStart(work_item=WorkItem(ref="local:evil/x#1", repository="evil/x")),
    SessionSpawn(work_item=PR, prompt="p", respawn=True),
    InputReceived(work_item=ITEM, control="approve", actor="mallory", text="/approve"),
    PhaseChanged(work_item=ITEM, labels=["quiet"]),
])
def test_i5_4_compiled_and_reference_interpreter_agree_on_the_examples(point_ctx: Any) -> None:
    compiled = chain_of(ROOT / "policies")[0]
    reference = chain_of(ROOT / "policies", reference=True)[0]
    a, b = compiled.invoke(point_ctx), reference.invoke(point_ctx)
    assert a.context == b.context
    assert [s.detail for s in a.steps] == [s.detail for s in b.steps]


def test_i5_4_audit_of_a_declared_entry_reaches_the_chains_log(
    tmp_path: Path, write_config: Any
) -> None:
    write(tmp_path / "policies", "a.yaml", """
        - {name: trial, on: work_item_start, mode: audit, set: {proceed: false}}
    """)
    config = write_config("hooks:\n  - name: house-rules\n    policy: policies\n")
    log = EventLog()
    load_chain(config, log=log).run(WorkItemStart(work_item=ITEM))
    assert log.of("hooks.audit")[0]["rules"] == ["trial"]
