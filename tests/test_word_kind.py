"""`kind` is the executor kind's word in src/ (issue 33.4), kept here so later work cannot
quietly give it another meaning again: every identifier that has `kind` as a word (`kind`,
`kinds`, `KIND`, `StepKind`, `registered_kind`, ...) is listed below under what it means, by
module. The executor kind (`hooks/executors/registry.py`: the registry of executor kinds,
what `kind:` names in a declaration and the decision log records) is the one meaning a new
module may take; two others are fixed by contracts outside the code (a policy fact named
`kind`, cli-config.yaml's `kind:` key), and `OWED` lists what is still called `kind` though it
is none of these, so that list can only shrink.

A module here that stops using the word fails the second test: take its line out."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import the_loop

SRC = Path(the_loop.__file__).parent
#: `kind` as a word of an identifier: alone, between underscores, or a CamelCase part.
WORD = re.compile(r"(?:^|_|(?<=[a-z]))[Kk][Ii][Nn][Dd][Ss]?(?=$|_|[A-Z])")

#: The executor kind: a `Kind` record of the registry, its name, or the word a decision-log
#: step records for it (`local`, `remote`, `policy`, `command`).
EXECUTOR = {
    "hooks/executors/kind.py": {"Kind"},
    "hooks/executors/registry.py": {"KIND", "KINDS", "Kind", "kind", "registered_kind"},
    "hooks/executors/local.py": {"KIND", "Kind", "kind"},
    "hooks/executors/remote_entry.py": {"KIND", "Kind", "kind"},
    "hooks/executors/policy_entry.py": {"KIND", "Kind", "kind"},
    "hooks/executors/command.py": {"KIND", "Kind", "kind"},
    "hooks/declaring/declaration.py": {"_kind_check", "kind"},
    "hooks/declaring/entry.py": {"kind"},
    "hooks/declaring/loading.py": {"KIND", "kind"},
    "hooks/serving/revisions.py": {"kind", "registered_kind"},
    "hooks/serving/hosted.py": {"_kinds", "kinds"},
    "decisions/build.py": {"kinds"},
    "decisions/layout.py": {"kind"},
    "decisions/served.py": {"kind"},
    "decisions/looplog.py": {"_kinds"},
    "runtime/replay.py": {"kind", "registered_kind"},
    "cli/hooks.py": {"kind"},  # HookEntry.kind
    "cli/policy.py": {"kind"},  # HookEntry.kind == "policy"
    "cli/replay.py": {"kind"},  # HookEntry.kind == "policy"
}

#: A value a policy fact named `kind` holds, or the work-item record field a policy reads as
#: `work_item.kind` / `endpoint.kind` (issue | pull-request), under the name the fact, the
#: other loop's wire (tests/data/upstream-wire/) and the tracker's public surfaces (--kind,
#: POST /items, `items --json`, the items table) give it. A policy writes
#: `kind == 'pull-request'`: the name is a public contract, so the code that fills the fact
#: keeps it rather than translating one value between two words.
FACT_NAMED = {
    # work_item.kind, waiting_for_input.kind (question | gate), input_received.kind (answer, ...)
    "hooks/engine/points.py": {"kind"},
    "hooks/engine/compat.py": {"kind"},  # WorkItem.from_ref(ref, kind)
    "hooks/engine/dialect.py": {"_take_their_kind", "kind", "their_kind"},  # the wire's kind
    "runtime/tracker/base.py": {"kind"},
    "runtime/tracker/local.py": {"KINDS", "kind"},
    "runtime/tracker/pulls.py": {"kind"},
    "runtime/steps.py": {"kind"},  # InputReceived(kind=...), WaitingForInput(kind=...)
    "cli/items.py": {"kind"},  # --kind
    "cli/dryrun.py": {"kind"},  # --facts work_item.kind=...
}

#: cli-config.yaml's `kind:` key, which picks a variant of a mapping (`tracker: {kind: local}`,
#: `channels: [{kind: file, ...}]`): what an operator writes.
CONFIG_KEY = {
    "configspec.py": {"KindOf"},
    "runtime/settings.py": {"KindOf", "kind"},
    "runtime/channels.py": {"kind"},
}

#: Still called `kind` though they are none of the above; each is a rename owed (none now).
OWED: dict[str, set[str]] = {}

TABLES = {"EXECUTOR": EXECUTOR, "FACT_NAMED": FACT_NAMED, "CONFIG_KEY": CONFIG_KEY,
          "OWED": OWED}


def _names(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [node.name]
    if isinstance(node, ast.arg):
        return [node.arg]
    if isinstance(node, ast.keyword):
        return [node.arg] if node.arg else []
    if isinstance(node, ast.alias):
        return [node.name.split(".")[-1], node.asname or ""]
    if isinstance(node, ast.ImportFrom):
        return [(node.module or "").split(".")[-1]]
    return []


def _found() -> dict[str, set[str]]:
    """Module (relative to the_loop/) → the identifiers in it that have `kind` as a word."""
    out: dict[str, set[str]] = {}
    for file in sorted(SRC.rglob("*.py")):
        tree = ast.parse(file.read_text(encoding="utf-8"))
        names = {n for node in ast.walk(tree) for n in _names(node) if n and WORD.search(n)}
        if names:
            out[file.relative_to(SRC).as_posix()] = names
    return out


def _allowed(module: str) -> set[str]:
    return set().union(*(table.get(module, set()) for table in TABLES.values()))


def test_kind_in_an_identifier_is_the_executor_kind_or_listed() -> None:
    stray = [f"{module}: {name}" for module, names in _found().items()
             for name in sorted(names - _allowed(module))]
    assert not stray, (
        "`kind` is the executor kind's word (the registry's); give these their own word, or "
        "list them in EXECUTOR if they are the executor kind:\n" + "\n".join(stray))


def test_every_listed_use_is_still_there() -> None:
    found = _found()
    stale = [f"{table}[{module!r}]: {name}" for table, entries in TABLES.items()
             for module, names in entries.items()
             for name in sorted(names - found.get(module, set()))]
    assert not stale, "no longer in the code; take them out of the list:\n" + "\n".join(stale)


def test_the_word_pattern_finds_kind_in_every_spelling() -> None:
    assert all(WORD.search(n) for n in ("kind", "kinds", "KIND", "Kind", "kind_of", "_kinds",
                                        "StepKind", "KindOf", "stepkinds", "EXPRESSION_KINDS"))
    assert not any(WORD.search(n) for n in ("kindly", "unkindest_x", "jtypes", "node_type"))
