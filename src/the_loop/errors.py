"""The error tree: one base, turned into exit codes by the CLI's top-level handler.

    LoopError                 exit 1: something a person must fix (the message says what)
     ├── ConfigError          cli-config.yaml cannot be read or is malformed
     │    └── HooksConfigError  the hooks declaration is malformed (names the entry and key)
     └── UsageError           exit 2: the command line itself is wrong
"""

from __future__ import annotations


class LoopError(Exception):
    """An error whose message is meant for a person; exit code 1."""

    exit_code = 1


class ConfigError(LoopError):
    """cli-config.yaml cannot be read or is malformed."""


class HooksConfigError(ConfigError):
    """The hooks declaration cannot load; the message names the entry, key and fix."""

    def __init__(self, message: str, *, entry: str = "", key: str = "") -> None:
        super().__init__(message)
        self.entry = entry
        self.key = key


class UsageError(LoopError):
    """The command line is wrong; exit code 2."""

    exit_code = 2
