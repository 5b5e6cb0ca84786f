"""The `hooks:` declaration: validate every entry strictly (no imports, no network).

parse (typed entries, no imports, no network) → build (import modules, construct
executors, compile policies) → a `Chain`. Any error fails the whole load with one message
that names the entry (index and name), the key, expected vs got, and the fix; a
half-loaded chain never exists.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from the_loop.errors import HooksConfigError, quote
from the_loop.hooks.points import POINTS, unknown_point_message
from the_loop.util import closest, url_may_carry_token
from the_loop.util import is_loopback as is_loopback  # re-exported: cli/serve.py imports it here

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
    return f"{quote(value)} ({type(value).__name__})"


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
    # Refused here even without a token: a hook's answer changes what the loop does.
    if not url_may_carry_token(url):
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
