"""`Kind`: everything the loop needs to know about one kind of executor, in one record.

A kind (`local`, `remote`, `policy`) is what runs; a declaration key (`module:`, `path:`,
`url:`, `policy:`) is how an entry of `hooks:` names it. Each kind's record says:

- `keys`: its declaration keys, one variant per key that selects it (the key first, then the
  keys an entry of that variant may add), from which the entry spec and its JSON Schema are
  derived (`declaring/declaration.py`);
- `build(entry, names)`: how an entry becomes an executor (imports, connects lazily, compiles);
- `classes`: the executor classes of this kind, by qualified name (`registered_kind` walks an
  executor's class hierarchy for them, importing nothing);
- `default_points(executor)` and `handler(executor, point)`: the points it handles when `on`
  does not narrow them, and the callable the chain invokes;
- `replay`: whether `policy replay` may call it (`CALL`) or must answer it from the decision
  log (`RECORDED`);
- `logged_as`: the word a decision-log step records for it (the kind's name: old rows read
  the same);
- `about`, `runs_at` and `docs`: what it runs, where it runs without `on`, and one `KeyDoc`
  per declaration key — the tables of docs/declaring-hooks.md are generated from them
  (`scripts/gen_docs.py`, checked by tests/test_parity.py);
- `shown(target)`: how `the-loop hooks` shows an entry's target as written (a list, say);
- `secrets`: the declaration keys whose value names environment variables holding secrets
  (one name or a list): their values are redacted wherever the loop writes and never reach
  a harness.

A record missing any of these is refused when it is made (`Kind.__post_init__`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from the_loop.configspec import Field

#: `policy replay` runs the executor (its answer depends only on what it is given).
CALL = "call"
#: `policy replay` never calls it: the answer it gave when the point fired stands in for it.
RECORDED = "recorded"

#: What `policy replay` does with each mode, in its own words (messages and docs).
REPLAY_DOES = {CALL: "replay runs it",
               RECORDED: "its recorded answer stands in unless --call-all"}

Builder = Callable[[Any, Mapping[str, str]], Any]
Check = Callable[[dict[str, Any]], dict[str, Any]]


def protocol_points(executor: Any) -> tuple[str, ...]:
    """`executor.points()`: an executor that says itself which points it handles."""
    points: tuple[str, ...] = executor.points()
    return points


def protocol_handler(executor: Any, point: str) -> Callable[[Any], Any]:
    """`executor.handler(point)`: an executor that hands the chain its own callable."""
    handler: Callable[[Any], Any] = executor.handler(point)
    return handler


@dataclass(frozen=True)
class KeyDoc:
    """One row of the declaration keys' table in docs/declaring-hooks.md."""

    type: str
    default: str
    meaning: str


def shown_as_written(target: Any) -> str:
    """A target that is one string, shown as it is."""
    return str(target)


@dataclass(frozen=True, kw_only=True)
class Kind:
    """One kind of executor (see the module docstring for each field)."""

    name: str
    keys: dict[str, dict[str, Field]]
    build: Builder
    classes: tuple[str, ...]
    default_points: Callable[[Any], tuple[str, ...]]
    handler: Callable[[Any, str], Callable[[Any], Any]]
    replay: str
    logged_as: str
    about: str
    runs_at: str
    docs: dict[str, KeyDoc]
    shown: Callable[[Any], str] = shown_as_written
    secrets: tuple[str, ...] = ()
    #: The declaration keys whose value is a path, resolved against the config's folder.
    paths: frozenset[str] = field(default_factory=frozenset)
    #: A check of a whole checked entry of this kind (after every key passed its own).
    check: Check | None = None

    def __post_init__(self) -> None:
        missing = [name for name in ("name", "keys", "build", "classes", "default_points",
                                     "handler", "replay", "logged_as", "about", "runs_at",
                                     "docs")
                   if not getattr(self, name)]
        if missing:
            raise TypeError(f"executor kind {self.name or '(no name)'!r} lacks "
                            f"{', '.join(missing)}; every kind says each of them "
                            "(see the_loop.hooks.executors.kind)")
        stray = sorted(self.paths - set(self.keys))
        if stray:
            raise TypeError(f"executor kind {self.name!r}: paths names {', '.join(stray)}, "
                            "which are not among its declaration keys")
        keys = {key for own in self.keys.values() for key in own}
        undocumented = sorted(keys - set(self.docs))
        if undocumented:
            raise TypeError(f"executor kind {self.name!r}: docs has no KeyDoc for "
                            f"{', '.join(undocumented)}; docs/declaring-hooks.md describes "
                            "every declaration key")
        stray = sorted(set(self.secrets) - keys)
        if stray:
            raise TypeError(f"executor kind {self.name!r}: secrets names {', '.join(stray)}, "
                            "which are not among its declaration keys")


__all__ = ["CALL", "RECORDED", "REPLAY_DOES", "KeyDoc", "Kind", "protocol_handler",
           "protocol_points", "shown_as_written"]
