"""`the-loop policy test`: run a folder's rule test cases through the real chain and compare.

Test files live in `<folder>/tests/*.yaml` with one key, `cases:`. Each case names a point,
gives the context's fields as it enters the chain (`facts`; decisions such as the rendered
`prompt` may be given too), and expects final decisions (`expect`) and, optionally, exactly
the enforce rules that applied (`rules`) and the audit rules that matched (`audit`). A test
file naming an unknown point, field, decision or rule is an error, never a pass. A work item
may be given by its ref (`work_item: github:acme/app#12`), as `policy eval --facts` takes it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from the_loop import yamlsafe
from the_loop.configspec import (
    NON_EMPTY_PATTERN,
    Any_,
    DictOf,
    Enum,
    Field,
    ListOf,
    Mapping,
    Problem,
    Str,
)
from the_loop.events import EventLog
from the_loop.hooks.engine.chain import Chain, Link
from the_loop.hooks.engine.points import (
    DECISION,
    POINTS,
    SPECS,
    WORK_ITEM_FIELDS,
    WORK_ITEM_TYPES,
    WorkItem,
    check_value,
    closest,
    context_from_json,
    context_to_json,
    unknown_point_message,
)
from the_loop.hooks.executors.policy import PolicyExecutor
from the_loop.hooks.policy.branches import BranchCounter
from the_loop.hooks.policy.data import check_value as check_data
from the_loop.hooks.policy.explain import RuleTrace
from the_loop.hooks.policy.explain import explain as explain_rules
from the_loop.hooks.policy.files import rule_files
from the_loop.hooks.policy.rules import Policy, PolicyError, read_policy

HOOK = "policy"

_PY_TYPES: dict[str, type] = {"str": str, "int": int, "bool": bool}


@dataclass
class CaseResult:
    """One case's verdict, with what the chain decided."""

    file: str
    name: str
    point: str
    passed: bool
    problems: list[str] = field(default_factory=list)
    rules: list[str] = field(default_factory=list)
    audit: list[str] = field(default_factory=list)
    decisions: dict[str, Any] = field(default_factory=dict)
    explained: list[RuleTrace] | None = None  # with explain=True: every rule at the point

    def to_json(self) -> dict[str, Any]:
        out = {
            "file": self.file, "name": self.name, "point": self.point, "passed": self.passed,
            "problems": self.problems, "rules": self.rules, "audit": self.audit,
            "decisions": self.decisions,
        }
        if self.explained is not None:
            out["explain"] = [t.to_json() for t in self.explained]
        return out


@dataclass
class TestReport:
    """Every case's result, the test-file errors, and the rules no case exercised."""

    folder: str
    results: list[CaseResult] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    unexercised: list[str] = field(default_factory=list)
    #: rule → [cases that matched it, cases at one of its points that did not], rule order
    coverage: dict[str, list[int]] = field(default_factory=dict)
    #: with branches=True: which parts of each condition were seen true and false
    branches: BranchCounter | None = None

    @property
    def covered_percent(self) -> float:
        """The share of rules that some case matched (100 for a folder of no rules)."""
        total = len(self.coverage)
        return 100.0 * (total - len(self.unexercised)) / total if total else 100.0

    @property
    def shown_percent(self) -> float:
        """`covered_percent` cut (never rounded up) to one decimal, so a share shown as
        100.0% or as 80.0% is never below a --min-coverage of 100 or 80."""
        total = len(self.coverage)
        return (1000 * (total - len(self.unexercised)) // total) / 10 if total else 100.0

    @property
    def passed(self) -> int:
        return sum(1 for r in self.results if r.passed)

    @property
    def failed(self) -> int:
        return sum(1 for r in self.results if not r.passed)

    @property
    def ok(self) -> bool:
        return not self.errors and self.failed == 0 and bool(self.results)

    def to_json(self) -> dict[str, Any]:
        return {
            "folder": self.folder, "ok": self.ok, "passed": self.passed, "failed": self.failed,
            "errors": self.errors, "unexercised": self.unexercised,
            "coverage": {
                "percent": self.shown_percent,
                "rules": {k: {"matched": m, "not_matched": n}
                          for k, (m, n) in self.coverage.items()},
            } | ({} if self.branches is None else {"branches": self.branches.to_json()}),
            "cases": [r.to_json() for r in self.results],
        }


@dataclass
class _Case:
    file: str
    name: str
    point: str
    facts: dict[str, Any]
    expect: dict[str, Any]
    rules: list[str] | None
    audit: list[str] | None
    data: dict[str, Any] | None = None


def run_tests(
    folder: Path, *, reference: bool = False, policy: Policy | None = None,
    explain: bool = False, branches: bool = False, run: re.Pattern[str] | None = None,
) -> TestReport:
    """Load the policy (raises `PolicyError`), then run every case in `folder/tests`.

    `policy`: the folder's rules, already read (by a caller that checked more about them).
    `explain`: each result also says, per rule at its point, why it did or did not match.
    `branches`: also count which parts of each condition were seen true and false.
    `run`: only the cases whose name it matches (`re.search`).
    """
    if policy is None:
        policy = read_policy(folder, reference=reference)
    report = TestReport(str(folder))
    tests = folder / "tests"
    files = rule_files(tests) if tests.is_dir() else []
    if not files:
        report.errors.append(
            f"{tests}: no test files (*.yaml); add one with a `cases:` list "
            "(see docs/policy-guide.md)"
        )
        return report
    cases = _selected(_all_cases(files, policy, report.errors), run, tests, report.errors)
    chains = _Chains(policy)
    if branches:
        report.branches = BranchCounter.of(policy)
    report.coverage = {r.name: [0, 0] for r in policy.rules}
    at = {r.name: set(r.points) for r in policy.rules}
    for case in cases:
        built = chains.get(case)
        if isinstance(built, str):
            report.errors.append(built)
            continue
        case_policy, chain = built
        result = _run_case(chain, case)
        if report.branches is not None:
            report.branches.count(case_policy, case.point,
                                  context_from_json(case.point, case.facts))
        if explain:
            result.explained = explain_rules(
                case_policy, case.point, context_from_json(case.point, case.facts))
        _count_coverage(report.coverage, at, case.point, result)
        report.results.append(result)
    report.unexercised = [name for name, (m, _) in report.coverage.items() if not m]
    return report


def _all_cases(files: list[Path], policy: Policy, errors: list[str]) -> list[_Case]:
    """Every case the test files give, in file order (what is wrong in them to `errors`)."""
    cases: list[_Case] = []
    for path in files:
        cases.extend(_read_cases(path, policy, errors))
    return cases


def _selected(cases: list[_Case], run: re.Pattern[str] | None, tests: Path,
              errors: list[str]) -> list[_Case]:
    """The cases whose name `run` matches (all of them without `run`); an error when it
    matches none and the test files had no errors of their own."""
    if run is None:
        return cases
    picked = [c for c in cases if run.search(c.name)]
    if not picked and not errors:
        errors.append(f"{tests}: no case's name matches --run {run.pattern!r}")
    return picked


def _count_coverage(coverage: dict[str, list[int]], at: dict[str, set[str]], point: str,
                    result: CaseResult) -> None:
    """Count `result` for each rule: matched (an enforce rule applied, or an audit rule
    matched), or not matched though the case was at one of the rule's points."""
    matched = set(result.rules) | set(result.audit)
    for name, counts in coverage.items():
        if name in matched:
            counts[0] += 1
        elif point in at[name]:
            counts[1] += 1


def _chain(policy: Policy) -> Chain:
    executor = PolicyExecutor(HOOK, policy)
    chain = Chain([Link(HOOK, executor, frozenset(executor.points()))], log=EventLog())
    executor.bind_log(chain.log)
    return chain


class _Chains:
    """The folder's chain, and one per distinct `data:` a case gives (read once each)."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.built: dict[str, tuple[Policy, Chain] | str] = {"": (policy, _chain(policy))}

    def get(self, case: _Case) -> tuple[Policy, Chain] | str:
        """(the policy, its chain) for `case`, or the error that the policy with the case's
        data does not load."""
        key = json.dumps(case.data, sort_keys=True) if case.data else ""
        if key not in self.built:
            try:
                policy = read_policy(self.policy.folder, reference=self.policy.reference,
                                     data=case.data)
            except PolicyError as exc:
                self.built[key] = (f"{case.file}: case {case.name!r} → data: with this data "
                                   f"the policy does not load: {'; '.join(exc.errors)}")
            else:
                self.built[key] = (policy, _chain(policy))
        return self.built[key]


def _run_case(chain: Chain, case: _Case) -> CaseResult:
    result = CaseResult(case.file, case.name, case.point, passed=True)
    ctx = context_from_json(case.point, case.facts)  # checked while reading
    seen = len(chain.log.memory)
    outcome = chain.invoke(ctx)
    final = context_to_json(outcome.context)
    result.decisions = {d.name: final[d.name] for d in SPECS[case.point].decisions}
    for step in outcome.steps:
        result.rules = list(step.detail.get("rules", []))
        if step.error:
            result.problems.append(f"the policy failed: {step.error}")
    for record in chain.log.memory[seen:]:
        if record["event"] == "hooks.audit":
            result.audit = list(record.get("rules", []))
            for error in record.get("errors", []):
                result.problems.append(f"an audit rule failed: {error}")
    for key, want in case.expect.items():
        got = final[key]
        if got != want:
            result.problems.append(f"{key}: expected {_show(want)}, got {_show(got)}")
    if case.rules is not None and result.rules != case.rules:
        result.problems.append(
            f"rules applied: expected {case.rules}, got {result.rules}"
        )
    if case.audit is not None and result.audit != case.audit:
        result.problems.append(
            f"audit rules matched: expected {case.audit}, got {result.audit}"
        )
    result.passed = not result.problems
    return result


def _show(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _read_cases(path: Path, policy: Policy, errors: list[str]) -> list[_Case]:
    where = str(path)
    try:
        data = yamlsafe.load_file(path)
    except yaml.YAMLError as exc:
        errors.append(f"{where}: not valid YAML {yamlsafe.describe_error(exc)}")
        return []
    except (OSError, UnicodeDecodeError) as exc:
        errors.append(f"{where}: cannot read: {exc}")
        return []
    if not isinstance(data, dict) or not isinstance(data.get("cases"), list) or not data["cases"]:
        errors.append(f"{where}: expected a mapping with a non-empty `cases:` list")
        return []
    for key in data:
        if key != "cases":
            errors.append(f"{where}: unknown top-level key {key!r}; a test file has only cases:")
    out: list[_Case] = []
    for index, raw in enumerate(data["cases"]):
        case = _read_case(where, index, raw, policy, errors)
        if case is not None:
            out.append(case)
    return out


def _a_decision(expect: dict[str, Any], _ctx: object) -> dict[str, Any]:
    if not expect:
        raise Problem("expected a non-empty mapping of decision to its final value, got {}")
    return expect


_RULE_NAMES = ListOf(item=Str(expected="a rule name"), nullable=True,
                     expected="a list of rule names")
#: One case of a test file; what its facts, decisions and rule names mean at its point is
#: checked after, against the catalog and the folder's rules.
CASE = Mapping(expected="a mapping with name, point, facts, expect", fields={
    "name": Field(Str(pattern=NON_EMPTY_PATTERN, expected="a case name"),
                  required="every case needs a name"),
    "description": Field(Str(), default=""),
    "point": Field(Enum(values=tuple(POINTS), message=unknown_point_message),
                   required=f"valid points: {', '.join(POINTS)}"),
    "facts": Field(DictOf(key=Str(expected="a field name"), value=Any_(), nullable=True,
                          expected="a mapping of the context's fields"), default=dict),
    "expect": Field(DictOf(key=Str(expected="a decision name"), value=Any_(),
                           expected="a non-empty mapping of decision to its final value",
                           then=(_a_decision,)), nullable=True),
    "rules": Field(_RULE_NAMES),
    "audit": Field(_RULE_NAMES),
    "data": Field(DictOf(key=Str(expected="a data name"), value=Any_(),
                         expected="a mapping of data names to the values this case uses")),
})


def _read_case(
    where: str, index: int, raw: Any, policy: Policy, errors: list[str]
) -> _Case | None:
    name = raw.get("name") if isinstance(raw, dict) else None
    label = f"case {name!r}" if isinstance(name, str) and name else f"case #{index + 1}"
    before = len(errors)

    def fail(key: str, message: str) -> None:
        errors.append(f"{where}: {label}{f' → {key}' if key else ''}: {message}")

    checked, problems = CASE.collect(raw)
    for problem in problems:
        fail(problem.where, problem.message)
    point = checked.get("point")
    if point is None:
        return None
    checked["facts"] = refs_filled(point, checked["facts"])
    for wrong in fact_problems(point, checked["facts"]):
        fail("facts", wrong)
    expect = _check_expect(point, checked["expect"], fail) if "expect" in checked else {}
    rules = _rule_list(checked.get("rules"), "rules", point, policy, fail)
    audit = _rule_list(checked.get("audit"), "audit", point, policy, fail)
    data = checked.get("data")
    for wrong in data_problems(data or {}, policy):
        fail("data", wrong)
    if not {"expect", "rules", "audit"} & set(checked):
        fail("expect", "missing; a case must expect decisions (and/or rules, audit), or it "
                       "could never fail")
    if len(errors) != before:
        return None
    return _Case(where, checked["name"], point, checked["facts"], expect, rules, audit,
                 data or None)


def data_problems(data: dict[str, Any], policy: Policy) -> list[str]:
    """Every problem of a case's `data:`: a name the folder's data does not define (with its
    did-you-mean), a value that is not data."""
    known = list(policy.data.values)
    out: list[str] = []
    for name, value in data.items():
        if name not in policy.data.values:
            hint = closest(str(name), known)
            out.append(f"the folder's data has no {name!r}"
                       + (f" (did you mean {hint!r}?)" if hint else "")
                       + (f"; data names: {', '.join(known)}" if known
                          else "; the folder has no data/ files"))
            continue
        problem = check_data(value, str(name))
        if problem:
            out.append(problem)
    return out


def refs_filled(point: str, facts: dict[Any, Any]) -> dict[Any, Any]:
    """`facts` with each work-item field given as a ref string (`work_item:
    github:acme/app#12`) made the record that ref names, as `policy eval --facts` reads it
    (`WorkItem.from_ref`: number, owner, repo, repository, host, url, id)."""
    out = dict(facts)
    for key, value in facts.items():
        fs = SPECS[point].field(str(key))
        if fs is not None and fs.type == "WorkItem" and isinstance(value, str):
            out[key] = WorkItem.from_ref(value).to_json()
    return out


def fact_problems(point: str, facts: dict[Any, Any]) -> list[str]:
    """Every problem of a case's `facts` at `point`, each with its did-you-mean (all at
    once, so one run shows them all)."""
    spec = SPECS[point]
    names = [f.name for f in spec.fields]
    out: list[str] = []
    for key, value in facts.items():
        fs = spec.field(str(key))
        if fs is None:
            out.append(_unknown(f"{point} has no field {key!r}", str(key), names))
        elif fs.type == "WorkItem" and isinstance(value, dict):
            for sub, item in value.items():
                if sub not in WORK_ITEM_FIELDS:
                    out.append(_unknown(f"{point}.{key} has no field {sub!r}", str(sub),
                                        list(WORK_ITEM_FIELDS)))
                elif type(item) is not _PY_TYPES[WORK_ITEM_TYPES[sub]]:
                    want = WORK_ITEM_TYPES[sub]
                    out.append(f"{point}.{key}.{sub} must be {want} (got {item!r} that is "
                               f"{type(item).__name__})")
        else:
            try:
                check_value(fs, value, where=f"{point}.{key}")
            except ValueError as exc:
                out.append(str(exc))
    return out


def _unknown(said: str, name: str, valid: list[str]) -> str:
    hint = closest(name, valid)
    return (said + (f" (did you mean {hint!r}?)" if hint else "")
            + f"; valid fields: {', '.join(valid)}")


def _check_expect(point: str, expect: dict[Any, Any], fail: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    decisions = [d.name for d in SPECS[point].decisions]
    for key, value in expect.items():
        fs = SPECS[point].field(str(key))
        if fs is None or fs.role != DECISION:
            hint = closest(str(key), decisions)
            what = "a fact (facts never change)" if fs is not None else "not a decision"
            fail(f"expect.{key}", f"{what} at {point}"
                 + (f" (did you mean {hint!r}?)" if hint else "")
                 + f"; decisions there: {', '.join(decisions)}")
            continue
        try:
            out[str(key)] = check_value(fs, value, where=f"expect.{key}")
        except ValueError as exc:  # `fail` names the key already: say it once
            text = str(exc).removeprefix(f"expect.{key}").lstrip(": ")
            if fs.type == "bool" and isinstance(value, str):
                text += "; write true or false (yes, no, on and off are strings here)"
            fail(f"expect.{key}", text)
    return out


def _rule_list(
    value: list[str] | None, key: str, point: str, policy: Policy, fail: Any
) -> list[str] | None:
    if value is None:
        return None
    known = {r.name: r for r in policy.rules}
    for name in value:
        rule = known.get(name)
        if rule is None:
            hint = closest(name, list(known))
            fail(key, f"no rule named {name!r} in the folder"
                 + (f" (did you mean {hint!r}?)" if hint else ""))
        elif point not in rule.points:
            fail(key, f"rule {name!r} does not apply at {point} (its on: "
                      f"{', '.join(rule.points)})")
        elif rule.audit != (key == "audit"):
            other = "audit" if rule.audit else "rules"
            fail(key, f"rule {name!r} is in {rule.mode} mode; list it under {other}")
    return list(value)
