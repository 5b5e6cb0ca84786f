"""The fast path of the policy executor (issue 8): one compiled matcher per point, reading the
context object directly, gives exactly the reference interpreter's decisions. Names: i8_<item>.

The property tests run generated contexts through two chains, one with the policy loaded as
the executor runs it and one with `reference=True` (each rule evaluated by jmespath's reference
interpreter on a JSON view of the context), and require the same final decisions, the same
enforce rules applied, the same audit events and the same failures — for the shipped
`policies/` and for a generated 1,000-rule policy over every point.
"""

from __future__ import annotations

import random
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from the_loop.events import EventLog
from the_loop.hooks.engine.chain import Chain, Link
from the_loop.hooks.engine.points import POINTS, SPECS, WORK_ITEM_TYPES, Context, WorkItem
from the_loop.hooks.executors.policy import PolicyExecutor, load_policy

ROOT = Path(__file__).resolve().parents[2]
ITEM = WorkItem(ref="local:acme/app#1", tracker="local", owner="acme", repo="app",
                repository="acme/app", number=1, kind="issue")

# ------------------------------------------------------------------ generated contexts

WORDS = ["", "a", "acme/app", "acme/docs", "loop", "quiet", "trusted", "alice", "bob", "boom",
         "approve", "pull-request", "issue", "x1", "team-3", "ghp_" + "a" * 20, "release/1",
         "Done", "done", "12", "-3"]
words = st.sampled_from(WORDS) | st.text(max_size=6)


def work_items() -> st.SearchStrategy[WorkItem]:
    fields: dict[str, st.SearchStrategy[Any]] = {
        name: words for name, t in WORK_ITEM_TYPES.items() if t == "str"}
    fields.update({name: st.booleans() for name, t in WORK_ITEM_TYPES.items() if t == "bool"})
    fields["number"] = st.integers(min_value=-3, max_value=40)
    return st.builds(WorkItem, **fields)


def _field(type_name: str) -> st.SearchStrategy[Any]:
    if type_name == "WorkItem":
        return work_items()
    if type_name == "list[str]":  # often led by 'boom', which makes some rules fail
        return st.lists(words, max_size=4) | st.lists(words, max_size=3).map(
            lambda rest: ["boom", *rest]
        )
    if type_name == "bool":
        return st.booleans()
    if type_name == "int":
        return st.integers(min_value=-3, max_value=40)
    return words


def contexts(points: list[str]) -> st.SearchStrategy[Context]:
    """A context of one of `points`, every field drawn from its catalog type."""
    def of(point: str) -> st.SearchStrategy[Context]:
        spec = SPECS[point]
        return st.builds(spec.context, **{f.name: _field(f.type) for f in spec.fields})
    return st.sampled_from(points).flatmap(of)


# ------------------------------------------------------------------ two chains, one verdict


def chain_for(executor: PolicyExecutor) -> Chain:
    chain = Chain([Link("policy", executor, frozenset(executor.points()))], log=EventLog())
    executor.bind_log(chain.log)
    return chain


def verdict(chain: Chain, ctx: Context) -> dict[str, Any]:
    """Everything a user can observe of one run: decisions, rules, failures, audit events."""
    seen = len(chain.log.memory)
    outcome = chain.invoke(ctx)
    step = outcome.steps[-1]
    return {
        "decisions": {d.name: getattr(outcome.context, d.name)
                      for d in SPECS[ctx.POINT].decisions},
        "status": step.status,
        "rules": step.detail.get("rules"),
        "error": step.error,
        "events": [
            {k: v for k, v in record.items() if k not in ("ts", "pid", "source")}
            for record in chain.log.memory[seen:]
        ],
    }


class Pair:
    """A policy folder loaded twice: as the executor runs it, and on the reference."""

    def __init__(self, folder: Path) -> None:
        self.fast = load_policy("policy", folder)
        self.reference = load_policy("policy", folder, reference=True)
        self.fast_chain = chain_for(self.fast)
        self.reference_chain = chain_for(self.reference)

    def check(self, ctx: Context) -> dict[str, Any]:
        got = verdict(self.fast_chain, ctx)
        assert got == verdict(self.reference_chain, ctx)
        return got


# ------------------------------------------------------------------ the shipped policies

SHIPPED = Pair(ROOT / "policies")


def test_i8_3_the_shipped_policies_run_on_compiled_matchers() -> None:
    for point in SHIPPED.fast.points():
        plan = SHIPPED.fast.plan(point)
        assert plan is not None, point
        assert plan.match(POINTS[point](work_item=ITEM)) is not None, point
    assert all(SHIPPED.reference.plan(p) is None for p in SHIPPED.reference.points())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ctx=contexts(list(SHIPPED.fast.points())))
def test_i8_2_shipped_policies_decide_like_the_reference(ctx: Context) -> None:
    SHIPPED.check(ctx)


# ------------------------------------------------------------------ a generated 1,000-rule policy

# Conditions by the fields they read ({s}: a str field, {l}: a list[str] field, {b}: a bool
# field, {i}: an int field, {w}: a WorkItem field; {v}: a word, {n}: a number).
CONDITIONS = [
    "{w}.repository == '{v}'",
    "{w}.kind != 'issue' && contains({l}, '{v}')",
    "contains(['{v}', 'alice', 'acme/app'], {s})",
    "!contains({l}, '{v}')",
    "starts_with({s}, '{v}') || ends_with({w}.ref, '#1')",
    "length({l}) > `{n}`",
    "{w}.number >= `{n}` && {w}.number < `30`",
    "{b}",
    "!{b} && {s} == '{v}'",
    "glob_match('{v}*', {w}.ref)",
    "regex_match('^a', {s})",
    "{l}[?starts_with(@, 't')] | length(@) > `0`",
    "not_null({s}, {w}.ref) == '{v}'",
    "lower({s}) == '{v}'",
    "{l}[0] == '{v}'",
    "{w} && {s} != '{v}'",  # an object's truth (a bare {w} is always true: a load error)
    "not_null({s}) > '{v}'",  # strings do not order (null); bare, a load error
    "to_number({s}) > `{n}`",
    "length(keys({w})) == `10`",
    "{w}.* | contains(@, '{v}')",
    "@.{s} == '{v}'",
    "keys(@) | contains(@, '{s}')",
    "{w} | repository == 'acme/app'",
    "sort({l}) | [0] == '{v}'",
    # a type error whenever the first label is 'boom'
    "{l}[0] == 'boom' && abs(not_null({s})) > `0`",
    "[{s}, {w}.ref][?@ == '{v}'] | length(@) == `1`",
    "{{a: {s}, b: {w}.number}}.b == `{n}`",
    "max_by([{w}], &number).kind == 'issue'",
    "map(&length(@), {l}) | sum(@) > `{n}`",
]
TEMPLATES = [
    "[{{{{ {w}.ref }}}}] ",
    "{{{{ {l} }}}} ",
    "{{{{ {w} }}}}",
    "{{{{ `null` }}}}-{{{{ 'lit' }}}} ",
    "{{{{ length({l}) }}}}/{{{{ {s} }}}} ",
    "{{{{ {l}[0] == 'boom' && abs(not_null({s})) }}}}",  # fails when the first label is 'boom'
]


def _fields(point: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {"s": [], "l": [], "b": [], "i": [], "w": []}
    for f in SPECS[point].fields:
        key = {"str": "s", "list[str]": "l", "bool": "b", "int": "i", "WorkItem": "w"}[f.type]
        out[key].append(f.name)
    return out


def generated_rules(count: int, seed: int = 8) -> str:
    rng = random.Random(seed)
    lines: list[str] = []
    for i in range(count):
        point = rng.choice(list(POINTS))
        names = _fields(point)
        fill = {
            "s": rng.choice(names["s"]), "l": rng.choice(names["l"]), "w": rng.choice(names["w"]),
            "b": rng.choice(names["b"] or ["labels"]), "v": rng.choice(WORDS[:14]),
            "n": rng.randint(0, 3),
        }
        decisions = list(SPECS[point].decisions)
        rule: dict[str, Any] = {"name": f"r{i}", "on": point}
        if rng.random() > 0.1:
            rule["when"] = rng.choice(CONDITIONS).format(**fill)
        if rng.random() < 0.1:
            rule["mode"] = "audit"
        decision = rng.choice(decisions)
        if decision.type == "bool":
            sets = {decision.name: False}
            if decision.name == "proceed" and rng.random() < 0.5:
                sets["reason"] = rng.choice(TEMPLATES).format(**fill) + f"r{i}"
        elif rng.random() < 0.5 and decision.name in ("prompt", "text"):
            side = rng.choice(["prefix", "suffix"])
            sets = {f"{decision.name}_{side}": rng.choice(TEMPLATES).format(**fill)}
        else:
            sets = {decision.name: rng.choice(TEMPLATES).format(**fill) + f"r{i}"}
        lines.append("- " + _flow(rule, sets))
    return "rules:\n" + textwrap.indent("\n".join(lines), "  ") + "\n"


def _flow(rule: dict[str, Any], sets: dict[str, Any]) -> str:
    def quote(value: Any) -> str:
        if isinstance(value, bool):
            return "false" if value is False else "true"
        return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'
    parts = [f"{key}: {quote(value)}" for key, value in rule.items()]
    parts.append("set: {" + ", ".join(f"{k}: {quote(v)}" for k, v in sets.items()) + "}")
    return "{" + ", ".join(parts) + "}"


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Pair:
    folder = tmp_path_factory.mktemp("generated")
    (folder / "rules.yaml").write_text(generated_rules(1000), encoding="utf-8")
    return Pair(folder)


def test_i8_3_a_generated_policy_compiles_one_matcher_per_point(generated: Pair) -> None:
    assert generated.fast.points() == tuple(POINTS)
    for point in POINTS:
        plan = generated.fast.plan(point)
        assert plan is not None and plan.enforce is not None and plan.audit is not None
        assert plan.match(POINTS[point](work_item=ITEM)) is not None


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(ctx=contexts(list(POINTS)))
def test_i8_2_a_generated_1000_rule_policy_decides_like_the_reference(
    generated: Pair, ctx: Context
) -> None:
    generated.check(ctx)


# ------------------------------------------------------------------ behaviour of the fast path


def write(folder: Path, rules: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    body = "rules:\n" + textwrap.indent(textwrap.dedent(rules), "  ")
    (folder / "rules.yaml").write_text(body, encoding="utf-8")
    return folder


def test_i8_2_a_failing_condition_is_named_by_its_own_rule(tmp_path: Path) -> None:
    pair = Pair(write(tmp_path, """
        - {name: fine, on: session_spawn, when: "contains(labels, 'x')", set: {proceed: false}}
        - {name: trial-1, on: session_spawn, mode: audit, when: "abs(not_null(actor)) > `0`",
           set: {proceed: false}}
        - {name: also-fine, on: session_spawn, when: "actor == 'bob'", set: {prompt: "p"}}
        - {name: trial-2, on: session_spawn, mode: audit,
           when: "length(not_null(work_item.number)) > `0`",
           set: {proceed: false}}
        - {name: broken, on: session_spawn,
           when: "labels[0] == 'boom' && abs(not_null(actor)) > `0`",
           set: {proceed: false}}
        - {name: later, on: session_spawn, when: "harness == 'h' && abs(not_null(harness)) > `0`",
           set: {proceed: false}}
    """))
    ok = pair.check(SessionSpawnOf(labels=["x"], actor="bob"))
    assert ok["error"] == "" and ok["rules"] == ["fine", "also-fine"]
    (audit,) = [e for e in ok["events"] if e["event"] == "hooks.audit"]
    assert [error.split(" → ")[0] for error in audit["errors"]] == [
        f"policy rule 'trial-{i}' (rules.yaml)" for i in (1, 2)
    ]
    for labels, harness, rule, expr in (
        (["boom"], "h", "broken", "abs(not_null(actor))"),
        (["x"], "h", "later", "abs(not_null(harness))"),
    ):
        failed = pair.check(SessionSpawnOf(labels=labels, actor="bob", harness=harness))
        assert failed["status"] == "failed" and failed["decisions"]["proceed"] is True
        assert f"policy rule {rule!r}" in failed["error"] and expr in failed["error"]
        assert not [e for e in failed["events"] if e["event"] == "hooks.audit"]


def SessionSpawnOf(**fields: Any) -> Context:
    return POINTS["session_spawn"](work_item=ITEM, **fields)


def test_i8_2_audit_failures_are_recorded_per_rule_in_rule_order(tmp_path: Path) -> None:
    pair = Pair(write(tmp_path, """
        - {name: trial-1, on: session_spawn, mode: audit, when: "abs(not_null(actor)) > `0`",
           set: {proceed: false}}
        - {name: applies, on: session_spawn, set: {prompt_prefix: "[x] "}}
        - {name: trial-2, on: session_spawn, mode: audit,
           when: "length(not_null(work_item.number)) > `0`",
           set: {proceed: false}}
        - {name: trial-3, on: session_spawn, mode: audit, when: "actor == 'bob'",
           set: {proceed: false, reason: "{{ abs(not_null(actor)) }}"}}
        - {name: trial-4, on: session_spawn, mode: audit, set: {reason: "{{ work_item.ref }}"}}
    """))
    got = pair.check(SessionSpawnOf(actor="bob", prompt="P"))
    assert got["decisions"]["prompt"] == "[x] P" and got["rules"] == ["applies"]
    (audit,) = [e for e in got["events"] if e["event"] == "hooks.audit"]
    assert audit["rules"] == ["trial-4"]
    assert audit["would"] == {"trial-4": {"reason": ITEM.ref}}
    assert ["trial-1" in e for e in audit["errors"]] == [True, False, False]
    assert ["trial-2" in e for e in audit["errors"]] == [False, True, False]
    assert "trial-3" in audit["errors"][2] and "set.reason" in audit["errors"][2]


def test_i8_3_a_point_never_touches_the_rules_of_another(tmp_path: Path) -> None:
    pair = Pair(write(tmp_path, """
        - {name: always-fails, on: phase_changed,
           when: "abs(not_null(actor)) > `0`", set: {notify: false}}
        - {name: prefix, on: session_spawn, set: {prompt_prefix: "[p] "}}
    """))
    assert pair.fast.rules_at("session_spawn") == ["prefix"]
    got = pair.check(SessionSpawnOf(actor="bob", prompt="P"))
    assert (got["error"], got["decisions"]["prompt"]) == ("", "[p] P")


def test_i8_3_each_field_is_read_once_per_point_and_no_json_view_is_built(tmp_path: Path) -> None:
    pair = Pair(write(tmp_path, """
        - {name: a, on: session_spawn, when: "contains(labels, 'a') && actor == 'x'",
           set: {prompt_prefix: "a"}}
        - {name: b, on: session_spawn, when: "contains(labels, 'b') || work_item.kind == 'y'",
           set: {prompt_prefix: "b"}}
        - {name: c, on: session_spawn, when: "work_item.kind == 'z' && !contains(labels, 'c')",
           set: {prompt_prefix: "c"}}
        - {name: d, on: session_spawn, set: {prompt_prefix: "d"}}
    """))
    plan = pair.fast.plan("session_spawn")
    assert plan is not None and plan.enforce is not None
    source = plan.enforce.__doc__ or ""
    assert source.count("ctx.labels") == 1 and source.count(".kind") == 1
    assert "_root_json" not in source and "_view" not in source
    for labels in ([], ["a"], ["b", "c"], ["c"]):
        pair.check(SessionSpawnOf(labels=labels, actor="x"))


@pytest.fixture(scope="module")
def typed(tmp_path_factory: pytest.TempPathFactory) -> Pair:
    return Pair(write(tmp_path_factory.mktemp("typed"), """
        - {name: a, on: session_spawn, when: "actor == 'bob' || contains(labels, 'loop')",
           set: {prompt_prefix: "{{ actor }}/{{ labels }}/{{ work_item.repository }} "}}
        - {name: b, on: session_spawn, when: "respawn && endpoint.kind != 'x'",
           set: {prompt_suffix: " {{ endpoint.kind }}"}}
        - {name: c, on: session_spawn, when: "work_item.repository == 'acme/app'",
           set: {reason: "{{ endpoint }}"}}
    """))


@pytest.mark.parametrize(
    "fields",
    [
        {"actor": None},  # a str field that is null
        {"labels": ("loop", "x")},  # a tuple where a list is declared
        {"endpoint": {"repository": "acme/app", "kind": "issue"}},  # a dict, not a WorkItem
        {"respawn": 1},  # an int where a bool is declared
        {"endpoint": None},
        {"work_item": WorkItem(repository=None)},  # type: ignore[arg-type]
    ],
    ids=["null-str", "tuple-list", "dict-record", "int-bool", "null-record", "null-in-record"],
)
def test_i8_2_a_context_off_the_catalog_types_is_evaluated_like_the_reference(
    typed: Pair, fields: dict[str, Any],
) -> None:
    ctx = POINTS["session_spawn"](work_item=ITEM, labels=["loop"], actor="bob", respawn=True)
    for key, value in fields.items():
        setattr(ctx, key, value)
    plan = typed.fast.plan("session_spawn")
    assert plan is not None and plan.match(ctx) is None  # the fast path declines ...
    typed.check(ctx)  # ... and the JSON view gives the reference's verdict


def test_i8_measure_the_policy_benchmark_runs_and_prints_its_tables() -> None:
    """Not a timing test: benchmarks/policy.py keeps working (`--quick`, numbers unchecked)."""
    import subprocess
    import sys

    script = ROOT / "benchmarks" / "policy.py"
    result = subprocess.run([sys.executable, str(script), "--quick"], capture_output=True,
                            text=True, check=False, timeout=120)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "| rules | hand-written Python µs | policy compiled µs | compiled / Python " in out
    assert "| rules | Python import ms | policy compiled ms | policy reference ms |" in out
    assert "| compliance | `b` |" in out and "| policy | `work_item.kind" in out
    assert "| rules | list as a literal µs | list from data/ µs | data / literal |" in out
    assert "| rules | compiled µs | compiled after a coverage run µs | after / before " in out
    # Each peer is measured in this run or is a row saying how to install it (issue 33.5).
    assert "| rules | peer | our load ms | peer load ms | load ÷ ours |" in out
    for peer in ("OPA (Go engine)", "CEL (cel-rust)"):
        rows = [line for line in out.splitlines() if line.startswith(f"| 10 | {peer} | ")]
        assert len(rows) == 1, (peer, rows)
        assert "not installed: `pip install" in rows[0] or rows[0].count("×") == 2, rows[0]
    assert out.count("\n| 10 | ") == 7 and out.count("\n| 100 | ") == 7
