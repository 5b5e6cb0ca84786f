"""The `policy` kind: a `policy:` entry names a folder of rule files, read, compiled and checked
when the chain is built (`policy.load_policy`, imported only then); replay runs it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from the_loop.configspec import NON_EMPTY_PATTERN, Field, Str
from the_loop.errors import LoopError
from the_loop.hooks.declaring.entry import HookEntry, entry_error
from the_loop.hooks.executors.kind import CALL, KeyDoc, Kind, protocol_handler, protocol_points


def build(entry: HookEntry, _names: Mapping[str, str]) -> Any:
    """The policy executor of the entry's folder; every error of the folder fails the entry."""
    from the_loop.hooks.executors.policy import load_policy

    try:
        return load_policy(entry.name, Path(entry.resolved), points=entry.on)
    except LoopError as exc:
        raise entry_error(entry, "policy", str(exc)) from None


KIND = Kind(
    name="policy",
    keys={"policy": {"policy": Field(Str(
        pattern=NON_EMPTY_PATTERN, expected="a non-empty string",
        description="a folder of YAML rule files, relative to this file's folder"))}},
    paths=frozenset({"policy"}),
    build=build,
    classes=("the_loop.hooks.executors.policy.PolicyExecutor",),
    default_points=protocol_points,
    handler=protocol_handler,
    replay=CALL,
    logged_as="policy",
    about="a folder of YAML rules, compiled at load and run in the loop's own process",
    runs_at="the points its rules name",
    docs={"policy": KeyDoc("folder path", "—", "a folder of YAML rule files, relative to the "
                           "config's folder, e.g. `policies`")},
)

__all__ = ["KIND"]
