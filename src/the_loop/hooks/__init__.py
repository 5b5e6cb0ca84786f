"""The hooks engine (embedding API): `load_chain`, `Chain`, `Outcome`, `HooksConfigError`, and
`install_interrupt` (call it once to have a real Ctrl-C leave a running chain, as the CLI does).

One folder per part: `engine/` (the catalog of points, the executor protocol, the chain),
`declaring/` (the `hooks:` declaration, its schema and the loader), `executors/` (the
registry of executor kinds: local classes, the remote client, the policy executor), `serving/`
(the hook server: JSON-RPC, HTTP, WSGI, dialect), `policy/` (the policy language). The
JMESPath compiler is `the_loop.jmes`.

Each name is imported at first use (PEP 562), so a process that only reads the catalog of
points (a tracker building a `WorkItem`) does not load the declaration machinery with it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from the_loop.errors import HooksConfigError
    from the_loop.hooks.declaring.loading import load_chain
    from the_loop.hooks.engine.chain import Chain, Outcome
    from the_loop.interrupt import install as install_interrupt

__all__ = ["Chain", "HooksConfigError", "Outcome", "install_interrupt", "load_chain"]

#: Where each public name lives: (module, attribute).
_HOMES = {
    "Chain": ("the_loop.hooks.engine.chain", "Chain"),
    "HooksConfigError": ("the_loop.errors", "HooksConfigError"),
    "Outcome": ("the_loop.hooks.engine.chain", "Outcome"),
    "install_interrupt": ("the_loop.interrupt", "install"),
    "load_chain": ("the_loop.hooks.declaring.loading", "load_chain"),
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'the_loop.hooks' has no attribute {name!r}")
    module, attr = _HOMES[name]
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value
