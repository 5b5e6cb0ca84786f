"""`collector_paused()`: Python's cyclic garbage collector held off while a policy loads.

Loading a policy allocates hundreds of thousands of small objects (YAML nodes, ASTs, checked
rules, generated code) that live as long as the policy does. Each allocation burst starts a
young-generation collection that walks them all again and finds nothing to free: about a
sixth of the time a 1,000-rule folder takes to load (`benchmarks/policy.py`). The collector
is disabled for the load and re-enabled after it, only if it was enabled before, so nested
or concurrent loads leave it as they found it (at worst it runs again a little early). No
cycle is lost: the next collection finds whatever the load left as garbage.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """Disable the cyclic collector for the block (a decorator too); restore it after."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
