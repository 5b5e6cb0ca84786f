"""The chain's rules (R2.2–R2.4, R5.3, R6.1–R6.3): one test per rule, named after it."""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import weakref
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hook_helpers import at
from the_loop.events import EventLog
from the_loop.hooks.engine.chain import Chain, Link, Outcome
from the_loop.hooks.engine.executor import Decisions, HookError, LifecycleHooks
from the_loop.hooks.engine.points import (
    POINTS,
    SPECS,
    InputReceived,
    PhaseChanged,
    SessionSpawn,
    SessionSpawned,
    WaitingForInput,
    WorkItem,
    WorkItemComplete,
    WorkItemStart,
)
from the_loop.hooks.executors.policy import load_policy

ITEM = WorkItem(ref="local:acme/app#7", tracker="local", repository="acme/app", number=7)


class Fn(LifecycleHooks):
    """A hook whose behaviour at every point is the function it is given."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def _call(self, ctx: Any) -> Any:
        return self.fn(ctx)

    work_item_start = session_spawn = session_spawned = waiting_for_input = _call  # type: ignore[assignment]
    input_received = phase_changed = work_item_complete = _call  # type: ignore[assignment]


def chain(*fns: Any, required: tuple[str, ...] = ()) -> tuple[Chain, EventLog]:
    """A chain of hooks named h1, h2, … running `fns` at every point."""
    log = EventLog()
    links = [
        Link(f"h{i}", Fn(fn), frozenset(POINTS), f"h{i}" in required)
        for i, fn in enumerate(fns, start=1)
    ]
    return Chain(links, log=log), log


def spawn(**kw: Any) -> SessionSpawn:
    base: dict[str, Any] = {
        "work_item": ITEM, "loop": "acme", "labels": ["loop"], "harness": "demo",
        "command": ["python3", "-m", "agent"], "prompt": "Fix the bug.",
    }
    base.update(kw)
    return SessionSpawn(**base)


def snapshot(ctx: Any) -> dict[str, Any]:
    return {f.name: getattr(ctx, f.name) for f in dataclasses.fields(ctx)}


def events(log: EventLog) -> list[tuple[str, str]]:
    return [(r["event"], r.get("hook", "")) for r in log.memory]


# ------------------------------------------------------------------ pass through / replace


def test_r2_2_none_passes_through() -> None:
    c, log = chain(lambda ctx: None)
    ctx = spawn()
    before = snapshot(ctx)
    out = c.run(ctx)
    assert snapshot(out) == before
    assert log.memory == []


def test_a_subclass_of_a_points_context_is_refused_by_name() -> None:
    """Only a point's own context class runs the chain; a subclass is named, not run."""

    class MySpawn(SessionSpawn):
        pass

    c, log = chain(lambda ctx: None)
    with pytest.raises(TypeError, match="MySpawn is not a lifecycle context"):
        c.run(MySpawn(work_item=ITEM))
    assert log.memory == []


def test_r2_2_in_place_edit_then_none_passes_through_unchanged() -> None:
    """Returning None means 'no change', even if the hook scribbled on its copy first."""

    def scribble(ctx: SessionSpawn) -> None:
        ctx.prompt = "scribbled"
        ctx.labels.append("x")

    c, _ = chain(scribble)
    ctx = spawn()
    out = c.run(ctx)
    assert out.prompt == "Fix the bug." and out.labels == ["loop"]
    assert ctx.labels == ["loop"]


def test_r2_2_returned_context_replaces_decisions_edited_in_place() -> None:
    def edit(ctx: SessionSpawn) -> SessionSpawn:
        ctx.prompt = "ACME: " + ctx.prompt
        return ctx

    c, _ = chain(edit)
    out = c.run(spawn())
    assert out.prompt == "ACME: Fix the bug."
    assert type(out) is SessionSpawn


def test_r2_2_returned_copy_replaces_decisions() -> None:
    c, _ = chain(lambda ctx: dataclasses.replace(ctx, proceed=False, reason="frozen"))
    out = c.run(WorkItemStart(work_item=ITEM))
    assert (out.proceed, out.reason) == (False, "frozen")


def test_r2_2_the_callers_context_is_never_modified() -> None:
    def edit(ctx: SessionSpawn) -> SessionSpawn:
        ctx.prompt = "changed"
        ctx.command.append("--evil")
        return ctx

    c, _ = chain(edit)
    ctx = spawn()
    before = snapshot(ctx)
    out = c.run(ctx)
    assert out is not ctx
    assert snapshot(ctx) == before
    assert out.prompt == "changed"


# ------------------------------------------------------------------------------ order


def test_r2_3_executors_run_in_declaration_order_and_see_earlier_decisions() -> None:
    seen: list[tuple[str, str]] = []

    def first(ctx: SessionSpawn) -> SessionSpawn:
        seen.append(("h1", ctx.prompt))
        ctx.prompt = "[1] " + ctx.prompt
        return ctx

    def second(ctx: SessionSpawn) -> SessionSpawn:
        seen.append(("h2", ctx.prompt))
        ctx.prompt = "[2] " + ctx.prompt
        return ctx

    c, _ = chain(first, second)
    out = c.run(spawn(prompt="p"))
    assert seen == [("h1", "p"), ("h2", "[1] p")]
    assert out.prompt == "[2] [1] p"


def test_r2_3_decisions_after_the_last_executor_are_the_result() -> None:
    c, _ = chain(
        lambda ctx: dataclasses.replace(ctx, question="Q1", summary="S1"),
        lambda ctx: dataclasses.replace(ctx, question="Q2"),
    )
    out = c.run(WaitingForInput(question="Q0", summary="S0"))
    assert (out.question, out.summary) == ("Q2", "S1")


# --------------------------------------------------------------------- own copy


def test_r6_1_in_place_edit_then_raise_leaves_nothing_lists_included() -> None:
    seen: list[Any] = []

    def edit_then_raise(ctx: SessionSpawn) -> None:
        ctx.prompt = "half-done"
        ctx.proceed = False
        ctx.labels.append("poison")
        ctx.command.clear()
        raise RuntimeError("changed my mind")

    def look(ctx: SessionSpawn) -> None:
        seen.append((ctx.prompt, ctx.proceed, list(ctx.labels), list(ctx.command)))

    c, log = chain(edit_then_raise, look)
    ctx = spawn()
    out = c.run(ctx)
    original = ("Fix the bug.", True, ["loop"], ["python3", "-m", "agent"])
    assert seen == [original]
    assert (out.prompt, out.proceed, out.labels, out.command) == original
    assert (ctx.prompt, ctx.proceed, ctx.labels, ctx.command) == original
    assert events(log) == [("hooks.failed", "h1")]


def test_r6_1_in_place_edit_then_wrong_type_leaves_nothing() -> None:
    def lie(ctx: SessionSpawn) -> SessionSpawn:
        ctx.prompt = "looks fine"
        ctx.labels.append("poison")
        ctx.proceed = "no"  # type: ignore[assignment]
        return ctx

    c, _ = chain(lie)
    out = c.run(spawn())
    assert (out.prompt, out.proceed, out.labels) == ("Fix the bug.", True, ["loop"])


def through(c: Chain, how: str, ctx: Any) -> Any:
    """Run `ctx` through the chain as `run` or as the traced `invoke` does."""
    return c.run(ctx) if how == "run" else c.invoke(ctx).context


@pytest.mark.parametrize("how", ["run", "invoke"])
def test_r6_1_a_context_a_hook_keeps_stays_as_it_left_it(how: str) -> None:
    """A hook that keeps its context (to look at later) keeps what it saw, not what the
    next executor is handed and changes."""
    kept: list[SessionSpawn] = []

    def keep(ctx: SessionSpawn) -> None:
        ctx.prompt = "mine"
        kept.append(ctx)

    def edit(ctx: SessionSpawn) -> SessionSpawn:
        ctx.prompt = "theirs"
        ctx.labels.append("theirs")
        return ctx

    c, _ = chain(keep, edit)
    out = through(c, how, spawn())
    assert (out.prompt, out.labels) == ("theirs", ["loop"])
    assert (kept[0].prompt, kept[0].labels) == ("mine", ["loop"])
    assert kept[0] is not out


@pytest.mark.parametrize("how", ["run", "invoke"])
@pytest.mark.parametrize("hold", ["strong", "weak"])
def test_r6_1_a_kept_context_edited_later_changes_nothing_the_next_hook_sees(
    hold: str, how: str
) -> None:
    """A hook that leaves a thread behind editing its context while the next hook runs
    (holding it, or a weak reference to it) cannot reach that hook's context."""
    go, done = threading.Event(), threading.Event()
    seen: list[tuple[str, list[str]]] = []

    def leave_a_thread(ctx: SessionSpawn) -> None:
        ref: Any = (lambda: ctx) if hold == "strong" else weakref.ref(ctx)

        def edit_later() -> None:
            go.wait(10)
            target = ref()
            if target is not None:
                target.prompt = "leaked"
                target.labels.append("leaked")
            done.set()

        threading.Thread(target=edit_later, daemon=True).start()

    def look(ctx: SessionSpawn) -> None:
        go.set()
        assert done.wait(10)
        seen.append((ctx.prompt, list(ctx.labels)))

    c, log = chain(leave_a_thread, look)
    out = through(c, how, spawn())
    assert seen == [("Fix the bug.", ["loop"])]
    assert (out.prompt, out.labels) == ("Fix the bug.", ["loop"])
    assert log.memory == []


@pytest.mark.parametrize("how", ["run", "invoke"])
def test_r6_1_a_hook_that_changes_its_contexts_class_changes_nothing_for_the_next(
    how: str
) -> None:
    seen: list[str] = []

    def disguise(ctx: Any) -> None:
        ctx.__class__ = WorkItemStart

    def look(ctx: Any) -> None:
        seen.append(type(ctx).__name__)

    c, log = chain(disguise, look)
    out = through(c, how, spawn())
    assert seen == ["SessionSpawn"]
    assert type(out) is SessionSpawn and log.memory == []


# -------------------------------------------------------------------------- facts


def test_r2_2_changed_fact_is_ignored_and_the_drop_recorded() -> None:
    def rewrite_facts(ctx: SessionSpawn) -> SessionSpawn:
        ctx.prompt = "kept"
        ctx.loop = "other-loop"
        ctx.harness = "root-shell"
        ctx.labels.append("trusted")
        ctx.work_item = WorkItem(ref="local:evil/x#1")
        return ctx

    c, log = chain(rewrite_facts)
    o = c.invoke(spawn())
    out = o.context
    assert out.prompt == "kept"
    assert (out.loop, out.harness, out.labels, out.work_item) == ("acme", "demo", ["loop"], ITEM)
    dropped = log.of("hooks.dropped")
    assert len(dropped) == 1
    assert dropped[0]["hook"] == "h1" and dropped[0]["point"] == "session_spawn"
    assert dropped[0]["dropped"] == ["harness", "labels", "loop", "work_item"]
    assert o.steps[0].dropped == ["harness", "labels", "loop", "work_item"]
    assert [r["changed"] for r in log.of("hooks.decided")] == [["prompt"]]
    assert not log.of("hooks.failed")


def test_r6_1_a_misspelt_decision_is_that_hooks_failure_with_a_did_you_mean() -> None:
    """Issue 30 item 2: `ctx.procede = False` is neither a fact nor a decision: the hook
    fails (never "ignored"), so a required hook refuses instead of letting the launch go."""

    def typo(ctx: SessionSpawn) -> SessionSpawn:
        ctx.prompt = "not applied either"
        ctx.procede = False  # type: ignore[attr-defined]
        return ctx

    c, log = chain(typo, required=("h1",))
    o = c.invoke(spawn())
    error = log.of("hooks.failed")[0]["error"]
    assert error.startswith(
        "set 'procede', which is neither a fact nor a decision of session_spawn (did you "
        "mean 'proceed'?); its decisions are prompt, proceed, reason")
    assert o.context.proceed is False and o.refused_by == "h1"
    assert o.context.prompt == "Fix the bug."  # nothing from the failing hook is applied
    assert o.context.reason.startswith("required hook 'h1' failed: set 'procede'")
    assert not log.of("hooks.dropped")

    c, log = chain(typo)  # not required: recorded, and the launch goes on untouched
    out = c.run(spawn())
    assert out.proceed is True and out.prompt == "Fix the bug."
    assert log.of("hooks.failed")[0]["error"].startswith("set 'procede'")


def test_abuse_2_facts_and_unknown_keys_in_a_patch_are_ignored() -> None:
    patch = Decisions({"prompt": "p2", "loop": "evil", "harness": "sh", "admin": True})
    c, log = chain(lambda ctx: patch)
    out = c.run(spawn())
    assert (out.prompt, out.loop, out.harness) == ("p2", "acme", "demo")
    assert log.of("hooks.dropped")[0]["dropped"] == ["admin", "harness", "loop"]


def test_abuse_2_a_patch_detail_cannot_break_or_forge_the_decided_record() -> None:
    """A patch's detail adds fields to hooks.decided; the ones the record and the chain
    own (event, ts, source, pid, point, hook, changed, work_item) are never taken from it."""
    forged = {"event": "hooks.refused", "ts": 0, "source": "forged", "pid": -1,
              "point": "work_item_start", "hook": "someone-else", "changed": [],
              "work_item": "local:evil/x#1", "note": "kept"}
    c, log = chain(lambda ctx: Decisions({"prompt": "p2"}, detail=dict(forged)))
    out = c.run(spawn())
    assert out.prompt == "p2"
    [record] = log.memory
    assert record["event"] == "hooks.decided" and record["source"] == "the-loop"
    assert record["pid"] == os.getpid() and record["ts"] > 0
    assert (record["point"], record["hook"], record["changed"], record["work_item"]) == (
        "session_spawn", "h1", ["prompt"], ITEM.ref)
    assert record["note"] == "kept"


# --------------------------------------------------------------------- typed decisions

WRONG_TYPES = [
    pytest.param("proceed", "no", id="str-for-bool"),
    pytest.param("proceed", 1, id="one-is-not-True"),
    pytest.param("proceed", 0, id="zero-is-not-False"),
    pytest.param("proceed", None, id="None-for-bool"),
    pytest.param("prompt", True, id="bool-for-str"),
    pytest.param("prompt", 5, id="int-for-str"),
    pytest.param("prompt", None, id="None-for-str"),
    pytest.param("prompt", ["a"], id="list-for-str"),
]


@pytest.mark.parametrize(("key", "value"), WRONG_TYPES)
def test_r2_4_wrong_typed_decision_is_that_hooks_failure(key: str, value: Any) -> None:
    def lie(ctx: SessionSpawn) -> SessionSpawn:
        ctx.reason = "would be applied if the answer were good"
        setattr(ctx, key, value)
        return ctx

    c, log = chain(lie, lambda ctx: None)
    o = c.invoke(spawn())
    assert (o.context.prompt, o.context.proceed, o.context.reason) == ("Fix the bug.", True, "")
    failed = log.of("hooks.failed")
    assert len(failed) == 1 and failed[0]["hook"] == "h1"
    assert f"decision {key!r} must be " in failed[0]["error"]
    assert "nothing from this hook was applied" in failed[0]["error"]
    assert [s.status for s in o.steps] == ["failed", "unchanged"]
    assert log.of("hooks.decided") == []


@pytest.mark.parametrize(("key", "value"), WRONG_TYPES)
def test_r2_4_wrong_typed_decision_in_a_patch_is_never_half_applied(key: str, value: Any) -> None:
    c, log = chain(lambda ctx: Decisions({"reason": "r", key: value}))
    out = c.run(spawn())
    assert (out.prompt, out.proceed, out.reason) == ("Fix the bug.", True, "")
    assert len(log.of("hooks.failed")) == 1


def test_r2_4_bool_subclass_is_not_a_str_and_str_subclass_is_refused() -> None:
    class Sneaky(str):
        pass

    c, log = chain(lambda ctx: Decisions({"prompt": Sneaky("x")}))
    assert c.run(spawn()).prompt == "Fix the bug."
    assert "must be str" in log.of("hooks.failed")[0]["error"]


# --------------------------------------------------------------------------- failures

RAISES = [
    pytest.param(ValueError("bad value"), "ValueError: bad value", id="ValueError"),
    pytest.param(HookError("policy says no"), "policy says no", id="HookError"),
    pytest.param(SystemExit(3), "the hook called sys.exit(3)", id="SystemExit"),
    pytest.param(KeyError("k"), "KeyError: 'k'", id="KeyError"),
    pytest.param(RecursionError(), "RecursionError", id="RecursionError"),
]


@pytest.mark.parametrize(("exc", "message"), RAISES)
def test_r6_1_raising_executor_is_recorded_and_skipped(exc: BaseException, message: str) -> None:
    def boom(ctx: Any) -> None:
        raise exc

    c, log = chain(boom, lambda ctx: dataclasses.replace(ctx, prompt="second ran"))
    out = c.run(spawn())
    assert out.prompt == "second ran"
    failed = log.of("hooks.failed")
    assert [(r["point"], r["hook"], r["error"]) for r in failed] == [
        ("session_spawn", "h1", message + at(boom))  # … (at tests/hooks/test_chain.py:LINE)
    ]


def test_r6_1_sys_exit_inside_a_hook_does_not_exit() -> None:
    def leave(ctx: Any) -> None:
        sys.exit("bye")

    c, log = chain(leave)
    out = c.run(spawn())
    assert out.prompt == "Fix the bug."
    assert log.of("hooks.failed")[0]["error"] == "the hook called sys.exit('bye')" + at(leave)


@pytest.mark.parametrize(
    "answer", [True, "a prompt", {"prompt": "x"}, 0, ["x"], object()],
    ids=["bool", "str", "dict", "int", "list", "object"],
)
def test_r6_1_wrong_return_type_is_that_hooks_failure(answer: Any) -> None:
    c, log = chain(lambda ctx: answer)
    out = c.run(spawn())
    assert out.prompt == "Fix the bug."
    error = log.of("hooks.failed")[0]["error"]
    assert error == f"returned {type(answer).__name__}; expected SessionSpawn or None"


def test_r6_1_another_points_context_is_that_hooks_failure() -> None:
    c, log = chain(lambda ctx: SessionSpawned(announce=False))
    out = c.run(spawn())
    assert out.prompt == "Fix the bug."
    assert log.of("hooks.failed")[0]["error"] == (
        "returned a SessionSpawned (session_spawned's context) at session_spawn; "
        "expected SessionSpawn or None"
    )


def test_r6_1_the_rest_still_run_after_every_kind_of_failure() -> None:
    ran: list[str] = []

    def mark(tag: str, answer: Any) -> Any:
        def fn(ctx: Any) -> Any:
            ran.append(tag)
            if isinstance(answer, BaseException):
                raise answer
            return answer

        return fn

    c, log = chain(
        mark("raise", RuntimeError("x")), mark("exit", SystemExit(1)), mark("str", "nope"),
        mark("other", PhaseChanged()), mark("wrongtype", Decisions({"proceed": "yes"})),
        mark("last", Decisions({"prompt": "last word"})),
    )
    out = c.run(spawn())
    assert ran == ["raise", "exit", "str", "other", "wrongtype", "last"]
    assert out.prompt == "last word"
    assert [r["hook"] for r in log.of("hooks.failed")] == ["h1", "h2", "h3", "h4", "h5"]


BEHAVIOURS = st.sampled_from([
    "none", "prompt", "refuse", "allow", "raise", "exit", "wrong-type", "wrong-return",
    "other-point", "facts", "patch-facts", "patch-bad", "list-edit-raise",
])


def _behave(kind: str) -> Any:
    def fn(ctx: SessionSpawn) -> Any:
        if kind == "none":
            return None
        if kind == "prompt":
            ctx.prompt += "+"
            return ctx
        if kind == "refuse":
            return dataclasses.replace(ctx, proceed=False, reason="no")
        if kind == "allow":
            return dataclasses.replace(ctx, proceed=True, reason="")
        if kind == "raise":
            raise ValueError("boom")
        if kind == "exit":
            raise SystemExit(2)
        if kind == "wrong-type":
            ctx.proceed = 1  # type: ignore[assignment]
            return ctx
        if kind == "wrong-return":
            return {"prompt": "x"}
        if kind == "other-point":
            return WorkItemStart()
        if kind == "facts":
            ctx.labels.append("evil")
            ctx.loop = "evil"
            return ctx
        if kind == "patch-facts":
            return Decisions({"harness": "sh", "prompt": "patched"})
        if kind == "patch-bad":
            return Decisions({"prompt": "half", "proceed": "no"})
        ctx.command.append("rm -rf /")
        raise RuntimeError("after edit")

    return fn


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(BEHAVIOURS, st.booleans()), max_size=6))
def test_r6_2_the_chain_never_raises_and_its_result_stays_well_typed(
    plan: list[tuple[str, bool]],
) -> None:
    required = tuple(f"h{i}" for i, (_, req) in enumerate(plan, start=1) if req)
    c, log = chain(*[_behave(kind) for kind, _ in plan], required=required)
    ctx = spawn()
    before = snapshot(ctx)
    o = c.invoke(ctx)
    out = o.context
    assert snapshot(ctx) == before  # the caller's object is untouched
    for spec in SPECS["session_spawn"].facts:  # facts never change
        assert getattr(out, spec.name) == before[spec.name]
    assert type(out.prompt) is str and type(out.proceed) is bool and type(out.reason) is str
    assert len(o.steps) == len(plan)
    assert set(o.changed_by.values()) <= {f"h{i}" for i in range(1, len(plan) + 1)}
    assert len(log.of("hooks.refused")) == (0 if out.proceed else 1)


class Hostile:
    """A value whose comparison and printing raise."""

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("no comparing me")

    __ne__ = __eq__  # type: ignore[assignment]
    __hash__ = None  # type: ignore[assignment]


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no printing me")


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (lambda ctx: setattr(ctx, "loop", Hostile()) or ctx,
         "its answer could not be read back: RuntimeError: no comparing me"),
        (lambda ctx: Decisions(values=["prompt"]),  # type: ignore[arg-type]
         "its answer could not be read back: AttributeError: 'list' object has no attribute "
         "'items'"),
        (lambda ctx: Decisions({"prompt": "x"}, detail=5),  # type: ignore[arg-type]
         "its answer could not be read back: AttributeError: 'int' object has no attribute "
         "'items'"),
    ],
    ids=["fact-eq-raises", "patch-not-a-mapping", "detail-not-a-mapping"],
)
def test_r6_2_an_answer_that_cannot_be_read_back_is_that_hooks_failure(
    answer: Any, error: str
) -> None:
    c, log = chain(answer, lambda ctx: dataclasses.replace(ctx, reason="next ran"),
                   required=("h1",))
    out = c.run(spawn())
    assert (out.proceed, out.prompt) == (False, "Fix the bug.")
    assert out.reason == f"required hook 'h1' failed: {error}"
    assert log.of("hooks.failed")[0]["error"] == error


def test_r6_2_an_exception_whose_message_raises_is_still_recorded() -> None:
    def boom(ctx: Any) -> None:
        raise Unprintable()

    c, log = chain(boom)
    assert c.run(spawn()).prompt == "Fix the bug."
    assert log.of("hooks.failed")[0]["error"] == (
        "Unprintable: (its message could not be printed)" + at(boom)
    )


def test_r6_2_an_event_log_that_cannot_be_written_never_reaches_the_caller(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "state").write_text("a file where the state folder should be")
    log = EventLog(tmp_path / "state" / "events.jsonl")
    refuse = Fn(lambda ctx: dataclasses.replace(ctx, proceed=False, reason="no"))
    c = Chain([Link("refuse", refuse, frozenset(POINTS))], log=log)
    out = c.run(WorkItemStart())
    assert (out.proceed, out.reason) == (False, "no")
    err = capsys.readouterr().err
    # The log counts what it lost and says so once (then every 100th), naming the file.
    assert err.count("the-loop: cannot write the event log ") == 1
    assert "events.jsonl (Not a directory); 1 event(s) lost so far, the loop goes on" in err
    assert log.failed_writes == 2


# ------------------------------------------------------------------------------ required

PROCEED_POINTS = [WorkItemStart, SessionSpawn, InputReceived]
NO_PROCEED_POINTS = [SessionSpawned, WaitingForInput, PhaseChanged, WorkItemComplete]


@pytest.mark.parametrize("cls", PROCEED_POINTS, ids=lambda c: c.POINT)
def test_r6_3_required_failure_at_a_proceed_point_refuses_naming_hook_and_error(
    cls: type[Any],
) -> None:
    def down(ctx: Any) -> None:
        raise ConnectionError("compliance service unreachable")

    c, log = chain(down, lambda ctx: None, required=("h1",))
    o = c.invoke(cls(work_item=ITEM))
    assert o.context.proceed is False
    assert o.context.reason == (
        "required hook 'h1' failed: ConnectionError: compliance service unreachable"
    )  # the reason reaches the tracker: what was raised, not where (the event says where)
    assert log.of("hooks.failed")[0]["error"] == (
        "ConnectionError: compliance service unreachable" + at(down))
    assert o.refused and o.refused_by == "h1"
    assert [e for e, _ in events(log)] == ["hooks.failed", "hooks.refused"]
    refused = log.of("hooks.refused")[0]
    assert (refused["point"], refused["hook"], refused["work_item"]) == (
        cls.POINT, "h1", ITEM.ref,
    )
    assert refused["reason"] == o.context.reason
    assert log.of("hooks.failed")[0]["required"] is True


@pytest.mark.parametrize("cls", NO_PROCEED_POINTS, ids=lambda c: c.POINT)
def test_r6_3_required_failure_at_a_point_without_proceed_only_records(cls: type[Any]) -> None:
    def down(ctx: Any) -> None:
        raise ConnectionError("unreachable")

    c, log = chain(down, required=("h1",))
    ctx = cls(work_item=ITEM)
    o = c.invoke(ctx)
    assert snapshot(o.context) == snapshot(ctx)
    assert not o.refused and o.refused_by == ""
    assert [e for e, _ in events(log)] == ["hooks.failed"]


def test_r6_3_a_required_hook_that_answers_well_changes_nothing_special() -> None:
    c, log = chain(lambda ctx: None, required=("h1",))
    assert c.run(WorkItemStart()).proceed is True
    assert log.memory == []


def test_r6_1_a_failure_that_is_not_required_never_refuses() -> None:
    c, log = chain(lambda ctx: 1 / 0)
    assert c.run(WorkItemStart()).proceed is True
    assert log.of("hooks.refused") == []


def test_r2_6_a_refusal_with_another_hooks_reason_names_both_hooks() -> None:
    """Issue 30 item 3: hook A gives only a reason, hook B only refuses: the reason is A's
    (R2.3 applies it), and the record says whose refusal and whose reason it is."""
    c, log = chain(
        lambda ctx: dataclasses.replace(ctx, reason="just a note"),
        lambda ctx: dataclasses.replace(ctx, proceed=False),
    )
    o = c.invoke(WorkItemStart(work_item=ITEM))
    assert (o.context.proceed, o.context.reason) == (False, "just a note")
    assert (o.refused_by, o.reason_by) == ("h2", "h1")
    [refused] = log.of("hooks.refused")
    assert (refused["hook"], refused["reason"], refused["reason_by"]) == (
        "h2", "just a note", "h1")

    c, log = chain(lambda ctx: dataclasses.replace(ctx, proceed=False, reason="mine"))
    c.invoke(WorkItemStart(work_item=ITEM))
    assert "reason_by" not in log.of("hooks.refused")[0]  # one hook: named once


def test_r2_6_refusal_sticks_against_a_later_allow() -> None:
    c, log = chain(
        lambda ctx: dataclasses.replace(ctx, proceed=False, reason="first says no"),
        lambda ctx: dataclasses.replace(ctx, proceed=True, reason="second says yes"),
        lambda ctx: dataclasses.replace(ctx, reason="third rewrites the reason"),
    )
    o = c.invoke(WorkItemStart(work_item=ITEM))
    assert (o.context.proceed, o.context.reason) == (False, "first says no")
    assert o.refused_by == "h1"
    assert [r["hook"] for r in log.of("hooks.refused")] == ["h1"]
    assert [r["reason"] for r in log.of("hooks.refused")] == ["first says no"]


def test_r2_6_refusal_sticks_against_a_later_required_failure() -> None:
    c, _ = chain(
        lambda ctx: dataclasses.replace(ctx, proceed=False, reason="policy"),
        lambda ctx: 1 / 0,
        required=("h2",),
    )
    o = c.invoke(SessionSpawn())
    assert (o.context.proceed, o.context.reason, o.refused_by) == (False, "policy", "h1")


def test_r2_6_a_later_hook_may_still_change_other_decisions_after_a_refusal() -> None:
    c, _ = chain(
        lambda ctx: dataclasses.replace(ctx, proceed=False, reason="no"),
        lambda ctx: dataclasses.replace(ctx, prompt="still rewritten"),
    )
    out = c.run(SessionSpawn())
    assert (out.proceed, out.reason, out.prompt) == (False, "no", "still rewritten")


# ------------------------------------------------------------------- outcome and events


def test_r5_3_outcome_and_events_say_who_changed_what() -> None:
    c, log = chain(
        lambda ctx: dataclasses.replace(ctx, prompt="A"),
        lambda ctx: None,
        lambda ctx: dataclasses.replace(ctx, prompt="C", proceed=False, reason="stop"),
    )
    o = c.invoke(spawn())
    assert isinstance(o, Outcome) and o.point == "session_spawn"
    assert o.changed_by == {"prompt": "h3", "proceed": "h3", "reason": "h3"}
    assert [(s.hook, s.status, s.changed) for s in o.steps] == [
        ("h1", "changed", {"prompt": "A"}),
        ("h2", "unchanged", {}),
        ("h3", "changed", {"prompt": "C", "proceed": False, "reason": "stop"}),
    ]
    assert all(s.ms >= 0 for s in o.steps)
    assert o.steps[0].to_json().keys() >= {"hook", "status", "changed", "dropped", "error", "ms"}
    decided = [
        (r["point"], r["hook"], r["changed"], r["work_item"]) for r in log.of("hooks.decided")
    ]
    assert decided == [
        ("session_spawn", "h1", ["prompt"], ITEM.ref),
        ("session_spawn", "h3", ["proceed", "prompt", "reason"], ITEM.ref),
    ]


def test_r5_3_a_hook_that_sets_the_same_value_decides_nothing() -> None:
    c, log = chain(lambda ctx: dataclasses.replace(ctx, prompt=ctx.prompt))
    o = c.invoke(spawn())
    assert o.steps[0].status == "unchanged" and o.changed_by == {}
    assert log.of("hooks.decided") == []


def test_decisions_patch_detail_reaches_the_decided_event() -> None:
    c, log = chain(lambda ctx: Decisions({"prompt": "x"}, detail={"rules": ["house"]}))
    c.run(spawn())
    assert log.of("hooks.decided")[0]["rules"] == ["house"]


def test_on_narrows_the_points_a_link_runs_at() -> None:
    log = EventLog()
    hook = Fn(lambda ctx: dataclasses.replace(ctx, announce=False))
    c = Chain([Link("only-spawned", hook, frozenset({"session_spawned"}))], log=log)
    assert c.names("session_spawned") == ["only-spawned"]
    assert c.names("work_item_complete") == []
    assert c.run(SessionSpawned()).announce is False
    assert c.run(WorkItemComplete()).announce is True


def test_chain_of_runs_a_class_at_the_points_it_overrides() -> None:
    class Prefix(LifecycleHooks):
        def session_spawn(self, ctx: SessionSpawn) -> SessionSpawn:
            ctx.prompt = "ACME: " + ctx.prompt
            return ctx

    c = Chain.of(Prefix())
    assert [p for p in POINTS if c.names(p)] == ["session_spawn"]
    assert c.run(SessionSpawn(prompt="hi")).prompt == "ACME: hi"


def test_an_empty_chain_returns_the_given_context() -> None:
    ctx = spawn()
    assert Chain().run(ctx) is ctx
    assert Chain().invoke(ctx).context is ctx


def test_the_chain_benchmark_runs_and_prints_its_table() -> None:
    """Not a timing test: the script in benchmarks/ keeps working (`--quick`, no assertions
    on the numbers)."""
    import subprocess

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "chain.py"
    result = subprocess.run([sys.executable, str(script), "--quick"], capture_output=True,
                            text=True, check=False, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "| per point invocation | the-loop chain | plain Python |" in result.stdout
    assert result.stdout.count("\n| ") == 5
    assert "- no executors: " in result.stdout


POLICY_ON_PROMPT = """\
rules:
  - name: no-secrets-in-prompts
    on: session_spawn
    when: "contains(prompt, 'SECRET')"
    set:
      proceed: false
      reason: "the prompt names a secret"
"""


class AddsSecret(LifecycleHooks):
    def session_spawn(self, ctx: SessionSpawn) -> SessionSpawn:
        ctx.prompt += " SECRET"
        return ctx


def test_a_policy_after_a_class_reads_the_decision_the_class_made(tmp_path: Path) -> None:
    """A policy executor gets the chain's current context uncopied (it only reads): it
    still sees what an earlier executor decided, and the caller's context stays as given."""
    (tmp_path / "rules.yaml").write_text(POLICY_ON_PROMPT, encoding="utf-8")
    policy = load_policy("policy", tmp_path)
    log = EventLog()
    chain = Chain([Link("adds", AddsSecret(), frozenset({"session_spawn"})),
                   Link("policy", policy, frozenset({"session_spawn"}))], log=log)
    given = SessionSpawn(prompt="fix it")
    out = chain.run(given)
    assert (out.proceed, out.reason, out.prompt) == (False, "the prompt names a secret",
                                                    "fix it SECRET")
    assert (given.prompt, given.proceed) == ("fix it", True)
    assert [e["hook"] for e in log.of("hooks.decided")] == ["adds", "policy"]
    alone = Chain([Link("policy", policy, frozenset({"session_spawn"}))], log=EventLog())
    assert alone.run(given).proceed is True
