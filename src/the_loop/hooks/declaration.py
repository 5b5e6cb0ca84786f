"""The `hooks:` declaration: validate every entry strictly, then build the chain.

parse (typed entries, no imports, no network) → build (import modules, construct
executors, compile policies) → a `Chain`. Any error fails the whole load with one message
that names the entry (index and name), the key, expected vs got, and the fix; a
half-loaded chain never exists.
"""

from __future__ import annotations

import importlib
import importlib.util
import ipaddress
import os
import re
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import urlsplit

from the_loop.errors import ConfigError, HooksConfigError, LoopError
from the_loop.events import EventLog
from the_loop.hooks.chain import Chain, Link
from the_loop.hooks.executor import Executor, LifecycleHooks, default_points
from the_loop.hooks.points import POINTS, closest, unknown_point_message

NAME_RE = re.compile(r"^[a-z][a-z0-9-]*$")
ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
HEADER_RE = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
KINDS = ("module", "path", "url", "policy")
COMMON_KEYS = ("name", "on", "required", "enabled")
KIND_KEYS: dict[str, tuple[str, ...]] = {
    "module": ("executor", "with"),
    "path": ("executor", "with"),
    "url": ("tokenEnv", "headers", "timeoutSeconds"),
    "policy": (),
}
ALL_KEYS = COMMON_KEYS + KINDS + ("executor", "with", "tokenEnv", "headers", "timeoutSeconds")
#: Headers the client owns, or that would carry a secret in the operator's file.
FORBIDDEN_HEADERS = {
    "authorization": "put the secret in an environment variable and name it with tokenEnv",
    "proxy-authorization": "secrets do not belong in cli-config.yaml",
    "cookie": "secrets do not belong in cli-config.yaml",
    "content-type": "the client always sends application/json",
    "content-length": "the client sets it",
    "host": "the client sets it from url",
    "transfer-encoding": "the client sets it",
    "connection": "the client manages connections",
}
DEFAULT_TIMEOUT = 10.0
MAX_TIMEOUT = 300.0


@dataclass(frozen=True)
class HookEntry:
    """One validated entry of the `hooks:` list (nothing imported or contacted yet)."""

    index: int
    name: str
    kind: str  # module | path | url | policy
    target: str  # as written
    resolved: str  # module name, absolute path, or url
    on: tuple[str, ...] | None = None  # None: the executor's default points
    required: bool = False
    enabled: bool = True
    executor: str = ""
    with_: dict[str, Any] = field(default_factory=dict)
    token_env: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    timeout: float = DEFAULT_TIMEOUT

    @property
    def label(self) -> str:
        return f"hooks[{self.index}] ({self.name!r})"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "kind": self.kind, "target": self.target,
            "points": list(self.on) if self.on is not None else "default",
            "required": self.required, "enabled": self.enabled,
        }


def _got(value: object) -> str:
    return f"{value!r} ({type(value).__name__})"


class _Entry:
    """Error helper bound to one raw entry."""

    def __init__(self, index: int, raw: dict[Any, Any]) -> None:
        self.index = index
        name = raw.get("name")
        self.name = name if isinstance(name, str) else ""

    def fail(self, key: str, message: str) -> HooksConfigError:
        where = f"hooks[{self.index}]" + (f" ({self.name!r})" if self.name else "")
        at = f" → {key}" if key else ""
        return HooksConfigError(f"{where}{at}: {message}", entry=self.name, key=key)


def parse_hooks(raw: Any, base_dir: Path) -> list[HookEntry]:
    """Validate the raw `hooks:` value; raises `HooksConfigError` on the first bad entry."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise HooksConfigError(
            f"hooks: expected a list of entries, got {_got(raw)}. "
            "Write `hooks:` followed by `- name: …` items", key="hooks",
        )
    entries: list[HookEntry] = []
    seen: dict[str, int] = {}
    for index, item in enumerate(raw):
        if not isinstance(item, dict):
            raise HooksConfigError(
                f"hooks[{index}]: expected a mapping with name and one of "
                f"{', '.join(KINDS)}, got {_got(item)}"
            )
        entry = _parse_entry(index, item, base_dir)
        if entry.name in seen:
            raise HooksConfigError(
                f"hooks[{index}] ({entry.name!r}) → name: duplicate of hooks[{seen[entry.name]}]; "
                "names must be unique", entry=entry.name, key="name",
            )
        seen[entry.name] = index
        entries.append(entry)
    return entries


def _parse_entry(index: int, item: dict[Any, Any], base_dir: Path) -> HookEntry:
    e = _Entry(index, item)
    item = dict(item)
    if True in item:  # YAML 1.1 readers turn a bare `on:` key into True
        if "on" in item:
            raise e.fail("on", "given twice (as `on` and as a YAML 1.1 boolean key); keep one")
        item["on"] = item.pop(True)
    for key in item:
        if key not in ALL_KEYS:
            hint = closest(str(key), ALL_KEYS)
            raise e.fail(
                str(key), "unknown key" + (f" (did you mean {hint!r}?)" if hint else "")
                + f". Allowed keys: {', '.join(ALL_KEYS)}",
            )
    name = item.get("name")
    if name is None:
        raise e.fail("name", "missing; every entry needs a name matching ^[a-z][a-z0-9-]*$")
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise e.fail(
            "name", f"expected a name matching ^[a-z][a-z0-9-]*$ (lower-case letters, digits "
            f"and dashes, starting with a letter), got {_got(name)}",
        )
    kinds = [k for k in KINDS if k in item]
    if len(kinds) != 1:
        got = "none" if not kinds else " and ".join(kinds)
        raise e.fail(
            "/".join(KINDS), f"expected exactly one of module, path, url, policy; got {got}",
        )
    kind = kinds[0]
    for key in item:
        if key in KIND_KEYS and key != kind:
            continue
        if key not in COMMON_KEYS and key not in KINDS and key not in KIND_KEYS[kind]:
            allowed = ", ".join(KIND_KEYS[kind]) or "none"
            raise e.fail(
                str(key), f"not allowed on a {kind} entry (keys for a {kind} entry besides "
                f"{', '.join(COMMON_KEYS)}: {allowed})",
            )
    target = item[kind]
    if not isinstance(target, str) or not target.strip():
        raise e.fail(kind, f"expected a non-empty string, got {_got(target)}")
    resolved = _resolve_target(e, kind, target, base_dir)
    on = _parse_on(e, item["on"]) if "on" in item else None
    required = _bool(e, item, "required", False)
    enabled = _bool(e, item, "enabled", True)
    executor = item.get("executor", "")
    if not isinstance(executor, str) or (executor and not executor.isidentifier()):
        raise e.fail("executor", f"expected a class name in the module, got {_got(executor)}")
    with_ = item.get("with", {})
    if with_ is None:
        with_ = {}
    if not isinstance(with_, dict) or not all(isinstance(k, str) for k in with_):
        raise e.fail("with", f"expected a mapping of constructor keyword arguments, "
                             f"got {_got(with_)}")
    bad = [k for k in with_ if not k.isidentifier()]
    if bad:
        raise e.fail("with", f"{bad[0]!r} is not a valid keyword argument name")
    token_env = item.get("tokenEnv", "")
    if not isinstance(token_env, str) or ("tokenEnv" in item and not ENV_RE.fullmatch(token_env)):
        # The value is not echoed: an operator who got this wrong may have pasted the token.
        if not isinstance(token_env, str):
            got = f"a value of type {type(token_env).__name__}"
        elif not token_env:
            got = "an empty string (leave tokenEnv out to send no token)"
        else:
            got = "a string that is not a variable name (value not shown in case it is the token)"
        raise e.fail(
            "tokenEnv", f"expected the NAME of an environment variable (letters, digits and "
            f"_, e.g. COMPLIANCE_TOKEN), got {got}; never put the token itself here",
        )
    headers = _parse_headers(e, item.get("headers", {}))
    timeout = item.get("timeoutSeconds", DEFAULT_TIMEOUT)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not (
        0 < timeout <= MAX_TIMEOUT
    ):
        raise e.fail(
            "timeoutSeconds", f"expected a number of seconds > 0 and ≤ {MAX_TIMEOUT:g}, "
            f"got {_got(timeout)}",
        )
    if kind == "url":
        _check_url(e, target, bool(token_env))
    return HookEntry(
        index=index, name=name, kind=kind, target=target, resolved=resolved, on=on,
        required=required, enabled=enabled, executor=executor, with_=dict(with_),
        token_env=token_env, headers=headers, timeout=float(timeout),
    )


def _bool(e: _Entry, item: dict[Any, Any], key: str, default: bool) -> bool:
    value = item.get(key, default)
    if type(value) is not bool:
        raise e.fail(key, f"expected true or false, got {_got(value)}")
    return value


def _parse_on(e: _Entry, raw: Any) -> tuple[str, ...]:
    # An empty `on:` is refused rather than read as "every point": `on` only ever narrows.
    values = [raw] if isinstance(raw, str) else raw
    if not isinstance(values, list) or not values:
        raise e.fail(
            "on", f"expected a point or a non-empty list of points, got {_got(raw)}. "
            f"Valid points: {', '.join(POINTS)}; leave `on` out to run at every point the "
            "executor handles",
        )
    out: list[str] = []
    for value in values:
        if not isinstance(value, str) or value not in POINTS:
            raise e.fail("on", unknown_point_message(value))
        if value in out:
            raise e.fail("on", f"{value!r} is listed twice")
        out.append(value)
    return tuple(p for p in POINTS if p in out)


def _parse_headers(e: _Entry, raw: Any) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise e.fail("headers", f"expected a mapping of header name to value, got {_got(raw)}")
    out: dict[str, str] = {}
    for key, value in raw.items():
        if not isinstance(key, str) or not HEADER_RE.fullmatch(key):
            raise e.fail("headers", f"{key!r} is not a valid HTTP header name")
        why = FORBIDDEN_HEADERS.get(key.lower())
        if why:
            raise e.fail("headers", f"{key!r} is not allowed here: {why}")
        if not isinstance(value, str) or "\r" in value or "\n" in value:
            raise e.fail(
                "headers", f"{key}: expected a one-line string value, got {_got(value)}",
            )
        out[key] = value
    return out


def is_loopback(host: str) -> bool:
    if host.lower() in ("localhost", "localhost.localdomain") or host.lower().endswith(
        ".localhost"
    ):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_url(e: _Entry, url: str, has_token: bool) -> None:
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise e.fail("url", f"not a valid URL ({exc})") from None
    # Before any message that repeats the URL: credentials in it must never be echoed.
    if "@" in parts.netloc:
        raise e.fail(
            "url", "credentials in the URL are not allowed (URL not shown); put the token in "
            "an environment variable and name it with tokenEnv",
        )
    try:
        _ = parts.port
    except ValueError as exc:
        raise e.fail("url", f"not a valid URL ({exc}): {url!r}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise e.fail(
            "url", f"expected https://host/path (or http:// to a loopback host), got {url!r}",
        )
    if parts.scheme == "http" and not is_loopback(parts.hostname):
        why = " and a bearer token must never cross a network in clear" if has_token else ""
        raise e.fail(
            "url", f"plain http:// is only allowed to a loopback host (127.0.0.1, ::1, "
            f"localhost){why}; use https://{parts.netloc}{parts.path}",
        )


def _resolve_target(e: _Entry, kind: str, target: str, base_dir: Path) -> str:
    if kind == "module":
        if not all(part.isidentifier() for part in target.split(".")):
            raise e.fail("module", f"expected a dotted module name like acme.hooks, got "
                                   f"{target!r} (for a file, use path:)")
        return target
    if kind in ("path", "policy"):
        p = Path(os.path.expanduser(target))
        # Never the working directory or a checkout: relative means the config's folder.
        return str(p if p.is_absolute() else (base_dir / p).absolute())
    return target


# ---------------------------------------------------------------------------- build


def build_chain(entries: list[HookEntry], *, log: EventLog | None = None) -> Chain:
    """Import and construct every enabled entry; raises `HooksConfigError` naming the entry."""
    links: list[Link] = []
    for entry in entries:
        if not entry.enabled:
            continue
        executor = _construct(entry)
        defaults = default_points(executor)
        if entry.on is None:
            points = defaults
        else:
            extra = [p for p in entry.on if p not in defaults]
            if extra and entry.kind in ("module", "path"):
                raise HooksConfigError(
                    f"{entry.label} → on: {', '.join(extra)} not handled by "
                    f"{type(executor).__name__} (it overrides: "
                    f"{', '.join(defaults) or 'no point'}); `on` narrows the points a class "
                    "overrides, it cannot add one", entry=entry.name, key="on",
                )
            points = tuple(p for p in entry.on if p in defaults or entry.kind == "url")
        links.append(Link(entry.name, executor, frozenset(points), entry.required))
    chain = Chain(links, log=log)
    for link in links:  # executors that record their own events (policy audit) share the log
        bind = getattr(link.executor, "bind_log", None)
        if bind is not None:
            bind(chain.log)
    return chain


def _construct(entry: HookEntry) -> LifecycleHooks | Executor:
    if entry.kind == "url":
        from the_loop.hooks.remote import RemoteExecutor

        return RemoteExecutor(
            name=entry.name, url=entry.target, token_env=entry.token_env,
            headers=entry.headers, timeout=entry.timeout,
        )
    if entry.kind == "policy":
        from the_loop.hooks.policy import load_policy

        try:
            return load_policy(entry.name, Path(entry.resolved), points=entry.on)
        except LoopError as exc:
            raise HooksConfigError(
                f"{entry.label} → policy: {exc}", entry=entry.name, key="policy",
            ) from None
    module = _import(entry)
    cls = _pick_class(entry, module)
    if isinstance(cls, LifecycleHooks):
        if entry.with_:
            raise HooksConfigError(
                f"{entry.label} → with: {entry.executor} is already an instance; `with` "
                "needs a class", entry=entry.name, key="with",
            )
        return cls
    try:
        built: LifecycleHooks = cls(**entry.with_)
        return built
    except (Exception, SystemExit) as exc:
        raise HooksConfigError(
            f"{entry.label}: constructing {cls.__name__}(**with) failed: "
            f"{type(exc).__name__}: {exc}", entry=entry.name, key="with",
        ) from None


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
            raise HooksConfigError(
                f"{entry.label} → path: no file at {path} (relative paths resolve against the "
                "folder of cli-config.yaml)", entry=entry.name, key="path",
            )
        mod_name = f"the_loop_hook_{entry.name.replace('-', '_')}"
        spec = importlib.util.spec_from_file_location(mod_name, path)
        if spec is None or spec.loader is None:
            raise HooksConfigError(
                f"{entry.label} → path: {path} is not a Python file", entry=entry.name,
                key="path",
            )
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
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        raise HooksConfigError(
            f"{entry.label} → {key}: cannot import {entry.target!r}: "
            f"{type(exc).__name__}: {exc}", entry=entry.name, key=key,
        ) from None


def _pick_class(entry: HookEntry, module: ModuleType) -> Any:
    if entry.executor:
        obj = getattr(module, entry.executor, None)
        if obj is None:
            raise HooksConfigError(
                f"{entry.label} → executor: {entry.target!r} has no attribute "
                f"{entry.executor!r}", entry=entry.name, key="executor",
            )
        if isinstance(obj, LifecycleHooks) or (
            isinstance(obj, type) and issubclass(obj, LifecycleHooks)
        ):
            return obj
        raise HooksConfigError(
            f"{entry.label} → executor: {entry.executor!r} is not a LifecycleHooks subclass "
            f"(got {type(obj).__name__})", entry=entry.name, key="executor",
        )
    found = [
        obj for obj in vars(module).values()
        if isinstance(obj, type) and issubclass(obj, LifecycleHooks) and obj is not LifecycleHooks
    ]
    own = [c for c in found if c.__module__ == module.__name__] or found
    if not own:
        raise HooksConfigError(
            f"{entry.label} → {entry.kind}: {entry.target!r} defines no LifecycleHooks "
            "subclass; subclass the_loop.sdk.hooks.LifecycleHooks", entry=entry.name,
            key=entry.kind,
        )
    if len(own) > 1:
        names = ", ".join(sorted(c.__name__ for c in own))
        raise HooksConfigError(
            f"{entry.label} → executor: {entry.target!r} defines several LifecycleHooks "
            f"subclasses ({names}); name one with executor:", entry=entry.name, key="executor",
        )
    return own[0]


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
        log._secrets = lambda: secrets_of(entries)
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
