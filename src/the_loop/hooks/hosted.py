"""What a hook server can host, as one executor: a hook class, a policy folder, a whole chain.

`hooks serve` and the WSGI app build their executor here, so both load exactly what the
loop would load for the same declaration (a policy folder is checked as a `policy:` entry
is; the declared chain is built as `poll` builds it, with its order, sticky refusal and
`required`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from the_loop.config import Config
from the_loop.errors import HooksConfigError, LoopError
from the_loop.events import EventLog
from the_loop.hooks.chain import Chain
from the_loop.hooks.executor import Executor
from the_loop.hooks.loading import chain_from_config
from the_loop.hooks.points import POINTS, Context
from the_loop.hooks.policy import load_policy


class ChainExecutor:
    """A chain as one executor: each point runs every link the chain has there, in order.

    The answer is the chain's final context, so a caller sees what the loop would apply:
    a refusal sticks, a failing `required` link refuses, a failing optional one is skipped.
    """

    def __init__(self, chain: Chain) -> None:
        self.chain = chain
        self._points = tuple(p for p in POINTS if chain.names(p))

    def points(self) -> tuple[str, ...]:
        return self._points

    def handler(self, point: str) -> Callable[[Context], Context]:
        run = self.chain.run

        def handle(ctx: Context) -> Context:
            return run(ctx)

        return handle


def policy_executor(folder: str | Path, *, name: str = "policy") -> Executor:
    """A policy folder, compiled and checked as a `policy:` entry is.

    Raises `LoopError` listing every error of the folder (a server with a broken policy
    never starts).
    """
    path = Path(folder).expanduser().absolute()
    if not path.is_dir():
        raise LoopError(f"{folder}: no policy folder there (expected a folder of rule files)")
    return load_policy(name, path)


def declared_executor(config: Config, *, log: EventLog | None = None) -> ChainExecutor:
    """The chain `config` declares, as one executor; raises `HooksConfigError` when it
    cannot load (every entry is built: imports, policies, remote clients)."""
    if config.path is None:
        raise HooksConfigError(
            "no cli-config.yaml found to serve the declared chain of: pass --config PATH "
            "or set $THE_LOOP_CLI_CONFIG"
        )
    return ChainExecutor(chain_from_config(config, log=log))
