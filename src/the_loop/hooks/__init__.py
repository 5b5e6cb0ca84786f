"""The hooks engine: catalog, executors, chain, declaration loader (embedding API)."""

from the_loop.errors import HooksConfigError
from the_loop.hooks.chain import Chain, Outcome
from the_loop.hooks.loading import load_chain

__all__ = ["Chain", "HooksConfigError", "Outcome", "load_chain"]
