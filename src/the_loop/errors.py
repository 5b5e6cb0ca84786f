"""Every error a user or an embedder can meet, under one base; the CLI turns them into exit codes.

    LoopError                   exit 1: something a person must fix (the message says what)
     ├── ConfigError            cli-config.yaml cannot be read or is malformed
     │    └── HooksConfigError  the hooks declaration cannot load (.entry, .key)
     ├── PolicyError            a policy folder cannot load (.errors: every problem, .folder)
     ├── ExpressionError        a JMESPath expression does not compile (.reason, .column, …)
     ├── HookError              a hook failed, with a message for a person; the chain records
     │                          it as `hooks.failed` and never lets it out (also raised by the
     │                          remote and policy executors; the SDK's `HookFailure`, also a
     │                          RuntimeError as the other the-loop's is)
     ├── TrackerError           a ref that does not exist or cannot be parsed; a refused change
     ├── InputTooLong           one input past runtime/input_bound.py's bound, refused unwritten
     └── UsageError             exit 2: the command line itself is wrong

Foreign and internal exceptions are converted once, at one boundary each, and never reach a
user: jmespath's parse errors become `ExpressionError` where the policy compiles an expression
(`hooks.policy.expressions`); YAML errors (`yamlsafe`'s bounds included) become the reading
file's `ConfigError` or `PolicyError`; socket, HTTP and JSON errors of a remote hook become
`HookError` in `hooks.executors.remote`; whatever a hook raises becomes a `hooks.failed`
record in the chain. Anything else reaching the CLI's last guard is a bug of ours, said in one line.

Internal exceptions, each caught where it is named and never seen by a user:

    yamlsafe.TooLargeError (a yaml.YAMLError)   → ConfigError / PolicyError, with line and column
    yamlsafe.UnreadableError (an OSError)       → ConfigError / PolicyError ("cannot read: …")
    executors.remote_http.Closed                → HookError (executors/remote.py)
    functions.InvalidValueError (JMESPathError) → HookError at run time; ExpressionError at load
    point_rules.RuntimeFailure                  → HookError (executors/policy.py)
    jmes.batch.ConditionFailed                  → HookError naming the rule (policy/fast.py)
    jmes.ir.Unsupported                         → that expression falls back to the reference
    compat.DecisionTypeError (a TypeError)      → raised into a hook written for the other
                                                  the-loop's API; the chain records it

`quote(value)` is how every message shows a value: a bounded prefix, never a whole repr;
`exception_line(exc)` and `describe_exception(exc)` are how one shows what was raised: one
bounded line, never a traceback (the CLI's last guard, the chain, the hook server).
"""

from __future__ import annotations

import json
import reprlib
from collections.abc import Iterable
from typing import Any

from the_loop.interrupt import reraise_if_real

#: The most characters of a value any error message quotes.
QUOTE_LIMIT = 80
#: The longest description of an exception we record or print (a hook may raise with a
#: message of any size; the event log and a refusal's reason quote only this much).
MAX_ERROR = 500


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


class PolicyError(LoopError):
    """A policy folder cannot load; `.errors` holds every problem found, one message each."""

    def __init__(self, errors: list[str], *, folder: str = "") -> None:
        self.errors = list(errors)
        self.folder = folder
        if len(self.errors) == 1:
            text = self.errors[0]
        else:
            where = f" in policy folder {folder}" if folder else ""
            text = f"{len(self.errors)} errors{where}:\n" + "\n".join(
                f"  {e}" for e in self.errors
            )
        super().__init__(text)


class ExpressionError(LoopError):
    """A JMESPath expression does not compile.

    `reason` is one of `EXPRESSION_ERROR_REASONS`; `column` is 1-based (0: unknown); `detail` is
    the parser's word for the problem; `function`, `expected` and `got` describe a call with
    the wrong number of arguments or an unknown function (`function` only).
    """

    def __init__(
        self, reason: str, message: str, *, column: int = 0, detail: str = "",
        function: str = "", expected: int | None = None, got: int | None = None,
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.column = column
        self.detail = detail
        self.function = function
        self.expected = expected
        self.got = got


#: What `ExpressionError.reason` may be.
EXPRESSION_ERROR_REASONS = (
    "empty", "incomplete", "lexer", "syntax", "arity", "variadic-arity", "unknown-function",
    "too-deep", "bad-regex", "too-costly", "data",
)


class HookError(LoopError, RuntimeError):
    """A hook failed with a message meant for a person (no traceback needed).

    The SDK exports it also as `HookFailure`, the other the-loop's name for the same thing
    (a `RuntimeError` there too): a hook file written for that loop imports and raises it
    unchanged, and `except HookFailure` catches what our remote executor raises.
    """


class TrackerError(LoopError):
    """A ref that does not exist or cannot be parsed, or a tracker that refused a change."""


class InputTooLong(LoopError):
    """One input longer than one input may be, refused before it is written (the control
    plane answers it 413)."""


class UsageError(LoopError):
    """The command line is wrong; exit code 2."""

    exit_code = 2


class _BoundedRepr(reprlib.Repr):
    """reprlib's bounded repr, keeping a mapping's own order and bounding integers too."""

    def repr_dict(self, x: dict[Any, Any], level: int) -> str:
        if not x:
            return "{}"
        if level <= 0:
            return "{...}"
        pieces: list[str] = []
        for i, (key, value) in enumerate(x.items()):
            if i >= self.maxdict:
                pieces.append("...")
                break
            pieces.append(f"{self.repr1(key, level - 1)}: {self.repr1(value, level - 1)}")
        return "{" + ", ".join(pieces) + "}"

    def repr_int(self, x: int, level: int) -> str:
        return quote(x)


_repr = _BoundedRepr()
_repr.maxstring = QUOTE_LIMIT
_repr.maxother = QUOTE_LIMIT
_repr.maxlevel = 3
_repr.maxlist = _repr.maxtuple = _repr.maxdict = _repr.maxset = 12


def clip(text: str, limit: int = QUOTE_LIMIT) -> str:
    """`text` cut to `limit` characters, with a mark saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit} more characters)"


def one_line(text: str, limit: int = QUOTE_LIMIT) -> str:
    """`text` safe for one line of a terminal or log: JSON-quoted when it holds a newline,
    an escape sequence or any other character that is not printable, and cut to `limit`.
    For anything a caller, an agent or a hook chose (a ref, a hook's error)."""
    if not text.isprintable():
        text = json.dumps(text[:limit * 2])  # \n, ESC, U+2028 … spelled as escapes
    return clip(text, limit)


def exception_line(exc: BaseException, *, plain: bool = False,
                   secrets: Iterable[str] = ()) -> str:
    """`Type: message` for any exception, never raising, at most `MAX_ERROR` characters;
    each of `secrets` is replaced before the message is cut (a cut never leaves part of one)."""
    class_name = type(exc).__name__
    try:
        text = str(exc)
    except BaseException as inner:  # an exception whose message itself raises
        reraise_if_real(inner)
        text = "(its message could not be printed)"
    for secret in secrets:
        text = text.replace(secret, "[redacted]")
    if plain:
        return clip(text, MAX_ERROR) or class_name
    return clip(f"{class_name}: {text}" if text else class_name, MAX_ERROR)


def describe_exception(exc: BaseException, *, plain: bool = False,
                       secrets: Iterable[str] = ()) -> str:
    """What a hook raised, in one line (never a traceback): `exception_line`, except that a
    `SystemExit` is said as the `sys.exit` call it was. Just the message when `plain`."""
    if isinstance(exc, SystemExit):
        try:
            code = exc.code
            shown = repr(code) if isinstance(code, (int, type(None))) else repr(str(code))
        except BaseException as inner:  # a code whose str() raises
            reraise_if_real(inner)
            shown = "…"
        return clip(f"the hook called sys.exit({shown})", MAX_ERROR)
    return exception_line(exc, plain=plain, secrets=secrets)


def quote(value: Any, limit: int = QUOTE_LIMIT) -> str:
    """A bounded repr of `value` for an error message: at most about `limit` characters.

    Containers are cut by depth and length before anything is built, so a value of any size
    (a billion-laughs list, a 5,000-digit integer) costs a bounded amount to show.
    """
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, int):
        if value.bit_length() > 200:
            return f"<an integer of about {int(value.bit_length() * 0.30103) + 1} digits>"
        text = repr(value)
    elif isinstance(value, str):
        text = repr(value[: limit + 1])
        if len(value) > limit:
            text = repr(value[:limit])[:-1] + "…" + text[-1] + f" ({len(value)} characters)"
        return text
    else:
        try:
            text = _repr.repr(value)
        except Exception:  # a hostile __repr__: say what it is instead
            text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[:limit] + "…"


__all__ = [
    "EXPRESSION_ERROR_REASONS",
    "MAX_ERROR",
    "QUOTE_LIMIT",
    "ConfigError",
    "ExpressionError",
    "HookError",
    "HooksConfigError",
    "InputTooLong",
    "LoopError",
    "PolicyError",
    "TrackerError",
    "UsageError",
    "clip",
    "describe_exception",
    "exception_line",
    "quote",
]
