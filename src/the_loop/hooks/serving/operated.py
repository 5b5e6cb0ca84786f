"""Building the operations of a hook server: its decision log, masking and reload, from options.

One builder for `hooks serve` (flags) and the WSGI/ASGI apps (THE_LOOP_HOOK_* variables), so
both log, mask and reload alike. `default_log` names the SQLite file a server writes when
told nothing; `OFF` turns the log off.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from the_loop.config import Config
from the_loop.decisions.masking import Masker
from the_loop.decisions.stores import KEEP_DAYS as KEEP_DAYS
from the_loop.decisions.stores import shown
from the_loop.errors import ConfigError, LoopError
from the_loop.hooks.executors.policy import PolicyExecutor
from the_loop.hooks.policy.files import revision
from the_loop.hooks.policy.maskpaths import check
from the_loop.hooks.serving.core import Core
from the_loop.hooks.serving.hosted import ChainExecutor
from the_loop.hooks.serving.jsonrpc import AnyExecutor
from the_loop.hooks.serving.operations import Operations
from the_loop.hooks.serving.reload import Reloader
from the_loop.hooks.serving.revisions import sources
from the_loop.sqldb import StoreError

OFF = "off"
DEFAULT_NAME = "served-decisions.db"
SecretsIn = Callable[[str], list[str]]


def default_log(config: Config | None) -> str:
    """The served decision log when none is named: `<stateDir>/served-decisions.db` for a
    declared chain, else `served-decisions.db` in the working directory."""
    if config is not None and config.path is not None:
        folder = config.state_dir
        folder.mkdir(parents=True, exist_ok=True)
        return str(folder / DEFAULT_NAME)
    return str(Path.cwd() / DEFAULT_NAME)


def policy_masks(executor: AnyExecutor) -> list[str]:
    """The `mask:` paths of every policy folder `executor` serves."""
    if isinstance(executor, PolicyExecutor):
        return list(executor.policy.mask)
    if isinstance(executor, ChainExecutor):
        return [p for link in executor.chain.links if isinstance(link.executor, PolicyExecutor)
                for p in link.executor.policy.mask]
    return []


_DAYS = re.compile(r"[0-9]+(\.[0-9]+)?")


def parse_keep_days(text: str, option: str) -> float:
    """A keep time in days (0: forever); `LoopError` naming `option` for anything else."""
    # Digits and one point only: float() would also take "30_0" (300), "1e2" or " 7 ".
    days = float(text) if _DAYS.fullmatch(text) else -1.0
    if not (days == 0 or 0.05 <= days <= 36_500):
        raise LoopError(f"{option}: expected a number of days from 0.05 to 36500 (0 keeps "
                        f"every record), got {text[:40]!r}")
    return days


def check_masks(masks: list[str], option: str) -> None:
    """`LoopError` naming the first mask path that names no text value."""
    for path in masks:
        try:
            check(path)
        except ValueError as exc:
            raise LoopError(f"{option}: {exc}") from None


def operations(executor: AnyExecutor, *, log: str, masks: list[str], secrets_in: SecretsIn,
               metrics_public: bool = False, keep_days: float = KEEP_DAYS) -> Operations:
    """The operations of a server serving `executor`; `LoopError` when the log cannot be
    opened (a server that would lose every record refuses to start)."""
    target = None if log == OFF else log
    masker = Masker([*masks, *policy_masks(executor)], secrets_in)
    try:
        return Operations(log=target, masker=masker, metrics_public=metrics_public,
                          keep_days=keep_days)
    except ConfigError:
        raise  # a URL carrying a password: said as `database:` says it
    except OSError as exc:
        raise LoopError(f"decision log {shown(log)}: cannot open it ({exc}); name another "
                        "with --decision-log, or --decision-log off") from None
    except StoreError as exc:  # sqlite3's and psycopg's errors, converted by sqldb
        raise LoopError(f"{exc}; check the file or URL, or --decision-log off") from None


def reloader(cores: list[Core], ops: Operations, build: Callable[[], AnyExecutor], *,
             masks: list[str], secrets_in: SecretsIn) -> Reloader:
    """A `Reloader` for what `cores` serve, watching the folders the executor reads."""
    def roots() -> list[Path]:
        return watched(cores[0].executor)

    def files_revision() -> str:
        found = roots()
        return revision(found[0]) if len(found) == 1 and found[0].is_dir() else "(new)"

    def swapped(executor: AnyExecutor) -> None:
        ops.records.masker = Masker([*masks, *policy_masks(executor)], secrets_in)

    return Reloader(cores, build, roots=roots, revision_of_files=files_revision, ops=ops,
                    on_swap=swapped)


def watched(executor: AnyExecutor) -> list[Path]:
    """The files and folders a reload reads: a policy's folder; a chain's config file, each
    of its policy folders and each hook source file a reload runs again."""
    if isinstance(executor, PolicyExecutor):
        return [executor.policy.folder]
    if isinstance(executor, ChainExecutor):
        out = [executor.config_path] if executor.config_path is not None else []
        return out + [link.executor.policy.folder for link in executor.chain.links
                      if isinstance(link.executor, PolicyExecutor)] + sources(executor.chain)
    return []
