"""Builds the chain from validated entries (imports, constructs, compiles), once per process.

`load_chain` is the embedding API; `chain_once` is what the loop's commands call: strict for
daemons (a bad declaration raises), lenient for one-shot commands (recorded, no hooks).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

from the_loop.configspec import Invalid
from the_loop.errors import ConfigError, HooksConfigError, LoopError
from the_loop.events import EventLog
from the_loop.hooks.declaring.declaration import CLASS_NAME, MODULE_NAME, HookEntry, parse_hooks
from the_loop.hooks.engine.chain import Chain, Link
from the_loop.hooks.engine.executor import Executor, LifecycleHooks, default_points
from the_loop.hooks.engine.location import failure_line
from the_loop.hooks.engine.points import POINTS
from the_loop.interrupt import install as install_interrupt
from the_loop.interrupt import reraise_if_real


def build_chain(entries: list[HookEntry], *, log: EventLog | None = None) -> Chain:
    """Import and construct every enabled entry; raises `HooksConfigError` naming the entry."""
    links: list[Link] = []
    for entry in entries:
        if not entry.enabled:
            continue
        executor = construct(entry)
        defaults = default_points(executor)
        if entry.on is None:
            points = defaults
        else:
            extra = [p for p in entry.on if p not in defaults]
            if extra and entry.kind in ("module", "path"):
                raise _fail(entry, "on", f"{', '.join(extra)} not handled by "
                            f"{type(executor).__name__} (it overrides: "
                            f"{', '.join(defaults) or 'no point'}); `on` narrows the points a "
                            "class overrides, it cannot add one")
            points = tuple(p for p in entry.on if p in defaults or entry.kind == "url")
        links.append(Link(entry.name, executor, frozenset(points), entry.required))
    chain = Chain(links, log=log)
    for link in links:  # executors that record their own events (policy audit) share the log
        bind = getattr(link.executor, "bind_log", None)
        if bind is not None:
            bind(chain.log)
    return chain


#: How a `path:`/`module:` entry's keys are spelled where a fix names another key.
YAML_KEYS = {"path": "path:", "module": "module:", "executor": "executor:", "with": "with:"}


def _fail(entry: HookEntry, key: str, detail: str, *, at_key: bool = True) -> HooksConfigError:
    where = f"{entry.label} → {key}" if at_key else entry.label
    return HooksConfigError(f"{where}: {detail}", entry=entry.name, key=key, detail=detail)


def construct(
    entry: HookEntry, *, names: dict[str, str] | None = None
) -> LifecycleHooks | Executor:
    """Import and construct one entry's executor; raises `HooksConfigError` naming entry and key.

    `names` spells the keys a fix refers to (default: as in cli-config.yaml); a caller that
    took the entry from elsewhere (command-line options, environment variables) passes its
    own, and builds its message from the error's `key` and `detail`.
    """
    names = names or YAML_KEYS
    if entry.kind == "url":
        from the_loop.hooks.executors.remote import RemoteExecutor

        return RemoteExecutor(
            name=entry.name, url=entry.target, token_env=entry.token_env,
            headers=entry.headers, timeout=entry.timeout,
        )
    if entry.kind == "policy":
        from the_loop.hooks.executors.policy import load_policy

        try:
            return load_policy(entry.name, Path(entry.resolved), points=entry.on)
        except LoopError as exc:
            raise _fail(entry, "policy", str(exc)) from None
    module = _import(entry)
    cls = _pick_class(entry, module, names)
    if isinstance(cls, LifecycleHooks):
        if entry.with_:
            raise _fail(entry, "with", f"{entry.executor} is already an instance; "
                                       f"`{names['with'].rstrip(':')}` needs a class")
        return cls
    try:
        built: LifecycleHooks = cls(**entry.with_)
        return built
    except BaseException as exc:  # whatever a hook's constructor raises fails its entry
        reraise_if_real(exc)
        raise _fail(entry, "with", f"constructing {cls.__name__}(**with) failed: "
                                   f"{failure_line(exc, cls)}", at_key=False) from None


def _import_installed(name: str) -> ModuleType:
    """Import an installed module, never one from the working directory.

    `python -m …` puts the working directory first on sys.path; a session working in a
    checkout must not be able to plant `acme_hooks.py` there and have it imported.
    """
    saved = sys.path[:]
    # Only the entry Python itself put first (the working directory for `-m` and `-c`);
    # a PYTHONPATH entry the operator chose stays, even when it names the same folder.
    if saved and (saved[0] in ("", ".") or os.path.abspath(saved[0]) == os.getcwd()):
        sys.path[:] = saved[1:]
    try:
        return importlib.import_module(name)
    finally:
        sys.path[:] = saved


def _import(entry: HookEntry) -> ModuleType:
    key = "module" if entry.kind == "module" else "path"
    try:
        if entry.kind == "module":
            return _import_installed(entry.resolved)
        path = Path(entry.resolved)
        if not path.is_file():
            raise _fail(entry, "path", f"no file at {path} (relative paths resolve against the "
                                       "folder of cli-config.yaml)")
        mod_name = f"the_loop_hook_{entry.name.replace('-', '_')}"
        spec = importlib.util.spec_from_file_location(mod_name, path)
        if spec is None or spec.loader is None:
            raise _fail(entry, "path", f"{path} is not a Python file")
        module = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(mod_name, None)
            raise
        return module
    except HooksConfigError:
        raise
    except BaseException as exc:  # whatever a hook module raises at import fails its entry
        reraise_if_real(exc)
        raise _fail(entry, key, f"cannot import {entry.target!r}: "
                                f"{failure_line(exc)}") from None


def _pick_class(entry: HookEntry, module: ModuleType, names: dict[str, str]) -> Any:
    if entry.executor:
        obj = getattr(module, entry.executor, None)
        if obj is None:
            raise _fail(entry, "executor", f"{entry.target!r} has no attribute "
                                           f"{entry.executor!r}")
        if isinstance(obj, LifecycleHooks) or (
            isinstance(obj, type) and issubclass(obj, LifecycleHooks)
        ):
            return obj
        raise _fail(entry, "executor", f"{entry.executor!r} is not a LifecycleHooks subclass "
                                       f"(got {type(obj).__name__})")
    found = [
        obj for obj in vars(module).values()
        if isinstance(obj, type) and issubclass(obj, LifecycleHooks) and obj is not LifecycleHooks
    ]
    own = [c for c in found if c.__module__ == module.__name__] or found
    if not own:
        raise _fail(entry, entry.kind, f"{entry.target!r} defines no LifecycleHooks subclass; "
                                       "subclass the_loop.sdk.hooks.LifecycleHooks")
    if len(own) > 1:
        listed = ", ".join(sorted(c.__name__ for c in own))
        raise _fail(entry, "executor", f"{entry.target!r} defines several LifecycleHooks "
                                       f"subclasses ({listed}); name one with {names['executor']}")
    return own[0]


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
    kind = "path" if path else "module"
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
    entry = HookEntry(index=0, name="served", kind=kind, target=target, resolved=resolved,
                      executor=executor, with_=dict(with_ or {}))
    try:
        built = construct(entry, names=names)
    except HooksConfigError as exc:
        raise HooksConfigError(f"{names.get(exc.key, exc.key)}: {exc.detail}", key=exc.key,
                               detail=exc.detail) from None
    if not isinstance(built, LifecycleHooks):  # pragma: no cover - path/module entries
        raise HooksConfigError(f"{target!r} did not give a LifecycleHooks executor")
    return built


# ----------------------------------------------------------------------------- load


def secrets_of(entries: list[HookEntry]) -> list[str]:
    """Current values of every declared tokenEnv (for redaction; never logged)."""
    return [os.environ.get(e.token_env, "") for e in entries if e.token_env]


def log_for(config: Any) -> EventLog:
    """The event log under a config's stateDir."""
    return EventLog(config.state_dir / "events.jsonl")


def load_chain(config_path: str | os.PathLike[str], *, log: EventLog | None = None) -> Chain:
    """Read cli-config.yaml and build its chain; raises `HooksConfigError` on any error."""
    from the_loop.config import read_config

    install_interrupt()  # before any hook code runs: a real Ctrl-C stays recognisable
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
