"""History to tests: recorded points become `policy test` cases expecting today's decisions.

`CaseWriter(chain, folder)` targets the declared policy entry whose folder is `folder` (or
whose `tests/` it is). For each replayed point where that policy runs, it takes the context as
it reached the policy in today's chain, runs the policy alone on it — as `the-loop policy test`
will — and keeps a case with those facts, every decision the policy leaves as the expectation,
the enforce rules that applied and the audit rules that matched. The facts are cut to the
fields the policy's rules at that point read (`casefacts.needed_facts`) when the policy decides
the same on them, so a case is a few lines. Identical cases are written once; a point where
the policy fails is skipped (and counted), and so is one where a hook replaced a text whole
(the decision log's `replaced`: a redaction, perhaps) that the case would carry. `write()`
puts them in `<folder>/tests/replay-<UTC time>.yaml`, mode 0600.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import yaml

from the_loop.decisions.encoding import context_json
from the_loop.decisions.layout import Recorded
from the_loop.errors import LoopError
from the_loop.events import EventLog
from the_loop.hooks.engine.chain import Chain, Link, Outcome
from the_loop.hooks.engine.points import SPECS, Context, context_from_json
from the_loop.hooks.executors.policy import PolicyExecutor
from the_loop.runtime.casefacts import needed_facts

#: What the policy alone decided on a context: enforce rules applied, audit rules matched,
#: the context's fields after it.
Decided = tuple[list[str], list[str], dict[str, Any]]

__all__ = ["CaseWriter"]


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


class CaseWriter:
    """Collects cases for one declared policy folder from replayed points."""

    def __init__(self, chain: Chain, folder: Path) -> None:
        policies = [link for link in chain.links if isinstance(link.executor, PolicyExecutor)]
        target = folder.parent if folder.name == "tests" else folder
        chosen = [link for link in policies
                  if isinstance(link.executor, PolicyExecutor)
                  and _same(link.executor.policy.folder, target)]
        if not chosen:
            declared = ", ".join(
                f"{link.executor.policy.folder} ({link.name})" for link in policies
                if isinstance(link.executor, PolicyExecutor)) or "none"
            raise LoopError(f"--write-cases {folder}: not the folder of a declared policy "
                            f"entry; declared policy folders: {declared}")
        self.link = chosen[0]
        executor = self.link.executor
        assert isinstance(executor, PolicyExecutor)
        self.folder = executor.policy.folder
        self.policy = executor.policy
        self.index = chain.links.index(self.link)
        self.before = {  # per point, the links that run before the policy (to reach its input)
            point: Chain([link for link in chain.links[: self.index] if point in link.points],
                         log=chain.log)
            for point in SPECS
        }
        alone = PolicyExecutor("policy", executor.policy)
        self.alone = Chain([Link("policy", alone, frozenset(alone.points()))], log=EventLog())
        alone.bind_log(self.alone.log)
        self.cases: list[dict[str, Any]] = []
        self.skipped: list[str] = []
        self._seen: set[str] = set()

    def add(self, rec: Recorded, ctx: Context, outcome: Outcome) -> None:
        """A case from one replayed point, when the policy runs there."""
        if rec.point not in self.link.points or rec.point not in self.alone.links[0].points:
            return
        entering = self.before[rec.point].run(ctx)
        facts = context_json(entering)
        hidden = _hidden(rec, facts)
        if hidden:
            self.skipped.append(
                f"#{rec.id} ({rec.point}, {rec.work_item}): not written: hook `{hidden[0]}` "
                f"replaced {hidden[1]} when it ran (a redaction, perhaps), and the case would "
                f"carry the text it replaced; write this case by hand with a made-up value")
            return
        key = json.dumps([rec.point, facts], sort_keys=True)
        if key in self._seen:
            return
        self._seen.add(key)
        decided = self._decide(entering)
        if isinstance(decided, str):
            self.skipped.append(f"#{rec.id} ({rec.point}, {rec.work_item}): {decided}")
            return
        facts, decided = self._smaller(rec.point, facts, decided)
        rules, audit, final = decided
        stamp = time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(rec.at))
        self.cases.append({
            "name": f"{rec.point} on {rec.work_item} at {stamp} (#{rec.id})",
            "point": rec.point,
            "facts": facts,
            "expect": {d.name: final[d.name] for d in SPECS[rec.point].decisions},
            "rules": rules,
            "audit": audit,
        })

    def _decide(self, ctx: Context) -> Decided | str:
        """The policy alone on `ctx`: (enforce rules applied, audit rules matched, the final
        fields), or why it failed there."""
        log = self.alone.log
        if len(log.memory) > 1000:
            log.memory.clear()
        seen = len(log.memory)
        result = self.alone.invoke(ctx)
        step = result.steps[0] if result.steps else None
        if step is not None and step.error:
            return step.error
        audit: list[str] = []
        for event in log.memory[seen:]:
            if event["event"] == "hooks.audit":
                if event.get("errors"):
                    return str(event["errors"][0])
                audit = list(event.get("rules", []))
        rules = list(step.detail.get("rules", [])) if step is not None else []
        return rules, audit, dict(result.context.__dict__)

    def _smaller(self, point: str, facts: dict[str, Any], decided: Decided
                 ) -> tuple[dict[str, Any], Decided]:
        """The facts cut to the fields the policy's rules at `point` read, with what the policy
        decides on them, when it applies and matches the same rules there (else as given)."""
        small = needed_facts(self.policy, point, facts)
        if small == facts:
            return facts, decided
        try:
            again = self._decide(context_from_json(point, small))
        except ValueError:
            return facts, decided
        kept = [d.name for d in SPECS[point].decisions if d.name in small]
        if isinstance(again, str) or again[:2] != decided[:2] or any(
            again[2][name] != decided[2][name] for name in kept
        ):
            return facts, decided
        return small, again

    def write(self, now: float | None = None) -> Path | None:
        """Write the cases (None when there are none); never overwrites a file."""
        if not self.cases:
            return None
        tests = self.folder / "tests"
        tests.mkdir(parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now if now is not None
                                                           else time.time()))
        path = tests / f"replay-{stamp}.yaml"
        n = 1
        while path.exists():
            n += 1
            path = tests / f"replay-{stamp}-{n}.yaml"
        header = ("# Written by `the-loop policy replay --write-cases`: recorded points, with "
                  "the decisions this policy\n# made on them when it was written as the "
                  "expectation.\n")
        text = yaml.dump({"cases": self.cases}, Dumper=_Dumper, sort_keys=False,
                         allow_unicode=True, width=100)
        # Owner-only whatever the umask: the facts are what people wrote on work items.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            os.fchmod(fh.fileno(), 0o600)
            fh.write(header + text)
        return path


class _Dumper(yaml.SafeDumper):
    """Safe YAML with a text of several lines written as a block (`|`), as a person would."""


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _text)


def _hidden(rec: Recorded, facts: dict[str, Any]) -> tuple[str, str] | None:
    """(hook, decision) when a recorded step replaced a text whole (a redaction, perhaps)
    and the text it replaced is what a case's facts would carry; None otherwise."""
    for step in rec.steps:
        for key in step.get("replaced", ()):
            original = rec.context.get(key)
            if isinstance(original, str) and original and facts.get(key) == original:
                return str(step.get("hook", "?")), key
    return None
