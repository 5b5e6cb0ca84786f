"""Every executor kind, in one place: the declaration, the chain, the decision log and replay
ask here (pre-commit's `all_languages.py` is the model).

Adding a kind is one module in this folder defining its `Kind` record (`kind.py` says what a
record holds) plus one line in `KINDS`; `tests/hooks/test_executor_kinds.py` says what else is
owed. `register` adds one in-process (an embedder's own kind, or a test's).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from the_loop.configspec import Field
from the_loop.hooks.executors import command, local, policy_entry, remote_entry
from the_loop.hooks.executors.kind import Kind

#: The kinds, in the order their declaration keys are listed in messages and the schema.
KINDS: dict[str, Kind] = {k.name: k for k in (local.KIND, remote_entry.KIND, policy_entry.KIND,
                                               command.KIND)}
#: declaration key → the kind it selects (module → local, url → remote, …).
BY_KEY: dict[str, Kind] = {key: k for k in KINDS.values() for key in k.keys}
#: declaration key → that variant's keys: the very dict the entry spec reads
#: (`declaration.HOOK_ENTRY`), so a kind registered later is accepted and in the schema.
VARIANTS: dict[str, dict[str, Field]] = {key: dict(own) for key, own in
                                         ((key, own) for k in KINDS.values()
                                          for key, own in k.keys.items())}
#: executor class (by qualified name) → its kind; and the kind found per class, remembered.
_BY_CLASS: dict[str, Kind] = {name: k for k in KINDS.values() for name in k.classes}
_SEEN: dict[type, Kind | None] = {}


def register(kind: Kind) -> Callable[[], None]:
    """Add `kind` in this process; returns the call that removes it again."""
    clash = [f"the kind name {kind.name!r}"] if kind.name in KINDS else []
    clash += [f"the declaration key {key!r} (kind {BY_KEY[key].name!r})"
              for key in kind.keys if key in BY_KEY]
    clash += [f"the class {name} (kind {_BY_CLASS[name].name!r})"
              for name in kind.classes if name in _BY_CLASS]
    if clash:
        raise ValueError(f"executor kind {kind.name!r}: {' and '.join(clash)} already "
                         "registered; choose another")
    KINDS[kind.name] = kind
    for key, own in kind.keys.items():
        BY_KEY[key] = kind
        VARIANTS[key] = dict(own)
    _BY_CLASS.update(dict.fromkeys(kind.classes, kind))
    _SEEN.clear()

    def unregister() -> None:
        KINDS.pop(kind.name, None)
        for key in kind.keys:
            BY_KEY.pop(key, None)
            VARIANTS.pop(key, None)
        for name in kind.classes:
            _BY_CLASS.pop(name, None)
        _SEEN.clear()

    return unregister


def registered_kind(executor: object) -> Kind | None:
    """The registered kind of `executor` (by its class or a base class), or None."""
    cls = type(executor)
    try:
        return _SEEN[cls]
    except KeyError:
        pass
    found = next((_BY_CLASS[n] for n in (f"{c.__module__}.{c.__qualname__}" for c in cls.__mro__)
                  if n in _BY_CLASS), None)
    _SEEN[cls] = found
    return found


#: What a decision-log step calls the kind of an executor of no registered kind.
UNKNOWN = "unknown"


def logged_name(executor: object) -> str:
    """The word a decision record uses for `executor`'s kind (its kind's `logged_as`), or
    `unknown` for an executor of no registered kind, never a guess."""
    kind = registered_kind(executor)
    return kind.logged_as if kind is not None else UNKNOWN


def secret_names(entry: Mapping[str, Any]) -> list[str]:
    """The environment variables an entry of `hooks:` says hold secrets: the value of every
    key some kind lists under `secrets` (a name or a list of names). Read whatever kind the
    entry is, so a raw entry the loader would reject still counts."""
    names: list[str] = []
    for key in dict.fromkeys(k for kind in KINDS.values() for k in kind.secrets):
        value = entry.get(key)
        for name in value if isinstance(value, list) else [value]:
            if isinstance(name, str) and name:
                names.append(name)
    return names


def handler_for(executor: Any, point: str) -> Callable[[Any], Any]:
    """The callable the chain invokes for `executor` at `point` (its kind says how; an
    executor of no registered kind is asked itself, by the `Executor` protocol)."""
    kind = registered_kind(executor)
    if kind is None:
        handler: Callable[[Any], Any] = executor.handler(point)
        return handler
    return kind.handler(executor, point)


def default_points(executor: Any) -> tuple[str, ...]:
    """The points `executor` handles when its entry's `on` does not narrow them."""
    kind = registered_kind(executor)
    if kind is None:
        points: tuple[str, ...] = executor.points()
        return points
    return kind.default_points(executor)


__all__ = ["BY_KEY", "KINDS", "UNKNOWN", "VARIANTS", "default_points", "handler_for",
           "logged_name", "register", "registered_kind", "secret_names"]
