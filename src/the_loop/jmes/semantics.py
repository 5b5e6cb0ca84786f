"""JMESPath's value semantics (equality, ordering, truth, type checks), shared by every evaluator.

The generated code calls these (through the names in ``runtime.RUNTIME``), the codegen folds
literals with them, and the corrected reference interpreter (``reference.py``) compares with
them, so all three agree by construction. Where the ``jmespath`` package (1.1.0) disagrees with
the JMESPath specification these follow the specification (``docs/jmespath-divergences.md``).
Inputs are JSON-like: ``dict``, ``list``, ``str``, ``int``, ``float``, ``bool`` and ``None``.
"""

from __future__ import annotations

import functools
import operator
import re
from collections.abc import Callable
from numbers import Number
from typing import Any

from jmespath import exceptions
from jmespath.functions import REVERSE_TYPES_MAP, TYPES_MAP


def is_num(x: Any) -> bool:
    return not isinstance(x, bool) and isinstance(x, Number)


def eq(x: Any, y: Any) -> bool:
    """JMESPath equality: deep, and a boolean never equals a number (at any depth)."""
    cx = x.__class__
    cy = y.__class__
    if cx is str or cy is str:
        return bool(x == y)
    if cx is bool or cy is bool:
        return x is y
    if isinstance(x, list):
        if not isinstance(y, list) or len(x) != len(y):
            return False
        return all(eq(a, b) for a, b in zip(x, y, strict=True))
    if isinstance(x, dict):
        if not isinstance(y, dict) or len(x) != len(y):
            return False
        return all(key in y and eq(value, y[key]) for key, value in x.items())
    if isinstance(y, (list, dict)):
        return False
    return bool(x == y)


def ne(x: Any, y: Any) -> bool:
    return not eq(x, y)


def lt(x: Any, y: Any) -> bool | None:
    return bool(x < y) if is_num(x) and is_num(y) else None


def le(x: Any, y: Any) -> bool | None:
    return bool(x <= y) if is_num(x) and is_num(y) else None


def gt(x: Any, y: Any) -> bool | None:
    return bool(x > y) if is_num(x) and is_num(y) else None


def ge(x: Any, y: Any) -> bool | None:
    return bool(x >= y) if is_num(x) and is_num(y) else None


ORDERING: dict[str, Callable[[Any, Any], bool | None]] = {
    "lt": lt,
    "lte": le,
    "gt": gt,
    "gte": ge,
}
ORDERING_PY = {"lt": "<", "lte": "<=", "gt": ">", "gte": ">="}
ORDERING_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "lt": operator.lt,
    "lte": operator.le,
    "gt": operator.gt,
    "gte": operator.ge,
}


def truthy(x: Any) -> bool:
    """JMESPath truth: false, null, '', [] and {} are false; everything else (even 0) is true."""
    return not (x is None or x is False or x == "" or x == [] or x == {})


def type_of(x: Any) -> str:
    return TYPES_MAP.get(type(x).__name__, "unknown")


@functools.cache
def _allowed_types(types: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...]]:
    allowed: list[str] = []
    subtypes: list[tuple[str, ...]] = []
    for declared in types:
        parts = declared.split("-", 1)
        if len(parts) == 2:
            subtypes.append(REVERSE_TYPES_MAP[parts[1]])
        allowed.extend(REVERSE_TYPES_MAP[parts[0]])
    return tuple(allowed), tuple(subtypes)


def check_type(current: Any, types: tuple[str, ...], function_name: str) -> None:
    """Exactly ``jmespath.functions.Functions._type_check_single`` (same errors, same messages)."""
    allowed, subtypes = _allowed_types(types)
    typename = type(current).__name__
    if typename not in allowed:
        raise exceptions.JMESPathTypeError(
            function_name, current, TYPES_MAP.get(typename, "unknown"), list(types)
        )
    if not subtypes:
        return
    if len(subtypes) == 1:
        only = subtypes[0]
        for element in current:
            name = type(element).__name__
            if name not in only:
                raise exceptions.JMESPathTypeError(function_name, element, name, list(types))
    elif current:
        first = type(current[0]).__name__
        for candidates in subtypes:
            if first in candidates:
                chosen = candidates
                break
        else:
            raise exceptions.JMESPathTypeError(function_name, current[0], first, list(types))
        for element in current:
            name = type(element).__name__
            if name not in chosen:
                raise exceptions.JMESPathTypeError(function_name, element, name, list(types))


def all_num(values: list[Any]) -> bool:
    for v in values:
        c = v.__class__
        if c is not int and c is not float:
            return False
    return True


def all_str(values: list[Any]) -> bool:
    for v in values:  # noqa: SIM110 - a plain loop is twice as fast as all() on a generator
        if v.__class__ is not str:
            return False
    return True


_NO_GET = (type(None), str, list, int, float, bool)


def getf(value: Any, key: str) -> Any:
    if value.__class__ in _NO_GET:  # the reference's AttributeError, without raising one
        return None
    try:
        return value.get(key)
    except AttributeError:
        return None


def get_index(value: Any, index: int) -> Any:
    if not isinstance(value, list):
        return None
    try:
        return value[index]
    except IndexError:
        return None


def object_values(value: Any) -> Any:
    try:
        return value.values()
    except AttributeError:
        return None


def flatten(value: Any) -> list[Any] | None:
    if not isinstance(value, list):
        return None
    merged: list[Any] = []
    for element in value:
        if isinstance(element, list):
            merged.extend(element)
        else:
            merged.append(element)
    return merged


def contains(subject: Any, search: Any) -> bool:
    if isinstance(subject, str):
        return isinstance(search, str) and search in subject
    if search is None or search.__class__ is str:
        return search in subject
    return any(eq(element, search) for element in subject)


_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")


def to_number(arg: Any) -> Any:
    if isinstance(arg, (list, dict, bool)) or arg is None:
        return None
    if isinstance(arg, (int, float)):
        return arg
    if isinstance(arg, str):
        match = _JSON_NUMBER.fullmatch(arg)
        if match is None:
            return None
        if match.group(1) is None and match.group(2) is None:
            return int(arg)
        return float(arg)
    try:  # not JSON: whatever the reference does
        return int(arg)
    except ValueError:
        try:
            return float(arg)
        except ValueError:
            return None


def minmax_by(name: str, array: list[Any], key: Callable[[Any], Any], maximum: bool) -> Any:
    best: Any = None
    best_key: Any = None
    first_type = ""
    for position, element in enumerate(array):
        k = key(element)
        jtype = type_of(k)
        if jtype != "number" and jtype != "string":
            raise exceptions.JMESPathTypeError(name, k, jtype, ["number", "string"])
        if position == 0:
            first_type, best, best_key = jtype, element, k
        elif jtype != first_type:
            raise exceptions.JMESPathTypeError(name, k, jtype, [first_type])
        elif (k > best_key) if maximum else (k < best_key):
            best, best_key = element, k
    return best


def sort_by(array: list[Any], key: Callable[[Any], Any]) -> list[Any]:
    if not array:
        return array
    required = type_of(key(array[0]))
    if required not in ("number", "string"):
        raise exceptions.JMESPathTypeError("sort_by", array[0], required, ["string", "number"])

    def keyfunc(element: Any) -> Any:
        k = key(element)
        jtype = type_of(k)
        if jtype != required:
            raise exceptions.JMESPathTypeError("sort_by", k, jtype, [required])
        return k

    return sorted(array, key=keyfunc)


def merge(arguments: tuple[Any, ...]) -> dict[Any, Any]:
    merged: dict[Any, Any] = {}
    for argument in arguments:
        check_type(argument, ("object",), "merge")
        merged.update(argument)
    return merged

