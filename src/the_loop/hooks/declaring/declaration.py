"""The `hooks:` declaration, described once (`HOOKS`): checked strictly (no imports, no network).

parse (typed entries, no imports, no network) → build (import modules, construct
executors, compile policies) → a `Chain`. Any error fails the whole load with one message
that names the entry (index and name), the key, expected vs got, and the fix; a
half-loaded chain never exists. The JSON Schema (`schema.py`) is derived from `HOOKS` too.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from the_loop.configspec import (
    ENV_PATTERN,
    IDENTIFIER_PATTERN,
    NAME,
    NAME_PATTERN,
    NON_EMPTY_PATTERN,
    Any_,
    Bool,
    DictOf,
    Field,
    Invalid,
    ListOf,
    Number,
    Problem,
    Str,
    Tagged,
    dotted,
    got,
)
from the_loop.errors import HooksConfigError, quote
from the_loop.hooks.engine.points import POINTS, point_list
from the_loop.util import TOKEN_URL_PATTERN, url_problem
from the_loop.util import is_loopback as is_loopback  # re-exported: cli/serve.py imports it here

ENV_RE = re.compile(ENV_PATTERN)  # for `hooks serve --token-env`
_IDENTIFIER = IDENTIFIER_PATTERN[1:-1]
MODULE_PATTERN = rf"^{_IDENTIFIER}(\.{_IDENTIFIER})*$"
HEADER_PATTERN = "^[!#$%&'*+.^_`|~0-9A-Za-z-]+$"
KINDS = ("module", "path", "url", "policy")
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


# ------------------------------------------------------------------ named checks


def _allowed_header(name: str, _ctx: object) -> str:
    why = FORBIDDEN_HEADERS.get(name.lower())
    if why:
        raise Problem(f"{name!r} is not allowed here: {why}")
    return name


def _endpoint(entry: dict[str, Any], _ctx: object) -> dict[str, Any]:
    """A url entry's address: no credentials, and plain http:// to a loopback host only."""
    if entry["kind"] == "url":
        problem = url_problem(entry["url"], token=bool(entry["tokenEnv"]), hook=True)
        if problem:
            raise Problem(problem, "url")
    return entry


def _unique_names(entries: list[dict[str, Any]], _ctx: object) -> list[dict[str, Any]]:
    seen: dict[str, int] = {}
    for index, entry in enumerate(entries):
        if entry["name"] in seen:
            raise Problem(f"duplicate of hooks[{seen[entry['name']]}]; names must be unique",
                          index, "name")
        seen[entry["name"]] = index
    return entries


def _secret_shown(value: object) -> str:
    # The value is not echoed: an operator who got this wrong may have pasted the token.
    if not isinstance(value, str):
        return f"a value of type {type(value).__name__}"
    if not value:
        return "an empty string (leave tokenEnv out to send no token)"
    return "a string that is not a variable name (value not shown in case it is the token)"


def _any_case(word: str) -> str:
    """A regex matching `word` in any letter case (JSON Schema regexes have no flags)."""
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else c for c in word)


# ------------------------------------------------------------------ the description

_POINTS = point_list(hint=f". Valid points: {', '.join(POINTS)}; leave `on` out to run at "
                          "every point the executor handles")
#: `module:` and `executor:` (also checked for `hooks serve --module/--executor`).
MODULE_NAME = Str(
    pattern=MODULE_PATTERN, expected="a dotted module name like acme.hooks",
    hint=" (for a file, use path:)", shown=lambda v: quote(v) if isinstance(v, str) else got(v),
    description="an installed dotted module defining a LifecycleHooks subclass")
CLASS_NAME = Str(pattern=IDENTIFIER_PATTERN, expected="a class name in the module",
                 description="the class to use when the module defines several")
_WITH = DictOf(
    key=Str(pattern=IDENTIFIER_PATTERN, expected="a keyword argument name",
            mismatch=lambda k: f"{k!r} is not a valid keyword argument name"),
    value=Any_(), nullable=True, expected="a mapping of constructor keyword arguments",
    description="constructor keyword arguments",
)
_HEADERS = DictOf(
    key=Str(pattern=HEADER_PATTERN, expected="an HTTP header name", then=(_allowed_header,),
            mismatch=lambda k: f"{k!r} is not a valid HTTP header name",
            schema={"not": {"pattern": "^(" + "|".join(
                _any_case(h) for h in sorted(FORBIDDEN_HEADERS)) + ")$"}}),
    value=Str(pattern="^[^\r\n]*$", expected="a one-line string value"),
    nullable=True, expected="a mapping of header name to value",
    description="non-secret request headers",
)
#: One entry of `hooks:`; the entry's kind is whichever of module, path, url, policy it has.
HOOK_ENTRY = Tagged(
    expected=f"a mapping with name and one of {', '.join(KINDS)}", then=(_endpoint,),
    fields={
        "name": Field(replace(NAME, description="unique name"),
                      required=f"every entry needs a name matching {NAME_PATTERN}"),
        "on": Field(_POINTS),
        "required": Field(Bool(), default=False),
        "enabled": Field(Bool(), default=True),
    },
    variants={
        "module": {"module": Field(MODULE_NAME),
                   "executor": Field(CLASS_NAME, default=""),
                   "with": Field(_WITH, default=dict)},
        "path": {"path": Field(Str(pattern=NON_EMPTY_PATTERN, expected="a non-empty string",
                                   description="a .py file: absolute, ~/…, or relative to this "
                                               "file's folder")),
                 "executor": Field(CLASS_NAME, default=""),
                 "with": Field(_WITH, default=dict)},
        "url": {"url": Field(Str(pattern=NON_EMPTY_PATTERN, expected="a non-empty string",
                                 schema={"pattern": TOKEN_URL_PATTERN},
                                 description="https://…, or http:// to a loopback host")),
                "tokenEnv": Field(Str(
                    pattern=ENV_PATTERN, shown=_secret_shown,
                    hint="; never put the token itself here",
                    description="NAME of the environment variable holding the bearer token",
                    expected="the NAME of an environment variable (letters, digits and _, "
                             "e.g. COMPLIANCE_TOKEN)"), default=""),
                "headers": Field(_HEADERS, default=dict),
                "timeoutSeconds": Field(Number(
                    above=0, maximum=MAX_TIMEOUT,
                    expected=f"a number of seconds > 0 and ≤ {MAX_TIMEOUT:g}"),
                    default=DEFAULT_TIMEOUT)},
        "policy": {"policy": Field(Str(pattern=NON_EMPTY_PATTERN, expected="a non-empty string",
                                       description="a folder of YAML rule files, relative to "
                                                   "this file's folder"))},
    },
)
#: The whole `hooks:` section.
HOOKS = ListOf(
    item=HOOK_ENTRY, nullable=True, then=(_unique_names,), expected="a list of entries",
    hint=". Write `hooks:` followed by `- name: …` items",
)


def parse_hooks(raw: Any, base_dir: Path) -> list[HookEntry]:
    """Check the raw `hooks:` value against `HOOKS`; raises `HooksConfigError` on the first
    bad entry, naming it."""
    if isinstance(raw, list):
        raw = [_yaml11_on(i, item) for i, item in enumerate(raw)]
    try:
        checked = HOOKS.check(raw)
    except Invalid as exc:
        raise _error(raw, exc) from None
    return [_entry(i, e, base_dir) for i, e in enumerate(checked)]


def _yaml11_on(index: int, item: Any) -> Any:
    """A YAML 1.1 reader turns a bare `on:` key into True; read it as `on`."""
    if not isinstance(item, dict) or True not in item:
        return item
    if "on" in item:
        raise _error([item], Invalid((0, "on"), "given twice (as `on` and as a YAML 1.1 "
                                                "boolean key); keep one"), index)
    return {("on" if k is True else k): v for k, v in item.items()}


def _error(raw: Any, exc: Invalid, index: int | None = None) -> HooksConfigError:
    """`hooks[1] ('name') → key: message`, with the entry and key as data."""
    if not exc.path:
        return HooksConfigError(f"hooks: {exc.message}", key="hooks", detail=exc.message)
    at = exc.path[0] if index is None else 0
    item = raw[at] if isinstance(raw, list) and isinstance(at, int) else None
    name = item.get("name") if isinstance(item, dict) else None
    name = name if isinstance(name, str) else ""
    where = f"hooks[{at if index is None else index}]" + (f" ({name!r})" if name else "")
    key = dotted(exc.path[1:])
    return HooksConfigError(f"{where}{f' → {key}' if key else ''}: {exc.message}",
                            entry=name, key=key, detail=exc.message)


def _entry(index: int, e: dict[str, Any], base_dir: Path) -> HookEntry:
    kind = e["kind"]
    target = e[kind]
    resolved = target
    if kind in ("path", "policy"):
        p = Path(os.path.expanduser(target))
        # Never the working directory or a checkout: relative means the config's folder.
        resolved = str(p if p.is_absolute() else (base_dir / p).absolute())
    return HookEntry(
        index=index, name=e["name"], kind=kind, target=target, resolved=resolved,
        on=e.get("on"), required=e["required"], enabled=e["enabled"],
        executor=e.get("executor", ""), with_=dict(e.get("with", {})),
        token_env=e.get("tokenEnv", ""), headers=dict(e.get("headers", {})),
        timeout=float(e.get("timeoutSeconds", DEFAULT_TIMEOUT)),
    )
