"""One rule as evaluated at one point (`PointRule`): its condition, and its `set` values ready.

A rule's values are split at load into constants and templates; a rule without templates (or
whose placeholders are all literals) has its whole `set` pre-rendered in `PointRule.static`.
`PointRule.render` renders the templates from the JSON view of the context (the reference
path: each placeholder's `search`) or from the context object itself (the fast path: each
placeholder compiled by `jmes.batch.compile_value`); both give the same text.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from the_loop.hooks.engine.points import SPECS, WorkItem, context_to_json
from the_loop.hooks.policy.data import reads_context
from the_loop.hooks.policy.expressions import COMPILER
from the_loop.hooks.policy.reads import rule_reads
from the_loop.hooks.policy.rules import AFFIXES, Rule, Template, Value
from the_loop.jmes.api import COMPILE_ERRORS
from the_loop.jmes.batch import RecordType, RootType

__all__ = [
    "Effects",
    "PointRule",
    "RuntimeFailure",
    "effects_of",
    "point_rules",
    "render_value",
    "root_type_of",
]

#: A template part as rendered: text, or (the expression's text, its evaluator).
Part = str | tuple[str, Callable[[Any], Any]]


class Effects(NamedTuple):
    """A rule's values sorted by what they do to the decisions (see the executor's `_decide`).

    `sets` are last-wins decisions; `unless_refused` are `proceed`/`reason`, which a refusal
    earlier in the rule order freezes; `affixes` are (decision, 0 prefix | 1 suffix, text);
    `refuses` is `proceed: false`, with its `reason` (None when the rule sets none).
    """

    sets: tuple[tuple[str, Any], ...]
    unless_refused: tuple[tuple[str, Any], ...]
    affixes: tuple[tuple[str, int, Any], ...]
    refuses: bool
    reason: Any


def effects_of(decided: dict[str, Any]) -> Effects:
    """Sort a rule's rendered values into `Effects`."""
    sets: list[tuple[str, Any]] = []
    unless_refused: list[tuple[str, Any]] = []
    affixes: list[tuple[str, int, Any]] = []
    for key, value in decided.items():
        affix = AFFIXES.get(key)
        if affix is not None:
            affixes.append((affix[0], 0 if affix[1] == "prefix" else 1, value))
        elif key == "proceed" or key == "reason":
            unless_refused.append((key, value))
        else:
            sets.append((key, value))
    return Effects(tuple(sets), tuple(unless_refused), tuple(affixes),
                   decided.get("proceed") is False, decided.get("reason"))


class RuntimeFailure(Exception):
    """An expression of one rule failed at run time (converted to HookError or an audit note)."""


@dataclass(frozen=True, eq=False)
class PointRule:
    """One rule at one point: the hot path reads only these fields."""

    name: str
    file: str
    audit: bool
    when: Any  # CompiledExpression | None
    when_text: str
    constants: tuple[tuple[str, Any], ...]
    templates: tuple[tuple[str, tuple[Part, ...]], ...]  # on the JSON view of the context
    static: dict[str, Any] | None = None  # every value, when no template needs the context
    effects: Effects | None = None  # `static`, sorted
    fast: tuple[tuple[str, tuple[Part, ...]], ...] = ()  # on the context object
    reads: frozenset[str] = frozenset()  # the facts it reads (`reads.rule_reads`)

    def failure(self, exc: Exception) -> str:
        """The message for this rule's `when` failing at run time."""
        return self._where("when", self.when_text, exc)

    def render(self, root: Any, fast: bool) -> dict[str, Any]:
        """The rule's values, templates rendered from the context object `root` if `fast`,
        else from its JSON view `root`."""
        out = dict(self.constants)
        for key, parts in self.fast if fast else self.templates:
            chunks: list[str] = []
            for part in parts:
                if isinstance(part, str):
                    chunks.append(part)
                else:
                    text, evaluate = part
                    chunks.append(self._value(key, text, evaluate, root))
            out[key] = "".join(chunks)
        return out

    def _value(self, key: str, text: str, evaluate: Callable[[Any], Any], root: Any) -> str:
        try:
            return render_value(evaluate(root))
        except Exception as exc:
            raise RuntimeFailure(self._where(f"set.{key}", "{{ " + text + " }}", exc)) from None

    def _where(self, key: str, expr: str, exc: Exception) -> str:
        # The file by name only: rule names are unique in their folder, and this sentence
        # may reach a remote caller of a served policy, who has no business with our paths.
        return (
            f"policy rule {self.name!r} ({os.path.basename(self.file)}) → {key}: {expr!r} "
            f"failed at run time: {type(exc).__name__}: {exc}"
        )


def render_value(value: Any) -> str:
    """A template result as text: strings as they are, null as empty, others as JSON."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@functools.cache
def root_type_of(point: str) -> RootType:
    """What compiled code may assume of `point`'s context: the catalog's fields and types."""
    item = RecordType(
        WorkItem, {f.name: str(f.type) for f in dataclasses.fields(WorkItem)}, WorkItem.to_json
    )
    fields: dict[str, str | RecordType] = {
        f.name: item if f.type == "WorkItem" else f.type for f in SPECS[point].fields
    }
    return RootType(fields, context_to_json)


def point_rules(rules: list[Rule], point: str, *, fast: bool = True) -> tuple[PointRule, ...]:
    """The steps of the rules that apply at `point`, in rule order."""
    out: list[PointRule] = []
    for rule in rules:
        if point not in rule.points:
            continue
        values: dict[str, Value] = rule.values.get(point, {})
        constants: dict[str, Any] = {
            k: v for k, v in values.items() if not isinstance(v, Template)
        }
        templates: dict[str, Template] = {}
        for key, value in values.items():
            if isinstance(value, Template):
                folded = _fold(value)  # placeholders of literals and data: rendered now
                if all(isinstance(p, str) for p in folded.parts):
                    constants[key] = "".join(str(p) for p in folded.parts)
                else:
                    templates[key] = folded
        static = None if templates else dict(constants)
        out.append(PointRule(
            name=rule.name, file=rule.file, audit=rule.audit, when=rule.when.get(point),
            when_text=rule.when_text or "",
            constants=tuple(constants.items()),
            templates=tuple((k, _json_parts(t)) for k, t in templates.items()),
            static=static, effects=None if static is None else effects_of(static),
            fast=tuple((k, _fast_parts(t, point)) for k, t in templates.items()) if fast else (),
            reads=rule_reads(rule, point),
        ))
    return tuple(out)


def _fold(template: Template) -> Template:
    """The template with each placeholder that reads no context (literals and policy data
    only: `{{ join(', ', data.maintainers) }}`) rendered now, into its text."""
    parts: list[str | Any] = []
    for part in template.parts:
        if not isinstance(part, str) and not reads_context(part.ast):
            with contextlib.suppress(Exception):  # it fails whatever the context: let it
                part = render_value(part.search({}))  # fail where it runs
        if isinstance(part, str) and parts and isinstance(parts[-1], str):
            parts[-1] += part
        else:
            parts.append(part)
    return Template(template.text, tuple(parts))


def _on_json_view(search: Callable[[Any], Any]) -> Callable[[Any], Any]:
    return lambda ctx: search(context_to_json(ctx))


def _json_parts(template: Template) -> tuple[Part, ...]:
    return tuple(
        part if isinstance(part, str) else (part.text, part.search) for part in template.parts
    )


def _fast_parts(template: Template, point: str) -> tuple[Part, ...]:
    parts: list[Part] = []
    for part in template.parts:
        if isinstance(part, str):
            parts.append(part)
            continue
        try:
            evaluate = COMPILER.compile_value(part.ast, root_type_of(point), part.search)
        except COMPILE_ERRORS:  # the reference's evaluator, on a JSON view built for it
            evaluate = _on_json_view(part.search)
        parts.append((part.text, evaluate))
    return tuple(parts)
