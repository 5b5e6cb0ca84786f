"""The run-time helpers: the names generated code calls, with the reference's checks.

``HELPERS`` is the globals every generated function starts from: the semantics of
``semantics.py`` under short names (``_eq``, ``_getf`` ...) and one ``_f_<name>`` per built-in
function (type-checked exactly like ``jmespath.functions``: same errors, same messages); a
``Library`` adds one ``_pf_<name>`` per function of the caller's. Fast paths in the helpers skip
the generic type check when the argument plainly passes it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from the_loop.jmes.semantics import (
    all_num,
    all_str,
    check_type,
    contains,
    eq,
    flatten,
    ge,
    get_index,
    getf,
    gt,
    le,
    lt,
    merge,
    minmax_by,
    ne,
    object_values,
    sort_by,
    to_number,
)

__all__ = ["HELPERS"]


def _f_abs(x: Any) -> Any:
    if x.__class__ is not int and x.__class__ is not float:
        check_type(x, ("number",), "abs")
    return abs(x)


def _f_avg(x: Any) -> Any:
    if x.__class__ is not list or not all_num(x):
        check_type(x, ("array-number",), "avg")
    return sum(x) / len(x) if x else None


def _f_ceil(x: Any) -> Any:
    if x.__class__ is not int and x.__class__ is not float:
        check_type(x, ("number",), "ceil")
    return math.ceil(x)


def _f_floor(x: Any) -> Any:
    if x.__class__ is not int and x.__class__ is not float:
        check_type(x, ("number",), "floor")
    return math.floor(x)


def _f_contains(subject: Any, search: Any) -> bool:
    if subject.__class__ is not list and subject.__class__ is not str:
        check_type(subject, ("array", "string"), "contains")
    return contains(subject, search)


def _f_ends_with(subject: Any, suffix: Any) -> Any:
    if subject.__class__ is not str:
        check_type(subject, ("string",), "ends_with")
    if suffix.__class__ is not str:
        check_type(suffix, ("string",), "ends_with")
    return subject.endswith(suffix)


def _f_starts_with(subject: Any, prefix: Any) -> Any:
    if subject.__class__ is not str:
        check_type(subject, ("string",), "starts_with")
    if prefix.__class__ is not str:
        check_type(prefix, ("string",), "starts_with")
    return subject.startswith(prefix)


def _f_join(separator: Any, array: Any) -> Any:
    if separator.__class__ is not str:
        check_type(separator, ("string",), "join")
    if array.__class__ is not list or not all_str(array):
        check_type(array, ("array-string",), "join")
    return separator.join(array)


def _f_keys(x: Any) -> list[Any]:
    if x.__class__ is not dict:
        check_type(x, ("object",), "keys")
    return list(x.keys())


def _f_values(x: Any) -> list[Any]:
    if x.__class__ is not dict:
        check_type(x, ("object",), "values")
    return list(x.values())


def _f_length(x: Any) -> int:
    c = x.__class__
    if c is not str and c is not list and c is not dict:
        check_type(x, ("string", "array", "object"), "length")
    return len(x)


def _f_map(expref: Callable[[Any], Any], array: Any) -> list[Any]:
    if array.__class__ is not list:
        check_type(array, ("array",), "map")
    return [expref(element) for element in array]


def _f_max(x: Any) -> Any:
    if x.__class__ is not list or not (all_num(x) or all_str(x)):
        check_type(x, ("array-number", "array-string"), "max")
    return max(x) if x else None


def _f_min(x: Any) -> Any:
    if x.__class__ is not list or not (all_num(x) or all_str(x)):
        check_type(x, ("array-number", "array-string"), "min")
    return min(x) if x else None


def _f_max_by(array: Any, expref: Callable[[Any], Any]) -> Any:
    if array.__class__ is not list:
        check_type(array, ("array",), "max_by")
    return minmax_by("max_by", array, expref, maximum=True)


def _f_min_by(array: Any, expref: Callable[[Any], Any]) -> Any:
    if array.__class__ is not list:
        check_type(array, ("array",), "min_by")
    return minmax_by("min_by", array, expref, maximum=False)


def _f_merge(*arguments: Any) -> dict[Any, Any]:
    return merge(arguments)


def _f_reverse(x: Any) -> Any:
    if x.__class__ is not list and x.__class__ is not str:
        check_type(x, ("array", "string"), "reverse")
    if isinstance(x, str):
        return x[::-1]
    return list(reversed(x))


def _f_sort(x: Any) -> list[Any]:
    if x.__class__ is not list or not (all_str(x) or all_num(x)):
        check_type(x, ("array-string", "array-number"), "sort")
    return sorted(x)


def _f_sort_by(array: Any, expref: Callable[[Any], Any]) -> Any:
    if array.__class__ is not list:
        check_type(array, ("array",), "sort_by")
    return sort_by(array, expref)


def _f_sum(x: Any) -> Any:
    if x.__class__ is not list or not all_num(x):
        check_type(x, ("array-number",), "sum")
    return sum(x)


def _f_to_array(x: Any) -> list[Any]:
    return x if isinstance(x, list) else [x]


def _f_to_string(x: Any) -> str:
    if isinstance(x, str):
        return x
    return json.dumps(x, separators=(",", ":"), default=str)


def _f_type(x: Any) -> str | None:
    if isinstance(x, str):
        return "string"
    if isinstance(x, bool):
        return "boolean"
    if isinstance(x, list):
        return "array"
    if isinstance(x, dict):
        return "object"
    if isinstance(x, (float, int)):
        return "number"
    if x is None:
        return "null"
    return None


HELPERS: dict[str, Any] = {
    "_eq": eq,
    "_ne": ne,
    "_lt": lt,
    "_le": le,
    "_gt": gt,
    "_ge": ge,
    "_NUMS": (int, float),
    "_LEN_TYPES": (str, list, dict),
    "_STR_LIST": (str, list),
    "_getf": getf,
    "_index": get_index,
    "_values": object_values,
    "_flatten": flatten,
    "_to_number": to_number,
    "_f_to_number": to_number,
}
HELPERS.update({name: value for name, value in list(globals().items()) if name.startswith("_f_")})

