"""What a hook server can host, as one executor: a hook class, a policy folder, a whole chain.

`hooks serve` and the WSGI app build their executor here, so both load exactly what the
loop would load for the same declaration (a policy folder is checked as a `policy:` entry
is; the declared chain is built as `poll` builds it, with its order, sticky refusal and
`required`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from the_loop.config import Config
from the_loop.decisions.build import applied, chain_step
from the_loop.errors import HooksConfigError, LoopError
from the_loop.events import EventLog
from the_loop.hooks.declaring.loading import chain_from_config
from the_loop.hooks.engine.chain import Chain
from the_loop.hooks.engine.executor import Decisions
from the_loop.hooks.engine.points import POINTS, Context
from the_loop.hooks.executors.policy import PolicyExecutor, load_policy
from the_loop.hooks.executors.registry import logged_name
from the_loop.hooks.serving.revisions import declared_revision


class ChainExecutor:
    """A chain as one executor: each point runs every link the chain has there, in order.

    The answer is the chain's final decisions, so a caller sees what the loop would apply:
    a refusal sticks, a failing `required` link refuses, a failing optional one is skipped.
    Its detail carries each link's step as the loop's decision log records it (`steps`,
    built by `decisions.build`, the loop's own builder) and
    the hook whose refusal stuck (`refused_by`), for the served decision log.
    """

    served_inline = False
    name = "declared"

    def __init__(self, chain: Chain, revision: str = "", config_path: Path | None = None
                 ) -> None:
        self.chain = chain
        self.revision = revision
        self.config_path = config_path
        self._points = tuple(p for p in POINTS if chain.names(p))
        self._kinds = {link.name: logged_name(link.executor) for link in chain.links}

    def points(self) -> tuple[str, ...]:
        return self._points

    def secrets(self) -> list[str]:
        """Every secret the chain holds, read now: each entry's `tokenEnv` value, and the
        server's own token (`declared_executor`). A server replaces them in its answers."""
        return self.chain.log.known_secrets()

    def handler(self, point: str) -> Callable[[Context], Decisions]:
        invoke = self.chain.invoke
        kinds = self._kinds

        def handle(ctx: Context) -> Decisions:
            outcome = invoke(ctx)
            given = ctx.__dict__
            final = applied(point, given, outcome.context.__dict__)  # what the loop applies
            steps = [chain_step(s, kinds) for s in outcome.steps]
            return Decisions(
                values={n: v for n, v in final.items() if v != given[n]},
                detail={"steps": steps, "refused_by": outcome.refused_by})

        return handle


def chain_revision(config: Config, chain: Chain) -> str:
    """The revision of a declared chain: its config file, every policy folder it runs and
    every hook's source (`revisions.declared_revision`)."""
    return declared_revision(config, chain)


def policy_executor(
    folder: str | Path, *, name: str = "policy", log: EventLog | None = None
) -> PolicyExecutor:
    """A policy folder, compiled and checked as a `policy:` entry is; its audit findings
    (`hooks.audit`) go to `log` when given.

    Raises `LoopError` listing every error of the folder (a server with a broken policy
    never starts).
    """
    path = Path(folder).expanduser().absolute()
    if not path.is_dir():
        raise LoopError(f"{folder}: no policy folder there (expected a folder of rule files)")
    executor = load_policy(name, path)
    executor.revision = executor.policy.revision  # of the files compiled, read once
    if log is not None:
        executor.bind_log(log)
    return executor


def served_log(
    path: str | Path | None, token_env: str = "", *, declared: bool = False
) -> EventLog | None:
    """Where a hook server records what its policies and chain found (`hooks.audit`,
    `hooks.failed`, …): JSON lines appended to `path` (when None, only its `on_emit` hears
    them), the server's own bearer token replaced wherever a caller's context carried it.
    It keeps nothing in memory: a long-running server must not grow with its callers.

    None for a `declared` chain with no `path`: it records in its config's own event log,
    as `poll` does (`declared_executor`).
    """
    if declared and path is None:
        return None
    log = EventLog(path, source="hooks-serve", secrets=token_of(token_env), keep=0)
    try:
        log.open_now()  # a server that would lose every finding refuses to start instead
    except OSError as exc:
        raise LoopError(f"{path}: cannot append events there ({exc.strerror or exc}); check "
                        "the path and its folder's permissions") from None
    return log


def declared_executor(
    config: Config, *, log: EventLog | None = None, token_env: str = ""
) -> ChainExecutor:
    """The chain `config` declares, as one executor; raises `HooksConfigError` when it
    cannot load (every entry is built: imports, policies, remote clients). Its events go to
    `log`, else to the config's own event log; either way the server's token (`token_env`)
    is replaced wherever a caller's context carried it."""
    if config.path is None:
        raise HooksConfigError(
            "no cli-config.yaml found to serve the declared chain of: pass --config PATH "
            "or set $THE_LOOP_CLI_CONFIG"
        )
    chain = chain_from_config(config, log=log)
    executor = ChainExecutor(chain, chain_revision(config, chain), config.path)
    executor.chain.log.add_secrets(token_of(token_env))
    return executor


def token_of(token_env: str) -> Callable[[], list[str]]:
    """The server's own bearer token, read when asked (never stored), as a secrets getter."""
    def secrets() -> list[str]:
        token = os.environ.get(token_env, "") if token_env else ""
        return [token] if token else []

    return secrets


def redactor(token_env: str) -> Callable[[str], str]:
    """A log line with the server's token replaced, for lines a caller's input reaches."""
    get = token_of(token_env)

    def redact(line: str) -> str:
        for token in get():
            line = line.replace(token, "[redacted]")
        return line

    return redact
