"""The type lattice: a *kind* is the set of JMESPath types a value may have at run time.

``kinds(STR, NULL)`` is "a string or null"; ``ANY`` is every type, and a smaller kind is more
knowledge (``<=`` is "at least as precise"). The emitter specialises when a kind proves the
outcome (``len(x)`` for a value known to be a string). ``kind_of`` is a literal's kind,
``DECLARED`` the kind each ``field_types`` promise gives a root field (``FIELD_TYPES`` lists
them), and ``RETURNS`` each built-in function's result kind.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ANY", "ARR", "BOOL", "DECLARED", "EXPREF", "FIELD_TYPES", "K_ARR", "K_BOOL_NULL", "K_NULL",
    "K_NUM", "K_OBJ", "K_SIZED", "K_STR", "K_STR_ARR", "K_STR_NULL", "NULL", "NUM", "OBJ",
    "RETURNS", "STR", "Kind", "kind_of", "kinds",
]

#: The field types ``compile_expression(field_types=...)`` understands.
FIELD_TYPES = frozenset({"str", "bool", "int", "list[str]", "object"})


NULL, BOOL, NUM, STR, ARR, OBJ = "null", "boolean", "number", "string", "array", "object"
Kind = frozenset[str]
ANY: Kind = frozenset({NULL, BOOL, NUM, STR, ARR, OBJ})
EXPREF: Kind = frozenset({"expref"})


def kinds(*types: str) -> Kind:
    """The kind made of `types` (JMESPath type names)."""
    return frozenset(types)


K_NULL, K_NUM, K_STR, K_ARR, K_OBJ = (kinds(t) for t in (NULL, NUM, STR, ARR, OBJ))
K_BOOL_NULL, K_STR_NULL = kinds(BOOL, NULL), kinds(STR, NULL)
K_SIZED, K_STR_ARR = kinds(STR, ARR, OBJ), kinds(STR, ARR)


DECLARED: dict[str, Kind] = {
    "str": kinds(STR, NULL),
    "bool": kinds(BOOL, NULL),
    "int": kinds(NUM, NULL),
    "list[str]": kinds(ARR, NULL),
    "object": kinds(OBJ, NULL),
}

#: Result types of the built-in functions (by JMESPath type name).
RETURNS: dict[str, Kind] = {
    "abs": kinds(NUM),
    "avg": kinds(NUM, NULL),
    "ceil": kinds(NUM),
    "floor": kinds(NUM),
    "contains": kinds(BOOL),
    "ends_with": kinds(BOOL),
    "starts_with": kinds(BOOL),
    "join": kinds(STR),
    "keys": kinds(ARR),
    "values": kinds(ARR),
    "length": kinds(NUM),
    "map": kinds(ARR),
    "max": kinds(NUM, STR, NULL),
    "min": kinds(NUM, STR, NULL),
    "max_by": ANY,
    "min_by": ANY,
    "merge": kinds(OBJ),
    "reverse": kinds(ARR, STR),
    "sort": kinds(ARR),
    "sort_by": kinds(ARR),
    "sum": kinds(NUM),
    "to_array": kinds(ARR),
    "to_number": kinds(NUM, NULL),
    "to_string": kinds(STR),
    "type": kinds(STR, NULL),
}

def kind_of(value: Any) -> Kind:
    """The kind of the JSON value ``value`` (``ANY`` for anything else)."""
    if value is None:
        return kinds(NULL)
    if isinstance(value, bool):
        return kinds(BOOL)
    if isinstance(value, (int, float)):
        return kinds(NUM)
    if isinstance(value, str):
        return kinds(STR)
    if isinstance(value, list):
        return kinds(ARR)
    if isinstance(value, dict):
        return kinds(OBJ)
    return ANY
