"""The hooks engine (embedding API): `load_chain`, `Chain`, `Outcome`, `HooksConfigError`, and
`install_interrupt` (call it once to have a real Ctrl-C leave a running chain, as the CLI does).

One folder per part: `engine/` (the catalog of points, the executor protocol, the chain),
`declaring/` (the `hooks:` declaration, its schema and the loader), `executors/` (the
registry of executor kinds: local classes, the remote client, the policy executor), `serving/`
(the hook server: JSON-RPC, HTTP, WSGI, dialect), `policy/` (the policy language). The
JMESPath compiler is `the_loop.jmes`.
"""

from the_loop.errors import HooksConfigError
from the_loop.hooks.declaring.loading import load_chain
from the_loop.hooks.engine.chain import Chain, Outcome
from the_loop.interrupt import install as install_interrupt

__all__ = ["Chain", "HooksConfigError", "Outcome", "install_interrupt", "load_chain"]
