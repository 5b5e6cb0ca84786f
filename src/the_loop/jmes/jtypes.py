"""The type lattice: a value's *jtypes* are the JMESPath types it may have at run time.

``jtypes(STR, NULL)`` is "a string or null"; ``ANY`` is every type, and a smaller set is more
knowledge (``<=`` is "at least as precise"). The emitter specialises when the jtypes prove the
outcome (``len(x)`` for a value known to be a string). ``jtypes_of`` is a literal's jtypes,
``DECLARED`` the jtypes each ``field_types`` promise gives a root field (``FIELD_TYPES`` lists
them), and ``RETURNS`` each built-in function's result jtypes.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ANY", "ARR", "BOOL", "DECLARED", "EXPREF", "FIELD_TYPES", "K_ARR", "K_BOOL_NULL", "K_NULL",
    "K_NUM", "K_OBJ", "K_SIZED", "K_STR", "K_STR_ARR", "K_STR_NULL", "NULL", "NUM", "OBJ",
    "RETURNS", "STR", "JTypes", "jtypes", "jtypes_of",
]

#: The field types ``compile_expression(field_types=...)`` understands.
FIELD_TYPES = frozenset({"str", "bool", "int", "list[str]", "object"})


NULL, BOOL, NUM, STR, ARR, OBJ = "null", "boolean", "number", "string", "array", "object"
JTypes = frozenset[str]
ANY: JTypes = frozenset({NULL, BOOL, NUM, STR, ARR, OBJ})
EXPREF: JTypes = frozenset({"expref"})


def jtypes(*types: str) -> JTypes:
    """The set made of `types` (JMESPath type names)."""
    return frozenset(types)


K_NULL, K_NUM, K_STR, K_ARR, K_OBJ = (jtypes(t) for t in (NULL, NUM, STR, ARR, OBJ))
K_BOOL_NULL, K_STR_NULL = jtypes(BOOL, NULL), jtypes(STR, NULL)
K_SIZED, K_STR_ARR = jtypes(STR, ARR, OBJ), jtypes(STR, ARR)


DECLARED: dict[str, JTypes] = {
    "str": jtypes(STR, NULL),
    "bool": jtypes(BOOL, NULL),
    "int": jtypes(NUM, NULL),
    "list[str]": jtypes(ARR, NULL),
    "object": jtypes(OBJ, NULL),
}

#: Result types of the built-in functions (by JMESPath type name).
RETURNS: dict[str, JTypes] = {
    "abs": jtypes(NUM),
    "avg": jtypes(NUM, NULL),
    "ceil": jtypes(NUM),
    "floor": jtypes(NUM),
    "contains": jtypes(BOOL),
    "ends_with": jtypes(BOOL),
    "starts_with": jtypes(BOOL),
    "join": jtypes(STR),
    "keys": jtypes(ARR),
    "values": jtypes(ARR),
    "length": jtypes(NUM),
    "map": jtypes(ARR),
    "max": jtypes(NUM, STR, NULL),
    "min": jtypes(NUM, STR, NULL),
    "max_by": ANY,
    "min_by": ANY,
    "merge": jtypes(OBJ),
    "reverse": jtypes(ARR, STR),
    "sort": jtypes(ARR),
    "sort_by": jtypes(ARR),
    "sum": jtypes(NUM),
    "to_array": jtypes(ARR),
    "to_number": jtypes(NUM, NULL),
    "to_string": jtypes(STR),
    "type": jtypes(STR, NULL),
}

def jtypes_of(value: Any) -> JTypes:
    """The jtypes of the JSON value ``value`` (``ANY`` for anything else)."""
    if value is None:
        return jtypes(NULL)
    if isinstance(value, bool):
        return jtypes(BOOL)
    if isinstance(value, (int, float)):
        return jtypes(NUM)
    if isinstance(value, str):
        return jtypes(STR)
    if isinstance(value, list):
        return jtypes(ARR)
    if isinstance(value, dict):
        return jtypes(OBJ)
    return ANY
