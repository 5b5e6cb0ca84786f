"""The policy engine's own JMESPath functions.

They are available in two forms that behave identically:

* :class:`PolicyFunctions`, a :class:`jmespath.functions.Functions` subclass for the reference
  interpreter: ``jmespath.search(expr, data, Options(custom_functions=PolicyFunctions()))``;
* :data:`POLICY_FUNCTION_SPECS`, the plain implementations plus the arity and type information
  the compiler (:mod:`the_loop.hooks.policy.jmes`, which knows no policy function: they are
  passed in, see ``expressions.COMPILER``) uses to check calls at compile time and to call the
  functions from generated code.

Both forms take their signatures from the same ``@signature`` declarations, so the arity and the
argument types are checked the same way (``ArityError`` / ``JMESPathTypeError``, exactly as for the
built-in functions). :data:`POLICY_FUNCTIONS` describes each function for generated docs.

Functions
---------
``regex_match(string $pattern, string $subject) -> boolean``
    True when the regular expression ``pattern`` matches *anywhere* in ``subject`` (search
    semantics: anchor with ``^``/``$`` yourself). Patterns run on RE2 (the ``google-re2``
    package), whose matching time is linear in the subject whatever the pattern: a pattern
    such as ``^([A-Za-z0-9]+ ?)+$`` cannot stall the loop on a hostile comment, which Python's
    backtracking ``re`` would (issue 11 rule 6). RE2 is Python's syntax without backreferences
    and lookaround; an invalid or unsupported pattern raises :class:`InvalidValueError` (a
    ``JMESPathError``, hence a ``ValueError``, like the reference's other invalid-value
    errors), and a literal one is a load error (``policy.expressions``).
``glob_match(string $pattern, string $subject) -> boolean``
    True when ``subject`` matches the shell-style ``pattern`` as a whole
    (``fnmatch.fnmatchcase``: ``*``, ``?``, ``[seq]``, ``[!seq]``; case-sensitive, and ``*``
    matches ``/`` too).
``lower(string $subject) -> string`` / ``upper(string $subject) -> string``
    ``str.lower()`` / ``str.upper()`` (full Unicode case mapping).
"""

from __future__ import annotations

import fnmatch
import functools
import re
from collections.abc import Callable, Mapping
from typing import Any

import re2
from jmespath.exceptions import JMESPathError
from jmespath.functions import Functions, signature

from the_loop.errors import quote
from the_loop.hooks.policy.jmes import FunctionSpec

__all__ = [
    "POLICY_FUNCTIONS",
    "POLICY_FUNCTION_SPECS",
    "InvalidValueError",
    "PolicyFunctions",
    "glob_match",
    "lower",
    "regex",
    "regex_match",
    "upper",
]


class InvalidValueError(JMESPathError):
    """An argument has the right type but a value the function cannot use (a bad regex)."""


_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # the error is ours to report, not RE2's to print on stderr
_RE2_OPTIONS.max_mem = 1 << 20  # per pattern: a pattern taken from a fact stays small


@functools.lru_cache(maxsize=256)
def regex(pattern: str) -> Any:
    """`pattern` compiled by RE2 (cached); raises InvalidValueError naming the problem."""
    try:
        return re2.compile(pattern, _RE2_OPTIONS)
    except re2.error as exc:
        why = exc.args[0] if exc.args else b""
        text = why.decode("utf-8", "replace") if isinstance(why, bytes) else str(why)
        raise InvalidValueError(
            f"In function regex_match(), invalid regular expression {quote(pattern)}: {text} "
            "(RE2 syntax: no backreferences or lookaround)"
        ) from None


def regex_match(pattern: str, subject: str) -> bool:
    """True when `pattern` (RE2) matches anywhere in `subject`; a bad pattern raises
    InvalidValueError."""
    return regex(pattern).search(subject) is not None


def glob_match(pattern: str, subject: str) -> bool:
    """``fnmatch.fnmatchcase(subject, pattern)``."""
    return fnmatch.fnmatchcase(subject, pattern)


def lower(subject: str) -> str:
    """``subject.lower()``."""
    return subject.lower()


def upper(subject: str) -> str:
    """``subject.upper()``."""
    return subject.upper()


_STRING: Any = {"types": ["string"]}


class PolicyFunctions(Functions):
    """The built-in JMESPath functions plus the policy functions, for the reference interpreter."""

    @signature(_STRING, _STRING)
    def _func_regex_match(self, pattern: str, subject: str) -> bool:
        return regex_match(pattern, subject)

    @signature(_STRING, _STRING)
    def _func_glob_match(self, pattern: str, subject: str) -> bool:
        return glob_match(pattern, subject)

    @signature(_STRING)
    def _func_lower(self, subject: str) -> str:
        return lower(subject)

    @signature(_STRING)
    def _func_upper(self, subject: str) -> str:
        return upper(subject)


def _regex_search(pattern: str) -> Callable[[str], Any] | None:
    """`regex_match`'s pattern, compiled once: its search (None for a pattern RE2 refuses)."""
    try:
        search: Callable[[str], Any] = regex(pattern).search
    except InvalidValueError:
        return None
    return search


def _glob_matcher(pattern: str) -> Callable[[str], Any] | None:
    """`glob_match`'s pattern, compiled once: `fnmatch.fnmatchcase` as a regex match."""
    try:
        return re.compile(fnmatch.translate(pattern)).match
    except re.error:  # pragma: no cover - fnmatch.translate writes valid expressions
        return None


def _spec(
    name: str,
    impl: Callable[..., Any],
    returns: tuple[str, ...],
    **inline: Any,
) -> FunctionSpec:
    """The compiler's view of a function of `PolicyFunctions` (its `@signature`, `impl`)."""
    declared = PolicyFunctions.FUNCTION_TABLE[name]["signature"]
    return FunctionSpec(
        name=name,
        arg_types=tuple(tuple(arg["types"]) for arg in declared),
        variadic=bool(declared and declared[-1].get("variadic")),
        returns=returns,
        impl=impl,
        **inline,
    )


#: name -> FunctionSpec, the functions the policy compiler (`expressions.COMPILER`) passes in.
POLICY_FUNCTION_SPECS: Mapping[str, FunctionSpec] = {
    spec.name: spec
    for spec in (
        _spec("regex_match", regex_match, ("boolean",), pattern_matcher=_regex_search),
        _spec("glob_match", glob_match, ("boolean",), pattern_matcher=_glob_matcher),
        _spec("lower", lower, ("string",), str_method="lower"),
        _spec("upper", upper, ("string",), str_method="upper"),
    )
}

#: name -> (signature, one-line doc, example), for generated documentation.
POLICY_FUNCTIONS: Mapping[str, tuple[str, str, str]] = {
    "regex_match": (
        "regex_match(string $pattern, string $subject) -> boolean",
        "True when the regular expression (RE2: linear time, no backreferences or "
        "lookaround) matches anywhere in the subject (anchor with ^ and $); an invalid "
        "pattern is an invalid-value error.",
        "regex_match('^release/', work_item.ref)",
    ),
    "glob_match": (
        "glob_match(string $pattern, string $subject) -> boolean",
        "True when the whole subject matches the shell-style pattern "
        "(fnmatch.fnmatchcase: *, ?, [seq], [!seq]; case-sensitive, * also matches /).",
        "glob_match('docs/*.md', path)",
    ),
    "lower": (
        "lower(string $subject) -> string",
        "The subject in lower case (str.lower).",
        "lower(work_item.title)",
    ),
    "upper": (
        "upper(string $subject) -> string",
        "The subject in upper case (str.upper).",
        "upper(work_item.kind)",
    ),
}
