"""Builds the chain from validated entries (imports, constructs, compiles), once per process.

`load_chain` is the embedding API; `chain_once` is what the loop's commands call: strict for
daemons (a bad declaration raises), lenient for one-shot commands (recorded, no hooks).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from the_loop.configspec import Invalid
from the_loop.errors import ConfigError, HooksConfigError
from the_loop.events import EventLog
from the_loop.hooks.declaring.declaration import parse_hooks
from the_loop.hooks.declaring.entry import HookEntry
from the_loop.hooks.engine.chain import Chain, Link
from the_loop.hooks.engine.executor import Executor, LifecycleHooks
from the_loop.hooks.engine.points import POINTS
from the_loop.hooks.executors.local import CLASS_NAME, MODULE_NAME
from the_loop.hooks.executors.local import KIND as LOCAL
from the_loop.hooks.executors.local import construct as construct_local
from the_loop.hooks.executors.registry import BY_KEY, default_points, secret_names


def build_chain(entries: list[HookEntry], *, log: EventLog | None = None) -> Chain:
    """Build every enabled entry as its kind says; raises `HooksConfigError` naming the entry."""
    links: list[Link] = []
    for entry in entries:
        if not entry.enabled:
            continue
        executor = construct(entry)
        defaults = default_points(executor)
        points = defaults if entry.on is None else tuple(p for p in entry.on if p in defaults)
        # A local entry's timeoutSeconds bounds it in the chain (a url: entry's own client
        # keeps its deadline).
        timeout = entry.options.get("timeoutSeconds") if entry.kind == LOCAL.name else None
        links.append(Link(entry.name, executor, frozenset(points), entry.required, timeout))
    chain = Chain(links, log=log)
    for link in links:  # executors that record their own events (policy audit) share the log
        bind = getattr(link.executor, "bind_log", None)
        if bind is not None:
            bind(chain.log)
    return chain


def construct(
    entry: HookEntry, *, names: Mapping[str, str] | None = None
) -> LifecycleHooks | Executor:
    """Build one entry's executor as its kind says; raises `HooksConfigError` naming entry
    and key (`names`: how the keys a fix refers to are spelled, see `local.construct`)."""
    built: LifecycleHooks | Executor = BY_KEY[entry.declared_as].build(entry, names or {})
    return built


def load_executor(
    *,
    path: str | None,
    module: str | None,
    executor: str = "",
    with_: dict[str, Any] | None = None,
    names: dict[str, str],
) -> LifecycleHooks:
    """Import and construct a hook class as a `path:`/`module:` entry would be.

    For hosts that name the class outside cli-config.yaml (`hooks serve`, the WSGI app):
    `names` maps the keys path/module/executor/with to what the person typed, and every
    error is a `HooksConfigError` whose message starts with that name.
    """
    declared_as = "path" if path else "module"
    target = path or module or ""
    resolved = target
    if path:
        file = Path(path).expanduser().absolute()
        if not file.is_file():
            raise HooksConfigError(f"{names['path']}: no file at {file}", key="path",
                                   detail=f"no file at {file}")
        resolved = str(file)
    for key, value, spec in (("module", None if path else target, MODULE_NAME),
                             ("executor", executor or None, CLASS_NAME)):
        try:
            _ = value is None or spec.check(value)
        except Invalid as exc:
            raise HooksConfigError(f"{names[key]}: {exc.message}", key=key,
                                   detail=exc.message) from None
    entry = HookEntry(index=0, name="served", declared_as=declared_as, kind=LOCAL.name,
                      target=target, resolved=resolved, executor=executor,
                      with_=dict(with_ or {}))
    try:
        return construct_local(entry, names)
    except HooksConfigError as exc:
        raise HooksConfigError(f"{names.get(exc.key, exc.key)}: {exc.detail}", key=exc.key,
                               detail=exc.detail) from None


# ----------------------------------------------------------------------------- load


def secrets_of(entries: list[HookEntry]) -> list[str]:
    """Current values of every variable an entry names as holding a secret (its kind's
    `secrets`: a url entry's tokenEnv, …), for redaction; never logged."""
    return [os.environ.get(name, "") for e in entries for name in secret_names(e.options)]


def log_for(config: Any) -> EventLog:
    """The event log under a config's stateDir."""
    return EventLog(config.state_dir / "events.jsonl")


def load_chain(config_path: str | os.PathLike[str], *, log: EventLog | None = None) -> Chain:
    """Read cli-config.yaml and build its chain; raises `HooksConfigError` on any error."""
    from the_loop.config import read_config

    try:
        config = read_config(Path(config_path))
    except ConfigError as exc:
        raise HooksConfigError(str(exc)) from None
    return chain_from_config(config, log=log)


def chain_from_config(config: Any, *, log: EventLog | None = None) -> Chain:
    """The chain of a parsed `Config`; records hooks.loaded or hooks.load_failed."""
    if log is None:
        log = log_for(config) if config.path is not None else EventLog()
    entries: list[HookEntry] = []
    try:
        entries = parse_hooks(config.hooks, config.folder)
        log.add_secrets(lambda: secrets_of(entries))  # a caller's own (a server's token) stay
        chain = build_chain(entries, log=log)
    except HooksConfigError as exc:
        log.emit("hooks.load_failed", error=str(exc), config=str(config.path or ""))
        raise
    log.emit(
        "hooks.loaded", hooks=[link.name for link in chain.links],
        points={p: chain.names(p) for p in POINTS if chain.names(p)},
        config=str(config.path or ""),
    )
    return chain


#: config path → (the chain, or the empty chain after a failure; the failure or None).
_CACHE: dict[str, tuple[Chain, HooksConfigError | None]] = {}
_CACHE_LOCK = threading.Lock()


def chain_once(config: Any, *, strict: bool, log: EventLog | None = None) -> Chain:
    """The process's chain for `config`, loaded at most once.

    strict (daemons): a bad declaration raises `HooksConfigError`. Not strict (one-shot
    commands): it is recorded as hooks.load_failed and an empty chain is returned. The
    outcome is kept either way: a strict caller after a failed load still gets the error,
    never the empty chain, and nothing is imported a second time.
    """
    key = str(config.path)
    with _CACHE_LOCK:
        if key not in _CACHE:
            try:
                _CACHE[key] = (chain_from_config(config, log=log), None)
            except HooksConfigError as exc:
                empty = Chain(log=log if log is not None else log_for(config))
                _CACHE[key] = (empty, exc)
        chain, error = _CACHE[key]
    if error is not None and strict:
        raise error
    return chain
