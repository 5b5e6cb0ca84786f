"""Finds and reads cli-config.yaml (the whole file, once, with a safe loader).

Each section is validated by its owner: `hooks` by `the_loop.hooks.declaring.declaration`, the
runtime keys by `the_loop.runtime.settings`. Relative paths resolve against the folder of
the config file, never the working directory.

A session's snapshot: when the loop launches a session it writes the config it parsed as
JSON beside the session's log (`write_snapshot`) and names it in the session's environment
($THE_LOOP_CONFIG_SNAPSHOT). The session's commands (`graph complete`, `ask`, run many times
per item) read the data from there instead of parsing YAML, as long as the file is the one
the loop read: same path, device, inode, size, modification and change time (issue 34:
importing PyYAML alone costs twice a bare Python's start). A file edited since, or any doubt,
and the YAML is parsed as always. The snapshot holds only what the config file does, which
the session's commands read anyway; nothing but those commands reads it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from the_loop.errors import ConfigError, quote
from the_loop.util import closest, made_afresh

ENV_VAR = "THE_LOOP_CLI_CONFIG"
#: Names a session's snapshot of the config the loop launched it with (`write_snapshot`).
SNAPSHOT_ENV = "THE_LOOP_CONFIG_SNAPSHOT"

#: Top-level keys cli-config.yaml may carry, with what each is for.
TOP_LEVEL_KEYS: dict[str, str] = {
    "loop": "the loop's name (str)",
    "stateDir": "folder for the event log, tracker database and workspaces (str)",
    "hooks": "the hooks chain (list of entries)",
    "tracker": "the tracker ({kind: local, repository: owner/repo})",
    "armLabel": "a label that arms a ticket when added (str)",
    "harness": "the default harness name (str)",
    "harnesses": "harness commands (list of {name, command, model, env})",
    "graph": "builtin, or a path to a YAML phase graph",
    "channels": "where phase and closure messages go (list)",
    "repository": "a local git repository to create worktrees from (str)",
    "serve": "control-plane tokens ({tokens: {LOGIN: VAR}, tokenEnv: VAR}); host and port "
             "are flags of `the-loop serve`",
    "decisionLog": "how long fired points are kept for replay ({keepDays: 30})",
    "database": "the shared database, postgresql://user@host/dbname (absent: SQLite in "
                "stateDir); its password comes from PGPASSWORD or ~/.pgpass",
    "maxSessions": "harness sessions this host runs at once (default 8)",
    "lease": "claims on work items ({expirySeconds: 30, heartbeatSeconds: 5})",
}


class Config:
    """The parsed file: its location and its raw sections."""

    __slots__ = ("data", "path", "stamp")

    def __init__(self, path: Path | None, data: dict[str, Any] | None = None,
                 stamp: tuple[int, ...] | None = None) -> None:
        self.path = path
        self.data: dict[str, Any] = {} if data is None else data
        #: the file's identity when it was read (`stamp_of`), None when not read from a file
        self.stamp = stamp

    def __repr__(self) -> str:
        return f"Config(path={self.path!r}, data={self.data!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Config):
            return NotImplemented
        return (self.path, self.data) == (other.path, other.data)

    __hash__ = None  # type: ignore[assignment]  # mutable, as the dataclass was

    @property
    def folder(self) -> Path:
        return self.path.parent if self.path is not None else Path.cwd()

    @property
    def loop(self) -> str:
        value = self.data.get("loop", "")
        return value if isinstance(value, str) else ""

    @property
    def state_dir(self) -> Path:
        """The state folder, canonical (no symlink, no `..`): a session's lock is found by
        comparing /proc/*/fd links, which the kernel writes canonical (issue 20, item 6)."""
        raw = self.data.get("stateDir", ".the-loop")
        return self.resolve(raw if isinstance(raw, str) else ".the-loop").resolve()

    @property
    def hooks(self) -> Any:
        return self.data.get("hooks")

    def resolve(self, raw: str) -> Path:
        """A path from the file: absolute, ~/…, or relative to the file's folder."""
        p = Path(os.path.expanduser(raw))
        return p if p.is_absolute() else (self.folder / p)


#: Where the config is looked for when neither --config nor $THE_LOOP_CLI_CONFIG names it,
#: in order: the working directory itself (a folder holding cli-config.yaml beside its
#: policies/, as `the-loop demo` leaves one), then its .the-loop/ (what `the-loop init`
#: writes), then the home folder's .the-loop/.
def lookup_paths() -> tuple[Path, ...]:
    """The conventional places, in the order they are tried."""
    return (
        Path.cwd() / "cli-config.yaml",
        Path.cwd() / ".the-loop" / "cli-config.yaml",
        Path.home() / ".the-loop" / "cli-config.yaml",
    )


def find_config(explicit: str | None = None) -> Path | None:
    """`--config`, else $THE_LOOP_CLI_CONFIG, else the first of `lookup_paths()` that exists.

    The environment variable comes before the working directory: inside an agent session
    it names the operator's config, so a cli-config.yaml the agent writes into its
    workspace is never read.
    """
    if explicit:
        return Path(explicit).expanduser().absolute()
    env = os.environ.get(ENV_VAR, "")
    if env:
        return Path(env).expanduser().absolute()
    for candidate in lookup_paths():
        if candidate.is_file():
            return candidate.absolute()
    return None


def stamp_of(st: os.stat_result) -> tuple[int, ...]:
    """A file's identity and version: a rewrite changes its change time, which no one sets."""
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def write_snapshot(config: Config, target: Path) -> str:
    """Write `config` for a session's commands to read instead of the YAML (`target`, mode
    0600, its folder made 0700 when missing); returns the path, or '' when there is nothing
    to write: no file, or data JSON does not hold as it is (a number as a key, a date), or
    the folder is not writable. Never raises."""
    if config.path is None or config.stamp is None:
        return ""
    try:
        text = json.dumps({"path": str(config.path), "stamp": config.stamp,
                           "data": config.data}, ensure_ascii=False)
        if json.loads(text)["data"] != config.data:
            return ""
        target.parent.mkdir(parents=True, mode=0o700, exist_ok=True)
        with open(made_afresh(target, os.O_WRONLY), "w", encoding="utf-8") as f:
            f.write(text)
    except (TypeError, ValueError, OSError):
        return ""
    return str(target)


def _snapshot(path: Path, st: os.stat_result) -> Any:
    """The data of the session's snapshot of `path` (stat `st` now), when the file is the one
    the loop read; else None."""
    where = os.environ.get(SNAPSHOT_ENV, "")
    if not where:
        return None
    try:
        with open(where, encoding="utf-8") as f:
            snap = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(snap, dict) or snap.get("path") != str(path) or \
            snap.get("stamp") != list(stamp_of(st)):
        return None
    return snap.get("data")


def read_config(path: Path | None) -> Config:
    """Read and parse the file; raises `ConfigError` naming the file and the problem."""
    if path is None:
        return Config(None, {})
    try:
        st = os.stat(path)  # before the read: a write after it changes the stamp
        data = _snapshot(path, st)
        if data is None:
            data = _parse(path)
    except FileNotFoundError:
        raise ConfigError(
            f"{path}: no such file. Pass --config PATH, set ${ENV_VAR}, or run "
            "`the-loop init` to write ./.the-loop/cli-config.yaml"
        ) from None
    except IsADirectoryError:
        raise ConfigError(
            f"{path}: is a folder; name the cli-config.yaml file in it"
        ) from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}: expected a mapping of keys at the top level, got {type(data).__name__}"
        )
    for key in data:
        if key not in TOP_LEVEL_KEYS:
            hint = closest(str(key), tuple(TOP_LEVEL_KEYS))
            raise ConfigError(
                f"{path}: unknown top-level key {quote(key)}"
                + (f" (did you mean {hint!r}?)" if hint else "")
                + f". Allowed keys: {', '.join(TOP_LEVEL_KEYS)}"
            )
    for key in ("loop", "stateDir"):
        if key in data and not isinstance(data[key], str):
            raise ConfigError(
                f"{path}: {key} must be a string (got {quote(data[key])} that is "
                f"{type(data[key]).__name__})"
            )
    return Config(path, data, stamp_of(st))


def _parse(path: Path) -> Any:
    """The YAML file's data; `OSError` when it cannot be read, `ConfigError` when it is not
    YAML."""
    import yaml

    from the_loop import yamlsafe

    try:
        return yamlsafe.load_file(path)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML {yamlsafe.describe_error(exc)}") from None

