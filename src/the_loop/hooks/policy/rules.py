"""Read a folder of rule files and check every rule against the catalog, collecting all errors.

A rule file is YAML with one key, `rules:`, a list of rules. Each rule is parsed, its
expressions compiled once per point it names (with that point's field types), every field an
expression reads checked against that point's context, and `set` checked against the point's
decisions. Nothing is evaluated here; the executor (`hooks/executors/policy.py`) runs what
this module built.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from the_loop.configspec import (
    NAME,
    NON_EMPTY_PATTERN,
    Any_,
    DictOf,
    Enum,
    Field,
    ListOf,
    Mapping,
    Problem,
    Str,
    got,
)
from the_loop.errors import ExpressionError, quote
from the_loop.errors import PolicyError as PolicyError
from the_loop.hooks.engine.points import (
    DECISION,
    POINTS,
    SPECS,
    closest,
    point_list,
)
from the_loop.hooks.policy.checks import check_fields, describe_compile_error
from the_loop.hooks.policy.data import PolicyData, read_data
from the_loop.hooks.policy.expressions import compile_policy_expression
from the_loop.hooks.policy.files import Read, Unloadable, load_yaml, snapshot
from the_loop.hooks.policy.gcpause import collector_paused
from the_loop.hooks.policy.maskpaths import check as check_mask
from the_loop.hooks.policy.typecheck import type_messages
from the_loop.jmes import CompiledExpression, root_paths

FILE_KEYS = ("rules", "mask")
MODES = ("enforce", "audit")
#: The lints of `policy check` (`lints.py`) a rule may silence with `silence: [name, …]`.
LINTS = ("pattern-not-literal", "never-matches", "conflicting-rules")
TEMPLATE_RE = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)
#: policy-only conveniences: key → (the decision it composes into, prefix or suffix).
AFFIXES: dict[str, tuple[str, str]] = {
    "prompt_prefix": ("prompt", "prefix"),
    "prompt_suffix": ("prompt", "suffix"),
    "text_prefix": ("text", "prefix"),
    "text_suffix": ("text", "suffix"),
}


@dataclass(frozen=True)
class Template:
    """A `set` string with `{{ expression }}` placeholders, compiled for one point."""

    text: str
    parts: tuple[str | CompiledExpression, ...]


Value = bool | str | Template


@dataclass
class Rule:
    """One checked rule: where it came from, and per point its compiled condition and values."""

    name: str
    file: str
    points: tuple[str, ...]
    mode: str = "enforce"
    description: str = ""
    when_text: str | None = None
    set_raw: dict[str, Any] = field(default_factory=dict)
    when: dict[str, CompiledExpression] = field(default_factory=dict)
    values: dict[str, dict[str, Value]] = field(default_factory=dict)
    silence: tuple[str, ...] = ()

    @property
    def audit(self) -> bool:
        return self.mode == "audit"


@dataclass
class Policy:
    """Every rule of a folder, in evaluation order (files by name, rules in file order).

    `reference`: the expressions run on jmespath's reference interpreter (a JSON view of the
    context per evaluation) instead of compiled code.
    """

    folder: Path
    files: list[Path]
    rules: list[Rule]
    reference: bool = False
    data: PolicyData = field(default_factory=PolicyData)
    #: Paths a hook server's decision log masks (`mask:` in a rule file; `maskpaths`).
    mask: list[str] = field(default_factory=list)
    #: The revision of the files these rules were compiled from (`files.snapshot`).
    revision: str = ""

    def rules_at(self, point: str) -> list[Rule]:
        return [r for r in self.rules if point in r.points]


def settable(point: str) -> dict[str, str]:
    """The keys a rule's `set` may use at `point`, with their type (decisions plus affixes)."""
    out = {d.name: d.type for d in SPECS[point].decisions}
    for key, (target, _) in AFFIXES.items():
        if target in out:
            out[key] = "str"
    return out


def field_types(point: str) -> dict[str, str]:
    """The point's fields and their catalog types, as handed to the compiler."""
    return {f.name: "object" if f.type == "WorkItem" else f.type for f in SPECS[point].fields}


def _beside(folder: Path) -> str:
    """' Did you mean policies/ (beside it)?' for a folder name one slip from a folder
    that is there (`policy: polices` beside `policies/`), else ''."""
    try:
        there = [p.name for p in folder.parent.iterdir() if p.is_dir()]
    except OSError:
        return ""
    hint = closest(folder.name, there)
    return f" Did you mean {hint}/ (beside it)?" if hint else ""


@collector_paused()
def read_policy(
    folder: Path, *, reference: bool = False, lazy: bool = False,
    data: dict[str, Any] | None = None,
) -> Policy:
    """Read and check every rule file in `folder`; raises `PolicyError` listing every error.

    `lazy` defers generating each expression's own code to its first use: the executor
    compiles a point's conditions together (`fast.py`) and rarely needs them one by one.
    `data` replaces some of the data names' values (a test case's `data:`).
    """
    if not folder.exists():
        raise PolicyError([
            f"{folder}: no such folder.{_beside(folder)} A policy entry names a folder of rule "
            "files, relative to the folder of cli-config.yaml"
        ])
    if not folder.is_dir():
        raise PolicyError([f"{folder}: not a folder; name the folder that holds the rule files"])
    try:
        snap = snapshot(folder)  # resolved, listed and read once: what is compiled is this
    except OSError as exc:
        raise PolicyError([f"{folder}: cannot be read ({exc.strerror or exc}); name a "
                           "folder of rule files"]) from None
    if snap.errors:
        raise PolicyError(snap.errors, folder=str(folder))
    if not snap.rules:
        raise PolicyError([
            f"{folder}: no rule files (*.yaml or *.yml) in this folder; add one with a "
            "`rules:` list (see docs/policy-guide.md)"
        ])
    values, problems = read_data(snap)
    if problems:
        raise PolicyError(problems, folder=str(folder))
    if data:
        values = values.with_values(data)
    checker = _Checker(reference, lazy, values)
    for read in snap.rules:
        checker.read_file(read)
    if not checker.errors and not checker.rules:
        checker.errors.append(f"{folder}: the rule files hold no rules")
    if checker.errors:
        raise PolicyError(checker.errors, folder=str(folder))
    return Policy(folder, [r.path for r in snap.rules], checker.rules, reference, values,
                  checker.mask, snap.revision)


def _some_decision(values: dict[str, Any], _ctx: object) -> dict[str, Any]:
    if not values:
        raise Problem("empty; a rule sets at least one decision")
    return values


#: One rule of a rule file; what its expressions read and set is checked per point after.
RULE = Mapping(expected="a mapping with name, on and set", fields={
    "name": Field(NAME, required="every rule needs a name unique in the folder"),
    "on": Field(point_list(), required=f"name the point or points the rule applies at: "
                                       f"{', '.join(POINTS)}"),
    "when": Field(Str(pattern=NON_EMPTY_PATTERN,
                      expected="a JMESPath expression as a string (quote it)")),
    "description": Field(Str(), default=""),
    "mode": Field(Enum(values=MODES), default="enforce"),
    "silence": Field(ListOf(item=Enum(values=LINTS), single=True, unique=True,
                            expected="a list of lint names"), default=list),
    "set": Field(DictOf(key=Str(expected="a decision name"), value=Any_(),
                        expected="a mapping of decision to value", then=(_some_decision,)),
                 required="a rule sets at least one decision (e.g. proceed: false with a "
                          "reason)"),
})


class _Checker:
    """Collects rules and errors across the files of one folder."""

    def __init__(self, reference: bool, lazy: bool = False,
                 data: PolicyData | None = None) -> None:
        self.reference = reference
        self.lazy = lazy
        self.data = data if data is not None else PolicyData()
        self.errors: list[str] = []
        self.rules: list[Rule] = []
        self.seen: dict[str, str] = {}  # rule name → file
        self.mask: list[str] = []

    def read_mask(self, where: str, paths: Any) -> None:
        """A rule file's `mask:` list: paths the served decision log masks."""
        if not isinstance(paths, list) or not all(isinstance(p, str) for p in paths):
            self.errors.append(f"{where} → mask: expected a list of paths like "
                               f"input_received.text, got {got(paths)}")
            return
        for path in paths:
            try:
                check_mask(path)
            except ValueError as exc:
                self.errors.append(f"{where} → mask: {exc}")
            else:
                self.mask.append(path)

    def read_file(self, read: Read) -> None:
        where = str(read.path)
        try:
            data = load_yaml(read)
        except Unloadable as exc:
            self.errors.append(str(exc))
            return
        if isinstance(data, dict) and "mask" in data:
            self.read_mask(where, data["mask"])
            if "rules" not in data and set(data) <= set(FILE_KEYS):
                return
        if not isinstance(data, dict) or "rules" not in data:
            said = "an empty file" if data is None else (
                f"keys {', '.join(map(str, data))}" if isinstance(data, dict)
                else got(data)
            )
            self.errors.append(
                f"{where}: expected a mapping with a `rules:` list, got {said}. "
                "Write `rules:` followed by `- name: …` items"
            )
            return
        for key in data:
            if key not in FILE_KEYS:
                self.errors.append(
                    f"{where}: unknown top-level key {quote(key)}; a rule file has `rules:` "
                    "(and `mask:`, what a hook server's decision log masks)"
                )
        rules = data["rules"]
        if not isinstance(rules, list) or not rules:
            self.errors.append(
                f"{where} → rules: expected a non-empty list of rules, got {got(rules)}"
            )
            return
        for index, raw in enumerate(rules):
            rule = self._rule(where, index, raw)
            if rule is not None:
                self.rules.append(rule)

    # ------------------------------------------------------------------ one rule

    def _rule(self, where: str, index: int, raw: Any) -> Rule | None:
        name = raw.get("name") if isinstance(raw, dict) else None
        label = f"rule {quote(name)}" if isinstance(name, str) and name else f"rule #{index + 1}"
        before = len(self.errors)

        def fail(key: str, message: str) -> None:
            self.errors.append(f"{where}: {label}{f' → {key}' if key else ''}: {message}")

        checked, problems = RULE.collect(raw)
        for problem in problems:
            fail(problem.where, problem.message)
        if not isinstance(raw, dict):
            return None
        # A name that breaks the pattern is still a name: two of them are duplicates too.
        seen_as = checked.get("name", name if isinstance(name, str) and name else None)
        if seen_as is not None:
            if seen_as in self.seen:
                fail("name", f"duplicate: a rule named {name!r} is already in "
                             f"{self.seen[seen_as]}; rule names must be unique across "
                             "the folder")
            else:
                self.seen[seen_as] = where
        points: tuple[str, ...] = checked.get("on", ())
        rule = Rule(name=checked.get("name", ""), file=where, points=points,
                    mode=checked.get("mode", "enforce"),
                    description=checked.get("description", ""),
                    silence=tuple(checked.get("silence", ())))
        if "when" in checked:
            rule.when_text = checked["when"]
            compiled = self._expression(checked["when"], points, fail, "when")
            if compiled is not None:
                rule.when = compiled
        if "set" in checked:
            self._set(rule, checked["set"], fail)
        return rule if len(self.errors) == before else None

    def _set(self, rule: Rule, values: dict[str, Any], fail: Any) -> None:
        rule.set_raw = dict(values)
        per_point: dict[str, dict[str, Value]] = {p: {} for p in rule.points}
        for k, value in values.items():
            bad_points = [p for p in rule.points if k not in settable(p)]
            if bad_points:
                fail(f"set.{k}", self._not_settable(k, bad_points))
                continue
            want = settable(rule.points[0])[k] if rule.points else ""
            if k == "proceed" and value is True:
                fail("set.proceed", "a policy may only refuse (proceed: false); it never sets "
                                    "proceed: true, which would override another hook's "
                                    "refusal. Remove the key, or narrow `when` instead")
                continue
            if want == "bool" and type(value) is not bool:
                fix = "false" if k == "proceed" else "true or false"
                fail(f"set.{k}", f"expected {fix} (bool), got {got(value)}")
                continue
            if want == "str" and not isinstance(value, str):
                fail(f"set.{k}", f"expected a string (quote it), got {got(value)}")
                continue
            if isinstance(value, str):
                templates = self._template(value, rule.points, fail, f"set.{k}")
                if templates is None:
                    continue
                for p in rule.points:
                    per_point[p][k] = templates[p] if templates else value
            else:
                for p in rule.points:
                    per_point[p][k] = value
        rule.values = per_point

    @staticmethod
    def _not_settable(key: str, points: list[str]) -> str:
        parts: list[str] = []
        for p in points:
            fs = SPECS[p].field(key)
            keys = list(settable(p))
            if fs is not None and fs.role != DECISION:
                parts.append(f"{quote(key)} is a fact at {p} (read-only); a rule sets decisions: "
                             f"{', '.join(keys)}")
            else:
                hint = closest(key, keys)
                parts.append(f"{p} has no decision {quote(key)}"
                             + (f" (did you mean {hint!r}?)" if hint else "")
                             + f"; decisions there: {', '.join(keys)}")
        return "; ".join(parts)

    # ------------------------------------------------------------------ expressions

    def _template(
        self, text: str, points: tuple[str, ...], fail: Any, key: str
    ) -> dict[str, Template] | None:
        """Per point, the compiled template; {} for a plain string; None after an error."""
        if "{{" not in text and "}}" not in text:
            return {}
        pieces: list[tuple[str, str]] = []  # ("text", s) | ("expr", s)
        pos = 0
        ok = True
        for m in TEMPLATE_RE.finditer(text):
            pieces.append(("text", text[pos:m.start()]))
            pieces.append(("expr", m.group(1).strip()))
            pos = m.end()
        pieces.append(("text", text[pos:]))
        for part_type, piece in pieces:
            if part_type == "text" and ("{{" in piece or "}}" in piece):
                fail(key, f"unbalanced '{{{{' or '}}}}' in {quote(text)}; write a placeholder as "
                          "{{ expression }}")
                return None
            if part_type == "expr" and not piece:
                fail(key, f"empty placeholder {{{{ }}}} in {quote(text)}")
                return None
        compiled: dict[str, list[str | CompiledExpression]] = {p: [] for p in points}
        for part_type, piece in pieces:
            if part_type == "text":
                if piece:
                    for p in points:
                        compiled[p].append(piece)
                continue
            exprs = self._expression(
                piece, points, fail, key, shown=f"the placeholder {{{{ {piece} }}}}"
            )
            if exprs is None:
                ok = False
                continue
            for p in points:
                compiled[p].append(exprs[p])
        if not ok:
            return None
        return {p: Template(text, tuple(parts)) for p, parts in compiled.items()}

    def _expression(
        self, text: str, points: tuple[str, ...], fail: Any, key: str, *, shown: str = ""
    ) -> dict[str, CompiledExpression] | None:
        """Compile `text` for each point and check the fields it reads; None after an error.

        `shown` is how messages name the expression (default: the expression quoted).
        """
        shown = shown or quote(text)
        rewrite = self.data.rewrite(text)
        if not points:  # `on` was already reported; still report a syntax error
            try:
                compile_policy_expression(text, reference=self.reference, rewrite=rewrite)
            except ExpressionError as exc:
                fail(key, describe_compile_error(shown, text, exc))
            return None
        out: dict[str, CompiledExpression] = {}
        for point in points:
            try:
                out[point] = compile_policy_expression(
                    text, field_types=field_types(point), reference=self.reference,
                    lazy=self.lazy, rewrite=rewrite,
                )
            except ExpressionError as exc:
                fail(key, describe_compile_error(shown, text, exc))
                return None
        problems = check_fields(root_paths(out[points[0]].ast), points, text)
        for problem in problems:
            fail(key, f"{shown} {problem}")
        if not problems:  # types are checked once every field is known
            problems = type_messages({p: e.ast for p, e in out.items()}, shown,
                                     when=key == "when")
            for problem in problems:
                fail(key, problem)
        return None if problems else out
