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
    """The hooks declaration cannot load; the message names the entry, key and fix.

    `entry` and `key` say where, `detail` what is wrong there (the message without its
    location), so a caller that names things differently (a command-line option, an
    environment variable) builds its own message from the data instead of rewriting ours.
    """

    def __init__(self, message: str, *, entry: str = "", key: str = "",
                 detail: str = "") -> None:
        super().__init__(message)
        self.entry = entry
        self.key = key
        self.detail = detail or message


class UsageError(LoopError):
    """The command line is wrong; exit code 2."""

    exit_code = 2
