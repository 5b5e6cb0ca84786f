"""The revision of a declared chain: one hash for everything a reload of it reads.

`hooks serve --declared` reloads the config and every hook's code on SIGHUP, so its revision
covers the config file, each policy folder (the revision of the snapshot it compiled) and
each hook class's source file (issue 30, item 6): two behaviours never share a revision.
A `module:` entry is imported once per process (a reload builds its class again, from the
same code), so its source is hashed once, when first seen; a `path:` entry is executed anew
by each load, and hashed with it. `sources` names the same files for the watch.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from types import ModuleType

from the_loop.config import Config
from the_loop.hooks.engine.chain import Chain
from the_loop.hooks.executors import registry
from the_loop.hooks.executors.policy import PolicyExecutor

__all__ = ["declared_revision", "sources"]

_HASHED = "__the_loop_source_sha256__"  # kept on the module object: one hash per import


def declared_revision(config: Config, chain: Chain) -> str:
    """sha256 over the config file, each policy folder's revision and each hook's source."""
    digest = hashlib.sha256()
    if config.path is not None:
        digest.update(Path(config.path).read_bytes())
    for link in chain.links:
        executor = link.executor
        if isinstance(executor, PolicyExecutor):
            part = f"policy:{executor.policy.revision}"
        else:
            module = _module_of(executor)
            part = f"code:{_source_hash(module)}" if module is not None else "as declared"
        digest.update(f"{link.name}={part};".encode())
    return digest.hexdigest()


def sources(chain: Chain) -> list[Path]:
    """The hook source files a reload of `chain` would run again (its `path:` entries and
    the files their classes come from); installed modules are not re-imported by a reload."""
    out: list[Path] = []
    for link in chain.links:
        module = _module_of(link.executor)
        file = getattr(module, "__file__", None) if module is not None else None
        if file and module is not None and module.__name__.startswith("the_loop_hook_"):
            out.append(Path(file))
    return out


def _module_of(executor: object) -> ModuleType | None:
    """The module a local hook's class is defined in (None for any other kind)."""
    kind = registry.registered_kind(executor)
    if kind is None or kind.logged_as != "local":
        return None
    return sys.modules.get(type(executor).__module__)


def _source_hash(module: ModuleType) -> str:
    known = module.__dict__.get(_HASHED)
    if isinstance(known, str):
        return known
    file = getattr(module, "__file__", None)
    try:
        body = Path(file).read_bytes() if file else module.__name__.encode()
    except OSError as exc:
        body = f"unreadable: {exc}".encode()
    value = hashlib.sha256(body).hexdigest()
    module.__dict__[_HASHED] = value
    return value
