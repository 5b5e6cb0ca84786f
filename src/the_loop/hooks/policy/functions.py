"""The policy engine's own JMESPath functions: one record each, every other form derived from it.

A :class:`PolicyFunction` record says all there is to say about one function: its name, its
parameters (a name and the JMESPath types each accepts), the types it returns, its handler
(the plain implementation), a description and an example for the guide, and the facts that
let the compiler inline a call. ``POLICY_FUNCTION_RECORDS`` lists them; a record missing any
of these fails at import, naming what is missing. From the records come:

* :data:`PolicyFunctions`: a :class:`jmespath.functions.Functions` subclass for the reference
  interpreter, its ``@signature`` methods generated from the parameters:
  ``jmespath.search(expr, data, Options(custom_functions=PolicyFunctions()))``;
* :data:`POLICY_FUNCTION_SPECS`: the compiler's and the type checker's view (``FunctionSpec``:
  arity, argument and return types, the handler). The compiler (:mod:`the_loop.jmes`)
  knows no policy function: they are passed in, see ``expressions.COMPILER``;
* :data:`POLICY_FUNCTIONS`: name -> (signature text, description, example), for documentation:
  ``scripts/gen_docs.py`` writes the function table of ``docs/policy-guide.md`` from it. The
  signature text (``lower(string $subject) -> string``) is generated, never typed.

Both evaluators check arity and argument types the same way (``ArityError`` /
``JMESPathTypeError``, exactly as for the built-in functions), from the same parameters.
``regex_match`` runs on RE2 (the ``google-re2`` package), whose matching time is linear in the
subject whatever the pattern: ``^([A-Za-z0-9]+ ?)+$`` cannot stall the loop on a hostile
comment, which Python's backtracking ``re`` would (issue 11 rule 6). An invalid or unsupported
pattern raises :class:`InvalidValueError` (a ``JMESPathError``, hence a ``ValueError``), and a
literal one is a load error (``policy.expressions``).
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import re2
from jmespath.exceptions import JMESPathError
from jmespath.functions import REVERSE_TYPES_MAP, Functions, signature

from the_loop.errors import quote
from the_loop.hooks.policy.globs import to_re2
from the_loop.jmes import FunctionSpec

__all__ = [
    "MAX_GLOB",
    "POLICY_FUNCTIONS",
    "POLICY_FUNCTION_RECORDS",
    "POLICY_FUNCTION_SPECS",
    "InvalidValueError",
    "Param",
    "PolicyFunction",
    "PolicyFunctions",
    "glob",
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


#: The longest `glob_match` pattern: a longer one is a fact given as the pattern.
MAX_GLOB = 10_000


@functools.lru_cache(maxsize=256)
def glob(pattern: str) -> Any:
    """`pattern` (fnmatch's syntax) compiled by RE2 (cached); raises InvalidValueError for a
    pattern over `MAX_GLOB` characters or past RE2's memory budget (issue 20, item 7)."""
    if len(pattern) > MAX_GLOB:
        raise InvalidValueError(
            f"In function glob_match(), a pattern of {len(pattern):,} characters; at most "
            f"{MAX_GLOB:,} (the pattern comes first: glob_match(pattern, subject))")
    try:
        return re2.compile(to_re2(pattern), _RE2_OPTIONS)
    except re2.error as exc:
        why = exc.args[0] if exc.args else b""
        text = why.decode("utf-8", "replace") if isinstance(why, bytes) else str(why)
        raise InvalidValueError(
            f"In function glob_match(), pattern {quote(pattern)} cannot be matched: {text}"
        ) from None


#: The most pattern characters times subject characters a `glob_match` with a `*` may take
#: when its pattern is not a literal: RE2's DFA gives up on a long starry pattern within its
#: memory budget, and its NFA then visits every pattern position for every subject character
#: (`*a` 4,999 times against 65,536 characters: 17 s). About half a second at most.
MAX_GLOB_WORK = 20_000_000


def glob_match(pattern: str, subject: str) -> bool:
    """``fnmatch.fnmatchcase(subject, pattern)``, on RE2 (linear in the subject)."""
    if "*" in pattern and len(pattern) * len(subject) > MAX_GLOB_WORK:
        raise InvalidValueError(
            f"In function glob_match(), a pattern of {len(pattern):,} characters with a '*' "
            f"against a subject of {len(subject):,}: at most {MAX_GLOB_WORK:,} pattern "
            "characters times subject characters")
    return glob(pattern).fullmatch(subject) is not None


def lower(subject: str) -> str:
    """``subject.lower()``."""
    return subject.lower()


def upper(subject: str) -> str:
    """``subject.upper()``."""
    return subject.upper()


def _regex_search(pattern: str) -> Callable[[str], Any] | None:
    """`regex_match`'s pattern, compiled once: its search (None for a pattern RE2 refuses)."""
    try:
        search: Callable[[str], Any] = regex(pattern).search
    except InvalidValueError:
        return None
    return search


def _glob_matcher(pattern: str) -> Callable[[str], Any] | None:
    """`glob_match`'s pattern, compiled once: its fullmatch (None for one RE2 refuses)."""
    try:
        fullmatch: Callable[[str], Any] = glob(pattern).fullmatch
    except InvalidValueError:
        return None
    return fullmatch


#: The type names a parameter or a result may have (JMESPath's, as in a ``@signature``).
TYPE_NAMES = frozenset(REVERSE_TYPES_MAP) | {"array-string", "array-number"}
_NAME = re.compile(r"^[a-z_][a-z0-9_]*$")


@dataclass(frozen=True)
class Param:
    """One parameter: its name (shown as ``$name``) and the JMESPath types it accepts."""

    name: str
    types: tuple[str, ...]


@dataclass(frozen=True)
class PolicyFunction:
    """Everything about one policy function; construction fails naming what is missing.

    ``params`` take exactly that many arguments. ``description`` and ``example`` are the
    guide's (Markdown; the example must call the function and load at some point).
    ``str_method`` / ``pattern_matcher`` let the compiler inline a call (``FunctionSpec``).
    """

    name: str
    params: tuple[Param, ...]
    returns: tuple[str, ...]
    handler: Callable[..., Any]
    description: str
    example: str
    str_method: str | None = None
    pattern_matcher: Callable[[str], Callable[[str], Any] | None] | None = None

    def __post_init__(self) -> None:
        missing = incomplete(self)
        if missing:
            raise ValueError(f"policy function {self.name or '?'}: {'; '.join(missing)}")

    @property
    def signature(self) -> str:
        """``name(string $pattern, string $subject) -> boolean``, JMESPath's notation."""
        params = ", ".join(f"{'|'.join(p.types)} ${p.name}" for p in self.params)
        return f"{self.name}({params}) -> {'|'.join(self.returns)}"

    def spec(self) -> FunctionSpec:
        """The compiler's view (it also feeds the type checker)."""
        return FunctionSpec(
            name=self.name,
            arg_types=tuple(p.types for p in self.params),
            variadic=False,
            returns=self.returns,
            impl=self.handler,
            str_method=self.str_method,
            pattern_matcher=self.pattern_matcher,
        )


def incomplete(record: PolicyFunction) -> list[str]:
    """What `record` lacks or gets wrong, one phrase each (empty when it is complete)."""
    out: list[str] = []
    if not _NAME.match(record.name):
        out.append(f"name {record.name!r} is not a lower-case identifier")
    for i, p in enumerate(record.params):
        if not _NAME.match(p.name):
            out.append(f"parameter {i + 1} has no name (got {p.name!r})")
        if not p.types or not set(p.types) <= TYPE_NAMES:
            out.append(f"parameter {p.name or i + 1} needs JMESPath types (got {p.types!r})")
    if not record.returns or not set(record.returns) <= TYPE_NAMES:
        out.append(f"returns needs JMESPath types (got {record.returns!r})")
    if not record.description.strip():
        out.append("description is missing")
    if f"{record.name}(" not in record.example:
        out.append(f"example {record.example!r} does not call {record.name}()")
    try:
        arity = len(inspect.signature(record.handler).parameters)
    except (TypeError, ValueError):
        arity = -1
    if arity != len(record.params):
        out.append(f"handler takes {arity} argument(s), the record declares {len(record.params)}")
    return out


_STRING = ("string",)


def _subject(name: str) -> tuple[Param, ...]:
    return (Param(name, _STRING),)


def _pattern_subject() -> tuple[Param, ...]:
    return (Param("pattern", _STRING), Param("subject", _STRING))


#: Every policy function, in the guide's order.
POLICY_FUNCTION_RECORDS: tuple[PolicyFunction, ...] = (
    PolicyFunction(
        name="regex_match", params=_pattern_subject(), returns=("boolean",),
        handler=regex_match, pattern_matcher=_regex_search,
        description=(
            "true when the regular expression matches anywhere in the subject (anchor with "
            "`^` and `$`). Patterns run on RE2: Python's syntax without backreferences and "
            "lookaround, in time linear in the subject whatever the pattern. A literal "
            "pattern RE2 refuses is a load error; one read from a fact is a run-time error."
        ),
        example="regex_match('^release/', node)",
    ),
    PolicyFunction(
        name="glob_match", params=_pattern_subject(), returns=("boolean",),
        handler=glob_match, pattern_matcher=_glob_matcher,
        description=(
            "true when the whole subject matches the shell-style pattern (`*`, `?`, `[seq]`, "
            "`[!seq]`; case-sensitive, `*` also matches `/`). Patterns run on RE2, in time "
            "linear in the subject; one over 10,000 characters is refused (a literal one at "
            "load, one read from a fact at run time), and so is one read from a fact that "
            "holds a `*` when its length times the subject's is over 20,000,000."
        ),
        example="glob_match('acme/*', work_item.repository)",
    ),
    PolicyFunction(
        name="lower", params=_subject("subject"), returns=_STRING, handler=lower,
        str_method="lower", description="the subject in lower case.",
        example="lower(actor) == 'alice'",
    ),
    PolicyFunction(
        name="upper", params=_subject("subject"), returns=_STRING, handler=upper,
        str_method="upper", description="the subject in upper case.",
        example="upper(work_item.kind)",
    ),
)


_twice = sorted({r.name for r in POLICY_FUNCTION_RECORDS
                 if [x.name for x in POLICY_FUNCTION_RECORDS].count(r.name) > 1})
if _twice:  # pragma: no cover - a mistake in the list above, caught at import
    raise ValueError(f"policy functions recorded twice: {', '.join(_twice)}")


def _reference_method(record: PolicyFunction) -> Callable[..., Any]:
    """`record` as a ``Functions`` method: jmespath checks its ``@signature``, then the handler."""
    handler = record.handler
    declared: list[Any] = [{"types": list(p.types)} for p in record.params]

    @signature(*declared)
    def method(self: Any, *args: Any) -> Any:
        return handler(*args)

    method.__name__ = f"_func_{record.name}"
    return method


#: The built-in JMESPath functions plus the policy functions, for the reference interpreter.
PolicyFunctions: type[Functions] = type(
    "PolicyFunctions",
    (Functions,),
    {
        "__doc__": "The built-in JMESPath functions plus the policy functions (generated).",
        "__module__": __name__,
        **{f"_func_{r.name}": _reference_method(r) for r in POLICY_FUNCTION_RECORDS},
    },
)

#: name -> FunctionSpec, the functions the policy compiler (`expressions.COMPILER`) passes in.
POLICY_FUNCTION_SPECS: Mapping[str, FunctionSpec] = {
    r.name: r.spec() for r in POLICY_FUNCTION_RECORDS
}

#: name -> (signature, description, example), for generated documentation.
POLICY_FUNCTIONS: Mapping[str, tuple[str, str, str]] = {
    r.name: (r.signature, r.description, r.example) for r in POLICY_FUNCTION_RECORDS
}
