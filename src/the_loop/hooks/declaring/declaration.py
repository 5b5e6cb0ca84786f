"""The `hooks:` declaration, described once (`HOOKS`): checked strictly (no imports, no network).

parse (typed entries, no imports, no network) → build (import modules, construct
executors, compile policies) → a `Chain`. Any error fails the whole load with one message
that names the entry (index and name), the key, expected vs got, and the fix; a
half-loaded chain never exists. The JSON Schema (`schema.py`) is derived from `HOOKS` too.
Each kind's own keys come from the executor registry (`hooks/executors/registry.py`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from the_loop.configspec import (
    ENV_PATTERN,
    NAME,
    NAME_PATTERN,
    Bool,
    Field,
    Invalid,
    ListOf,
    Problem,
    Tagged,
    dotted,
)
from the_loop.errors import HooksConfigError
from the_loop.hooks.declaring.entry import DEFAULT_TIMEOUT, HookEntry
from the_loop.hooks.engine.points import POINTS, point_list
from the_loop.hooks.executors.kind import KeyDoc
from the_loop.hooks.executors.registry import BY_KEY, VARIANTS
from the_loop.util import is_loopback as is_loopback  # re-exported: cli/serve.py imports it here

ENV_RE = re.compile(ENV_PATTERN)  # for `hooks serve --token-env`


def _unique_names(entries: list[dict[str, Any]], _ctx: object) -> list[dict[str, Any]]:
    seen: dict[str, int] = {}
    for index, entry in enumerate(entries):
        if entry["name"] in seen:
            raise Problem(f"duplicate of hooks[{seen[entry['name']]}]; names must be unique",
                          index, "name")
        seen[entry["name"]] = index
    return entries


def _kind_check(entry: dict[str, Any], _ctx: object) -> dict[str, Any]:
    """The check the entry's kind makes of a whole entry (a url entry's address, say)."""
    check = BY_KEY[entry["kind"]].check
    return check(entry) if check is not None else entry


# ------------------------------------------------------------------ the description

_POINTS = point_list(hint=f". Valid points: {', '.join(POINTS)}; leave `on` out to run at "
                          "every point the executor handles")
#: One entry of `hooks:`: `name`, `on`, `required`, `enabled`, and the keys of its kind,
#: whichever declaration key it has (`registry.VARIANTS`: module, path, url, policy).
HOOK_ENTRY = Tagged(
    expected=f"a mapping with name and one of {', '.join(VARIANTS)}", then=(_kind_check,),
    fields={
        "name": Field(NAME.replace(description="unique name"),
                      required=f"every entry needs a name matching {NAME_PATTERN}"),
        "on": Field(_POINTS),
        "required": Field(Bool(), default=False),
        "enabled": Field(Bool(), default=True),
    },
    variants=VARIANTS,
)
#: How docs/declaring-hooks.md describes the keys every entry has (each kind documents its own).
COMMON_DOCS = {
    "name": KeyDoc("string `^[a-z][a-z0-9-]*$`, unique", "— (required)",
                   "how events, traces and refusal comments name the hook"),
    "on": KeyDoc("a point, or a list of points", "see below",
                 "the points this entry runs at, e.g. `[session_spawn]`"),
    "required": KeyDoc("`true` / `false`", "`false`", "when this hook fails at a point that "
                       "has `proceed`, the operation is refused"),
    "enabled": KeyDoc("`true` / `false`", "`true`",
                      "`false` keeps the entry listed but never loads it"),
}
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
    key = e["kind"]
    target = e[key]
    resolved = target
    if key in BY_KEY[key].paths:
        p = Path(os.path.expanduser(target))
        # Never the working directory or a checkout: relative means the config's folder.
        resolved = str(p if p.is_absolute() else (base_dir / p).absolute())
    common = ("name", "kind", "on", "required", "enabled")
    return HookEntry(
        index=index, name=e["name"], declared_as=key, kind=BY_KEY[key].name, target=target,
        resolved=resolved, on=e.get("on"), required=e["required"], enabled=e["enabled"],
        executor=e.get("executor", ""), with_=dict(e.get("with", {})),
        token_env=e.get("tokenEnv", ""), headers=dict(e.get("headers", {})),
        timeout=float(e.get("timeoutSeconds", DEFAULT_TIMEOUT)),
        options={k: v for k, v in e.items() if k not in common},
        folder=str(base_dir.absolute()), shown=BY_KEY[key].shown(target),
    )
