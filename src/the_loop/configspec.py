"""Describe a config section once, as data: its checks, its messages and its JSON Schema.

A section is a tree of specs (`Str`, `Bool`, `Number`, `Enum`, `ListOf`, `DictOf`, `Mapping`,
`Tagged`, `KindOf`). `spec.check(raw)` returns the checked value or raises `Invalid` with the
path to the bad value and one sentence: expected vs got, the allowed values, a did-you-mean.
`Mapping.collect` gathers every problem of one mapping instead of stopping at the first.
`spec.json_schema()` describes the same tree as draft 2020-12 JSON Schema, so an editor checks
what the loader checks. Checks that are not about shape (a URL that may carry a token, names
that must be unique, a graph's reachability) are named functions a spec runs after its own
check (`then=`): each takes the checked value and a context, and raises `Problem`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from the_loop.errors import clip, quote
from the_loop.util import closest

Path = tuple[str | int, ...]
#: A named post-check: (checked value, context) → the value to keep; raises `Problem`.
Check = Callable[[Any, Any], Any]

NAME_PATTERN = "^[a-z][a-z0-9-]*$"
ENV_PATTERN = "^[A-Za-z_][A-Za-z0-9_]*$"
IDENTIFIER_PATTERN = "^[A-Za-z_][A-Za-z0-9_]*$"
NON_EMPTY_PATTERN = "\\S"


class Problem(Exception):
    """Raised by a named check: what is wrong, and where below the checked value."""

    def __init__(self, message: str, *below: str | int) -> None:
        super().__init__(message)
        self.message = message
        self.below: Path = tuple(below)


class Invalid(Exception):
    """A value does not fit its description: `path` from the section's root, and why."""

    def __init__(self, path: Path, message: str) -> None:
        super().__init__(message)
        self.path = path
        self.message = message

    @property
    def where(self) -> str:
        return dotted(self.path)


def got(value: object) -> str:
    """How a message shows a wrong value: bounded, with its type."""
    return f"{quote(value)} ({type(value).__name__})"


def dotted(path: Path) -> str:
    """`harnesses[0].env` for ("harnesses", 0, "env")."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def matches(pattern: str, value: str) -> bool:
    """JSON Schema `pattern` semantics, except that `$` never accepts a trailing newline."""
    if pattern.startswith("^") and pattern.endswith("$") and not pattern.endswith("\\$"):
        return re.fullmatch(pattern[1:-1], value) is not None
    return re.search(pattern, value) is not None


def did_you_mean(name: object, valid: Sequence[str]) -> str:
    """` (did you mean 'x'?)` when a close valid name exists, else ``."""
    hint = closest(str(name), list(valid))
    return f" (did you mean {hint!r}?)" if hint else ""


class Spec:
    """One value's description: what it must be (`expected`), and what runs after the shape.

    Specs are plain classes with keyword-only constructors, built once at import and never
    changed (not dataclasses: a command reads the config spec at every start, and the
    dataclass decorator costs about a millisecond per class: issue 34).
    """

    def __init__(
        self,
        *,
        expected: str = "",
        hint: str = "",  # appended after `got …`: the fix
        description: str = "",  # for the JSON Schema
        shown: Callable[[Any], str] = got,  # how a wrong value is shown (secrets are not)
        then: tuple[Check, ...] = (),
        #: JSON Schema keywords for what a named post-check enforces (a schema cannot call it)
        schema: dict[str, Any] | None = None,
    ) -> None:
        self.expected = expected
        self.hint = hint
        self.description = description
        self.shown = shown
        self.then = then
        self.schema: dict[str, Any] = {} if schema is None else schema

    def replace(self, **changes: Any) -> Spec:
        """A copy of this spec with `changes` (as `dataclasses.replace` would make)."""
        unknown = [k for k in changes if k not in self.__dict__]
        if unknown:
            raise TypeError(f"{type(self).__name__} has no {', '.join(unknown)}")
        copy = object.__new__(type(self))
        copy.__dict__.update(self.__dict__, **changes)
        return copy

    def check(self, value: Any, path: Path = (), ctx: Any = None) -> Any:
        return self.run_then(self._check(value, path, ctx), path, ctx)

    def run_then(self, value: Any, path: Path, ctx: Any) -> Any:
        """The named post-checks, in order, each on what the previous one returned."""
        for fn in self.then:
            try:
                value = fn(value, ctx)
            except Problem as p:
                raise Invalid(path + p.below, p.message) from None
        return value

    def then_collecting(
        self, value: Any, path: Path, ctx: Any, problems: list[Invalid]
    ) -> Any:
        """`run_then`, its failure added to `problems` (for a collecting check) instead of
        raised."""
        try:
            return self.run_then(value, path, ctx)
        except Invalid as exc:
            problems.append(exc)
            return value

    def _check(self, value: Any, path: Path, ctx: Any) -> Any:
        return value

    def fail(self, value: Any, path: Path) -> Invalid:
        return Invalid(path, f"expected {self.expected}, got {self.shown(value)}{self.hint}")

    def json_schema(self) -> dict[str, Any]:
        schema = self._schema() | self.schema
        if self.description:
            schema["description"] = self.description
        return schema

    def _schema(self) -> dict[str, Any]:
        return {}


class Any_(Spec):
    """Anything YAML can hold (constructor arguments, for instance)."""


class Str(Spec):
    """A string, optionally matching `pattern` (a JSON Schema regex, checked the same way)."""

    def __init__(
        self,
        *,
        expected: str = "a string",
        pattern: str | None = None,
        #: the message for a string that misses the pattern, when it is not `expected vs got`
        mismatch: Callable[[str], str] | None = None,
        **common: Any,
    ) -> None:
        super().__init__(expected=expected, **common)
        self.pattern = pattern
        self.mismatch = mismatch

    def _check(self, value: Any, path: Path, ctx: Any) -> Any:
        if not isinstance(value, str):
            raise self.fail(value, path)
        if self.pattern is not None and not matches(self.pattern, value):
            if self.mismatch is not None:
                raise Invalid(path, self.mismatch(value))
            raise self.fail(value, path)
        return value

    def _schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "string"}
        if self.pattern is not None:
            out["pattern"] = self.pattern
        return out


class Bool(Spec):
    def __init__(self, *, expected: str = "true or false", **common: Any) -> None:
        super().__init__(expected=expected, **common)

    def _check(self, value: Any, path: Path, ctx: Any) -> Any:
        if type(value) is not bool:
            raise self.fail(value, path)
        return value

    def _schema(self) -> dict[str, Any]:
        return {"type": "boolean"}


class Number(Spec):
    """An int or float (never a bool) with `above` < value ≤ `maximum`; returned as float."""

    def __init__(self, *, above: float | None = None, maximum: float | None = None,
                 **common: Any) -> None:
        super().__init__(**common)
        self.above = above
        self.maximum = maximum

    def _check(self, value: Any, path: Path, ctx: Any) -> Any:
        if type(value) not in (int, float) or (
            self.above is not None and not value > self.above
        ) or (self.maximum is not None and not value <= self.maximum):
            raise self.fail(value, path)
        return float(value)

    def _schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "number"}
        if self.above is not None:
            out["exclusiveMinimum"] = self.above
        if self.maximum is not None:
            out["maximum"] = self.maximum
        return out


class Enum(Spec):
    """One of `values`; a near miss gets a did-you-mean."""

    def __init__(
        self,
        *,
        values: tuple[str, ...],
        #: the whole message for a value not in `values`, when it is not `expected vs got`
        message: Callable[[Any], str] | None = None,
        **common: Any,
    ) -> None:
        super().__init__(**common)
        self.values = values
        self.message = message

    def _check(self, value: Any, path: Path, ctx: Any) -> Any:
        if isinstance(value, str) and value in self.values:
            return value
        if self.message is not None:
            raise Invalid(path, self.message(value))
        expected = self.expected or " or ".join(self.values)
        hint = did_you_mean(value, self.values) if isinstance(value, str) else ""
        raise Invalid(path, f"expected {expected}, got {self.shown(value)}{hint}{self.hint}")

    def _schema(self) -> dict[str, Any]:
        return {"enum": list(self.values)}


class ListOf(Spec):
    """A list of `item`s. `single`: a lone string stands for a list of one; `split`: a string
    is split on white space; `indexed`: an item's errors name its index (else the list's path).
    `unique`: an item listed twice is an error; `nullable`: an empty YAML value is [].
    """

    def __init__(self, *, item: Spec, min_items: int = 0, single: bool = False,
                 split: bool = False, unique: bool = False, indexed: bool = True,
                 nullable: bool = False, **common: Any) -> None:
        super().__init__(**common)
        self.item = item
        self.min_items = min_items
        self.single = single
        self.split = split
        self.unique = unique
        self.indexed = indexed
        self.nullable = nullable

    def _check(self, value: Any, path: Path, ctx: Any) -> Any:
        if value is None and self.nullable:
            return []
        items = value
        if isinstance(value, str) and (self.single or self.split):
            items = value.split() if self.split else [value]
        if not isinstance(items, list) or len(items) < self.min_items:
            raise self.fail(value, path)
        out: list[Any] = []
        for i, raw in enumerate(items):
            checked = self.item.check(raw, (*path, i) if self.indexed else path, ctx)
            if self.unique and checked in out:
                raise Invalid(path, f"{quote(checked)} is listed twice")
            out.append(checked)
        return out

    def _schema(self) -> dict[str, Any]:
        array: dict[str, Any] = {"type": "array", "items": self.item.json_schema()}
        if self.min_items:
            array["minItems"] = self.min_items
        if self.unique:
            array["uniqueItems"] = True
        if self.nullable:
            array["type"] = ["array", "null"]
        if self.single or self.split:
            return {"oneOf": [self.item.json_schema() if self.single else {"type": "string"},
                              array]}
        return array


class DictOf(Spec):
    """A mapping of `key` to `value`, free-form keys; `nullable`: an empty YAML value is {}.

    A key's error is the key spec's message at this mapping's path; a value's error is
    prefixed with its key (`X-Team: expected …`).
    """

    def __init__(self, *, key: Str, value: Spec, nullable: bool = False,
                 **common: Any) -> None:
        super().__init__(**common)
        self.key = key
        self.value = value
        self.nullable = nullable

    def _check(self, value: Any, path: Path, ctx: Any) -> Any:
        if value is None and self.nullable:
            return {}
        if not isinstance(value, dict):
            raise self.fail(value, path)
        out: dict[str, Any] = {}
        for k, v in value.items():
            out[self.key.check(k, path, ctx)] = self._value(k, v, path, ctx)
        return out

    def _value(self, key: str, value: Any, path: Path, ctx: Any) -> Any:
        try:
            return self.value.check(value, (), ctx)
        except Invalid as exc:
            where = dotted((key, *exc.path))
            raise Invalid(path, f"{where}: {exc.message}") from None

    def _schema(self) -> dict[str, Any]:
        key = self.key.json_schema()
        key.pop("type", None)
        out: dict[str, Any] = {"type": ["object", "null"] if self.nullable else "object",
                               "additionalProperties": self.value.json_schema()}
        if key:
            out["propertyNames"] = key
        return out


MISSING: Any = object()


class Field:
    """A key of a mapping: its spec, and either why it is required (`required`: the reason,
    said after `missing; `) or its `default` (a value, or a zero-argument callable for a
    fresh one). `nullable`: an empty YAML value (None) counts as absent."""

    __slots__ = ("default", "nullable", "required", "spec")

    def __init__(self, spec: Spec, required: str = "", default: Any = MISSING,
                 nullable: bool = False) -> None:
        self.spec = spec
        self.required = required
        self.default = default
        self.nullable = nullable

    def default_value(self) -> Any:
        return self.default() if callable(self.default) else self.default


class Mapping(Spec):
    """A mapping with known keys; an unknown key gets a did-you-mean and the allowed keys.

    `extra`: keys that belong to other sections and are left alone; `unknown_hint`: said
    after the allowed keys, when a key is unknown.
    """

    def __init__(self, *, fields: dict[str, Field], extra: bool = False,
                 unknown_hint: str = "", **common: Any) -> None:
        super().__init__(**common)
        self.fields = fields
        self.extra = extra
        self.unknown_hint = unknown_hint

    def collect(
        self, value: Any, path: Path = (), ctx: Any = None, *, then: bool = True
    ) -> tuple[dict[str, Any], list[Invalid]]:
        """Every problem of this mapping (unknown keys, then each field in order)."""
        if not isinstance(value, dict):
            return {}, [self.fail(value, path)]
        problems = [] if self.extra else self.unknown_keys(value, path, self.allowed(),
                                                           self.unknown_hint)
        out: dict[str, Any] = {}
        for name, fld in self.fields.items():
            try:
                if name in value and not (fld.nullable and value[name] is None):
                    out[name] = fld.spec.check(value[name], (*path, name), ctx)
                elif fld.required:
                    problems.append(Invalid((*path, name), f"missing; {fld.required}"))
                elif fld.default is not MISSING:
                    out[name] = fld.default_value()
            except Invalid as exc:
                problems.append(exc)
        if then and not problems:
            out = self.then_collecting(out, path, ctx, problems)
        return out, problems

    def check(self, value: Any, path: Path = (), ctx: Any = None) -> Any:
        checked, problems = self.collect(value, path, ctx)
        if problems:
            raise problems[0]
        return checked

    def allowed(self) -> tuple[str, ...]:
        return tuple(self.fields)

    @staticmethod
    def unknown_keys(value: dict[Any, Any], path: Path, allowed: Sequence[str],
                     hint: str = "") -> list[Invalid]:
        return [
            Invalid((*path, clip(str(key))), "unknown key" + did_you_mean(key, allowed)
                    + f". Allowed keys: {', '.join(allowed)}{hint}")
            for key in value if key not in allowed
        ]

    def _schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": "object", "properties": _properties(self.fields)}
        required = [k for k, f in self.fields.items() if f.required]
        if required:
            out["required"] = required
        if not self.extra:
            out["additionalProperties"] = False
        return out


def _properties(fields: dict[str, Field]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, fld in fields.items():
        schema = fld.spec.json_schema()
        if fld.default is not MISSING and not callable(fld.default):
            schema["default"] = fld.default
        out[name] = schema
    return out


class Tagged(Mapping):
    """A mapping with exactly one of the `tags` keys, which decides the other keys allowed.

    `fields` holds the keys every variant has; `variants` each tag's own keys (the tag first).
    The result carries the chosen tag under `kind`.
    """

    def __init__(self, *, variants: dict[str, dict[str, Field]], noun: str = "entry",
                 **mapping: Any) -> None:
        super().__init__(**mapping)
        self.variants = variants
        self.noun = noun

    def allowed(self) -> tuple[str, ...]:
        keys = list(self.fields) + list(self.variants)
        for own in self.variants.values():
            keys += [k for k in own if k not in keys]
        return tuple(keys)

    def collect(
        self, value: Any, path: Path = (), ctx: Any = None, *, then: bool = True
    ) -> tuple[dict[str, Any], list[Invalid]]:
        if not isinstance(value, dict):
            return {}, [self.fail(value, path)]
        problems = self.unknown_keys(value, path, self.allowed())
        if problems:
            return {}, problems
        tags = [t for t in self.variants if t in value]
        if len(tags) != 1:
            at = (*path, "/".join(self.variants))
            said = "none" if not tags else " and ".join(tags)
            return {}, [Invalid(at, f"expected exactly one of {', '.join(self.variants)}; "
                                    f"got {said}")]
        tag = tags[0]
        own = self.variants[tag]
        for key in value:
            if key not in self.fields and key not in own and key not in self.variants:
                own_keys = ", ".join(k for k in own if k != tag) or "none"
                common = f" besides {', '.join(self.fields)}" if self.fields else ""
                return {}, [Invalid((*path, str(key)), (
                    f"not allowed on a {tag} {self.noun} (keys for a {tag} {self.noun}{common}: "
                    f"{own_keys})"))]
        out, problems = Mapping(fields={**self.fields, **own}).collect(value, path, ctx)
        out["kind"] = tag
        if then and not problems:
            out = self.then_collecting(out, path, ctx, problems)
        return out, problems

    def _schema(self) -> dict[str, Any]:
        return {"oneOf": [
            Mapping(fields={**self.fields, **own})._schema() | {"required": [
                *[k for k, f in self.fields.items() if f.required], tag]}
            for tag, own in self.variants.items()
        ]}


class KindOf(Spec):
    """A mapping whose `kind:` value picks the description of the rest."""

    def __init__(self, *, variants: dict[str, Mapping], key: str = "kind",
                 **common: Any) -> None:
        super().__init__(**common)
        self.variants = variants
        self.key = key

    def _check(self, value: Any, path: Path, ctx: Any) -> Any:
        if not isinstance(value, dict) or value.get(self.key) not in self.variants:
            raise self.fail(value, path)
        return self.variants[value[self.key]].check(value, path, ctx)

    def _schema(self) -> dict[str, Any]:
        return {"oneOf": [v.json_schema() for v in self.variants.values()]}


#: A name an operator gives a thing (a hook, a rule, a harness): one spelling everywhere.
NAME = Str(pattern=NAME_PATTERN, expected=(
    f"a name matching {NAME_PATTERN} (lower-case letters, digits and dashes, starting with a "
    "letter)"))


def const(value: str) -> Enum:
    """A key whose only allowed value is `value` (a `KindOf` variant's tag)."""
    return Enum(values=(value,))


__all__ = [
    "ENV_PATTERN", "IDENTIFIER_PATTERN", "MISSING", "NAME", "NAME_PATTERN", "NON_EMPTY_PATTERN",
    "Any_", "Bool", "Check", "DictOf", "Enum", "Field", "Invalid", "KindOf", "ListOf",
    "Mapping", "Number", "Path", "Problem", "Spec", "Str", "Tagged", "const", "did_you_mean",
    "dotted", "got", "matches",
]
