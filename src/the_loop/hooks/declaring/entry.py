"""`HookEntry`: one checked entry of `hooks:` (nothing imported or contacted yet); its errors."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from the_loop.errors import HooksConfigError

DEFAULT_TIMEOUT = 10.0


@dataclass(frozen=True)
class HookEntry:
    """One validated entry of the `hooks:` list (nothing imported or contacted yet).

    `declared_as` is the declaration key the entry used (module | path | url | policy |
    command); `kind` is the executor kind that key selects (`registry.BY_KEY`: local for
    module and path), the word the decision log records for the entry's steps too.
    `options` holds every key of that variant as checked, so a kind reads its own keys there.
    """

    index: int
    name: str
    declared_as: str  # module | path | url | policy | command
    kind: str  # local | remote | policy | command
    target: Any  # as written (a string; a list for `command:`)
    resolved: str  # module name, absolute path, or url
    on: tuple[str, ...] | None = None  # None: the executor's default points
    required: bool = False
    enabled: bool = True
    executor: str = ""
    with_: dict[str, Any] = field(default_factory=dict)
    token_env: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    timeout: float = DEFAULT_TIMEOUT
    options: dict[str, Any] = field(default_factory=dict)
    #: the folder of the config file: what a kind resolves a relative path against
    folder: str = ""
    #: the target as `the-loop hooks` shows it (its kind's `shown`)
    shown: str = ""

    @property
    def label(self) -> str:
        return f"hooks[{self.index}] ({self.name!r})"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name, "kind": self.kind, "declared_as": self.declared_as,
            "target": self.shown or str(self.target),
            "points": list(self.on) if self.on is not None else "default",
            "required": self.required, "enabled": self.enabled,
        }


def entry_error(
    entry: HookEntry, key: str, detail: str, *, at_key: bool = True
) -> HooksConfigError:
    """`hooks[0] ('name') → key: detail`, with the entry and key as data."""
    where = f"{entry.label} → {key}" if at_key else entry.label
    return HooksConfigError(f"{where}: {detail}", entry=entry.name, key=key, detail=detail)


__all__ = ["DEFAULT_TIMEOUT", "HookEntry", "entry_error"]
