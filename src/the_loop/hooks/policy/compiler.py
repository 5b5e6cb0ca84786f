"""A compiler from JMESPath expressions to Python functions, for the policy engine.

``compile_expression(text)`` parses ``text`` with the ``jmespath`` package and turns its AST into
the source of one Python function, compiled with ``compile()``/``exec``. The generated code mirrors
``jmespath.visitor.TreeInterpreter`` node by node (same evaluation order, same null propagation,
same errors) and specialises where the outcome is provably the same: a comparison with a string
literal is a plain ``==``, ``length(x)`` is ``len(x)`` once ``x`` is known to be a ``str``/``list``/
``dict``, and so on. A typical policy condition runs 30-90 times faster than the interpreter and
within about 1-2.5 times hand-written Python (``benchmarks/jmespath_compiler.py``).

Two things keep it fast:

* field reads are optimistic (``value.get(key)`` without a type test); the first time a value
  has no ``get`` (null, a list ...) the evaluation is redone by guarded code, which the
  expression then keeps using (see ``_Codegen`` and ``_build``);
* literals and field names are globals of the generated code, not part of its source, so
  expressions of the same shape (``work_item.kind == 'a'``, ``work_item.ref == 'b'``) share one
  code object: compiling a policy costs little more than parsing it.

Where the ``jmespath`` package (1.1.0) disagrees with the JMESPath specification, the compiler
follows the specification (see ``docs/jmespath-divergences.md``):

* ordering comparisons (``<``, ``<=``, ``>``, ``>=``) are defined only between numbers: anything
  else is ``null`` (the package compares strings, and raises ``TypeError`` for a number against a
  string);
* ``==``/``!=`` are deep equalities in which a boolean never equals a number, at any depth (the
  package only special-cases the top level: it says ``[1] == [true]``);
* ``contains`` uses that equality (``contains([1], true)`` is false) and is false, not a
  ``TypeError``, for a string subject and a non-string search;
* ``to_number`` accepts exactly the JSON number grammar (the package accepts ``' 1'``, ``'1_000'``,
  ``'nan'``, ``'+1'``, ``'.5'``, non-ASCII digits ...);
* ``max_by``/``min_by`` keys of mixed types, and ``merge`` arguments after the first that are not
  objects, are ``JMESPathTypeError`` (the package raises a bare ``TypeError``/``ValueError``, or
  merges a list of pairs).

Anything the compiler does not handle (an expression reference used as a value, for instance)
falls back, for that expression only, to the reference interpreter with exactly those corrections
applied, so compiled and fallback evaluation never disagree; ``compile_stats()`` counts fallbacks.

Function names and arities are checked at compile time, for the whole expression: the errors are
the reference's own classes (``UnknownFunctionError``, ``ArityError``, ``VariadictArityError``), but
they are raised even for a call the reference would never have reached.

Inputs must be JSON-like: ``dict``, ``list``, ``str``, ``int``, ``float``, ``bool`` and ``None``.
"""

from __future__ import annotations

import fnmatch
import functools
import json
import math
import operator
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from numbers import Number
from typing import Any, NamedTuple, cast

from jmespath import exceptions
from jmespath.functions import REVERSE_TYPES_MAP, TYPES_MAP, signature
from jmespath.parser import Parser
from jmespath.visitor import Options, TreeInterpreter

from the_loop.hooks.policy.functions import POLICY_FUNCTION_SPECS, FunctionSpec, PolicyFunctions

__all__ = [
    "FIELD_TYPES",
    "CompiledExpression",
    "compile_expression",
    "compile_stats",
    "reference_options",
    "root_paths",
]

JSON = Any  # a JSON-like value: dict, list, str, int, float, bool or None

#: The field types ``compile_expression(field_types=...)`` understands.
FIELD_TYPES = frozenset({"str", "bool", "int", "list[str]", "object"})


# --------------------------------------------------------------------------------------------
# Runtime semantics shared by the generated code and the corrected reference interpreter.
# --------------------------------------------------------------------------------------------


def _is_num(x: Any) -> bool:
    return not isinstance(x, bool) and isinstance(x, Number)


def _eq(x: Any, y: Any) -> bool:
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
        return all(_eq(a, b) for a, b in zip(x, y, strict=True))
    if isinstance(x, dict):
        if not isinstance(y, dict) or len(x) != len(y):
            return False
        return all(key in y and _eq(value, y[key]) for key, value in x.items())
    if isinstance(y, (list, dict)):
        return False
    return bool(x == y)


def _ne(x: Any, y: Any) -> bool:
    return not _eq(x, y)


def _lt(x: Any, y: Any) -> bool | None:
    return bool(x < y) if _is_num(x) and _is_num(y) else None


def _le(x: Any, y: Any) -> bool | None:
    return bool(x <= y) if _is_num(x) and _is_num(y) else None


def _gt(x: Any, y: Any) -> bool | None:
    return bool(x > y) if _is_num(x) and _is_num(y) else None


def _ge(x: Any, y: Any) -> bool | None:
    return bool(x >= y) if _is_num(x) and _is_num(y) else None


_ORDERING: dict[str, Callable[[Any, Any], bool | None]] = {
    "lt": _lt,
    "lte": _le,
    "gt": _gt,
    "gte": _ge,
}
_ORDERING_PY = {"lt": "<", "lte": "<=", "gt": ">", "gte": ">="}
_ORDERING_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "lt": operator.lt,
    "lte": operator.le,
    "gt": operator.gt,
    "gte": operator.ge,
}


def _truthy(x: Any) -> bool:
    """JMESPath truth: false, null, '', [] and {} are false; everything else (even 0) is true."""
    return not (x is None or x is False or x == "" or x == [] or x == {})


def _jtype(x: Any) -> str:
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


def _check_type(current: Any, types: tuple[str, ...], function_name: str) -> None:
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


def _all_num(values: list[Any]) -> bool:
    for v in values:
        c = v.__class__
        if c is not int and c is not float:
            return False
    return True


def _all_str(values: list[Any]) -> bool:
    for v in values:  # noqa: SIM110 - a plain loop is twice as fast as all() on a generator
        if v.__class__ is not str:
            return False
    return True


_NO_GET = (type(None), str, list, int, float, bool)


def _getf(value: Any, key: str) -> Any:
    if value.__class__ in _NO_GET:  # the reference's AttributeError, without raising one
        return None
    try:
        return value.get(key)
    except AttributeError:
        return None


def _index(value: Any, index: int) -> Any:
    if not isinstance(value, list):
        return None
    try:
        return value[index]
    except IndexError:
        return None


def _values(value: Any) -> Any:
    try:
        return value.values()
    except AttributeError:
        return None


def _flatten(value: Any) -> list[Any] | None:
    if not isinstance(value, list):
        return None
    merged: list[Any] = []
    for element in value:
        if isinstance(element, list):
            merged.extend(element)
        else:
            merged.append(element)
    return merged


def _contains(subject: Any, search: Any) -> bool:
    if isinstance(subject, str):
        return isinstance(search, str) and search in subject
    if search is None or search.__class__ is str:
        return search in subject
    return any(_eq(element, search) for element in subject)


_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")


def _to_number(arg: Any) -> Any:
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


def _minmax_by(name: str, array: list[Any], key: Callable[[Any], Any], maximum: bool) -> Any:
    best: Any = None
    best_key: Any = None
    first_type = ""
    for position, element in enumerate(array):
        k = key(element)
        jtype = _jtype(k)
        if jtype != "number" and jtype != "string":
            raise exceptions.JMESPathTypeError(name, k, jtype, ["number", "string"])
        if position == 0:
            first_type, best, best_key = jtype, element, k
        elif jtype != first_type:
            raise exceptions.JMESPathTypeError(name, k, jtype, [first_type])
        elif (k > best_key) if maximum else (k < best_key):
            best, best_key = element, k
    return best


def _sort_by(array: list[Any], key: Callable[[Any], Any]) -> list[Any]:
    if not array:
        return array
    required = _jtype(key(array[0]))
    if required not in ("number", "string"):
        raise exceptions.JMESPathTypeError("sort_by", array[0], required, ["string", "number"])

    def keyfunc(element: Any) -> Any:
        k = key(element)
        jtype = _jtype(k)
        if jtype != required:
            raise exceptions.JMESPathTypeError("sort_by", k, jtype, [required])
        return k

    return sorted(array, key=keyfunc)


def _merge(arguments: tuple[Any, ...]) -> dict[Any, Any]:
    merged: dict[Any, Any] = {}
    for argument in arguments:
        _check_type(argument, ("object",), "merge")
        merged.update(argument)
    return merged


# --------------------------------------------------------------------------------------------
# The corrected reference interpreter (fallback and ``reference=True``).
# --------------------------------------------------------------------------------------------

_STRING: Any = {"types": ["string"]}
_ANY_TYPE: Any = {"types": []}


class _SpecFunctions(PolicyFunctions):
    """Built-ins + policy functions, with the package's divergences from the spec corrected."""

    @signature({"types": ["array", "string"]}, _ANY_TYPE)
    def _func_contains(self, subject: Any, search: Any) -> bool:
        return _contains(subject, search)

    @signature(_ANY_TYPE)
    def _func_to_number(self, arg: Any) -> Any:
        return _to_number(arg)

    @signature({"types": ["array"]}, {"types": ["expref"]})
    def _func_max_by(self, array: list[Any], expref: Any) -> Any:
        return _minmax_by(
            "max_by", array, lambda x: expref.visit(expref.expression, x), maximum=True
        )

    @signature({"types": ["array"]}, {"types": ["expref"]})
    def _func_min_by(self, array: list[Any], expref: Any) -> Any:
        return _minmax_by(
            "min_by", array, lambda x: expref.visit(expref.expression, x), maximum=False
        )

    @signature({"types": ["object"], "variadic": True})
    def _func_merge(self, *arguments: Any) -> dict[Any, Any]:
        return _merge(arguments)


class _SpecInterpreter(TreeInterpreter):
    """``TreeInterpreter`` with the specification's comparison semantics."""

    def visit_comparator(self, node: Any, value: Any) -> Any:
        children = node["children"]
        left = self.visit(children[0], value)
        right = self.visit(children[1], value)
        op = node["value"]
        if op == "eq":
            return _eq(left, right)
        if op == "ne":
            return not _eq(left, right)
        if _is_num(left) and _is_num(right):
            return _ORDERING_OPS[op](left, right)
        return None


_FUNCTIONS = _SpecFunctions()
_FUNCTION_TABLE: dict[str, Any] = _SpecFunctions.FUNCTION_TABLE
_INTERPRETER = _SpecInterpreter(Options(custom_functions=_FUNCTIONS))


def reference_options() -> Options:
    """``jmespath.Options`` with the policy functions *and* the spec corrections of the compiler.

    Note that the comparison corrections live in the interpreter, not in the functions: use
    ``compile_expression(text, reference=True)`` for the fully corrected interpreter.
    """
    return Options(custom_functions=_FUNCTIONS)


# --------------------------------------------------------------------------------------------
# Helpers called by generated code (built-in functions with the reference's type checks).
# --------------------------------------------------------------------------------------------


def _f_abs(x: Any) -> Any:
    if x.__class__ is not int and x.__class__ is not float:
        _check_type(x, ("number",), "abs")
    return abs(x)


def _f_avg(x: Any) -> Any:
    if x.__class__ is not list or not _all_num(x):
        _check_type(x, ("array-number",), "avg")
    return sum(x) / len(x) if x else None


def _f_ceil(x: Any) -> Any:
    if x.__class__ is not int and x.__class__ is not float:
        _check_type(x, ("number",), "ceil")
    return math.ceil(x)


def _f_floor(x: Any) -> Any:
    if x.__class__ is not int and x.__class__ is not float:
        _check_type(x, ("number",), "floor")
    return math.floor(x)


def _f_contains(subject: Any, search: Any) -> bool:
    if subject.__class__ is not list and subject.__class__ is not str:
        _check_type(subject, ("array", "string"), "contains")
    return _contains(subject, search)


def _f_ends_with(subject: Any, suffix: Any) -> Any:
    if subject.__class__ is not str:
        _check_type(subject, ("string",), "ends_with")
    if suffix.__class__ is not str:
        _check_type(suffix, ("string",), "ends_with")
    return subject.endswith(suffix)


def _f_starts_with(subject: Any, prefix: Any) -> Any:
    if subject.__class__ is not str:
        _check_type(subject, ("string",), "starts_with")
    if prefix.__class__ is not str:
        _check_type(prefix, ("string",), "starts_with")
    return subject.startswith(prefix)


def _f_join(separator: Any, array: Any) -> Any:
    if separator.__class__ is not str:
        _check_type(separator, ("string",), "join")
    if array.__class__ is not list or not _all_str(array):
        _check_type(array, ("array-string",), "join")
    return separator.join(array)


def _f_keys(x: Any) -> list[Any]:
    if x.__class__ is not dict:
        _check_type(x, ("object",), "keys")
    return list(x.keys())


def _f_values(x: Any) -> list[Any]:
    if x.__class__ is not dict:
        _check_type(x, ("object",), "values")
    return list(x.values())


def _f_length(x: Any) -> int:
    c = x.__class__
    if c is not str and c is not list and c is not dict:
        _check_type(x, ("string", "array", "object"), "length")
    return len(x)


def _f_map(expref: Callable[[Any], Any], array: Any) -> list[Any]:
    if array.__class__ is not list:
        _check_type(array, ("array",), "map")
    return [expref(element) for element in array]


def _f_max(x: Any) -> Any:
    if x.__class__ is not list or not (_all_num(x) or _all_str(x)):
        _check_type(x, ("array-number", "array-string"), "max")
    return max(x) if x else None


def _f_min(x: Any) -> Any:
    if x.__class__ is not list or not (_all_num(x) or _all_str(x)):
        _check_type(x, ("array-number", "array-string"), "min")
    return min(x) if x else None


def _f_max_by(array: Any, expref: Callable[[Any], Any]) -> Any:
    if array.__class__ is not list:
        _check_type(array, ("array",), "max_by")
    return _minmax_by("max_by", array, expref, maximum=True)


def _f_min_by(array: Any, expref: Callable[[Any], Any]) -> Any:
    if array.__class__ is not list:
        _check_type(array, ("array",), "min_by")
    return _minmax_by("min_by", array, expref, maximum=False)


def _f_merge(*arguments: Any) -> dict[Any, Any]:
    return _merge(arguments)


def _f_reverse(x: Any) -> Any:
    if x.__class__ is not list and x.__class__ is not str:
        _check_type(x, ("array", "string"), "reverse")
    if isinstance(x, str):
        return x[::-1]
    return list(reversed(x))


def _f_sort(x: Any) -> list[Any]:
    if x.__class__ is not list or not (_all_str(x) or _all_num(x)):
        _check_type(x, ("array-string", "array-number"), "sort")
    return sorted(x)


def _f_sort_by(array: Any, expref: Callable[[Any], Any]) -> Any:
    if array.__class__ is not list:
        _check_type(array, ("array",), "sort_by")
    return _sort_by(array, expref)


def _f_sum(x: Any) -> Any:
    if x.__class__ is not list or not _all_num(x):
        _check_type(x, ("array-number",), "sum")
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


def _checked(spec: FunctionSpec) -> Callable[..., Any]:
    """A policy function with the reference's argument type checks in front of it."""
    checks = [(i, types) for i, types in enumerate(spec.arg_types) if types]
    impl = spec.impl
    name = spec.name

    def call(*args: Any) -> Any:
        for i, types in checks:
            _check_type(args[i], types, name)
        return impl(*args)

    call.__name__ = f"_pf_{name}"
    return call


_RUNTIME: dict[str, Any] = {
    "_eq": _eq,
    "_ne": _ne,
    "_lt": _lt,
    "_le": _le,
    "_gt": _gt,
    "_ge": _ge,
    "_NUMS": (int, float),
    "_LEN_TYPES": (str, list, dict),
    "_STR_LIST": (str, list),
    "_getf": _getf,
    "_index": _index,
    "_values": _values,
    "_flatten": _flatten,
    "_to_number": _to_number,
    "_f_to_number": _to_number,
}
_RUNTIME.update({name: value for name, value in list(globals().items()) if name.startswith("_f_")})
_RUNTIME.update({f"_pf_{name}": _checked(spec) for name, spec in POLICY_FUNCTION_SPECS.items()})


# --------------------------------------------------------------------------------------------
# Code generation.
# --------------------------------------------------------------------------------------------

_NULL, _BOOL, _NUM, _STR, _ARR, _OBJ = "null", "boolean", "number", "string", "array", "object"
Kind = frozenset[str]
_ANY: Kind = frozenset({_NULL, _BOOL, _NUM, _STR, _ARR, _OBJ})
_EXPREF: Kind = frozenset({"expref"})


def _k(*types: str) -> Kind:
    return frozenset(types)


_K_NULL, _K_NUM, _K_STR, _K_ARR, _K_OBJ = (_k(t) for t in (_NULL, _NUM, _STR, _ARR, _OBJ))
_K_BOOL_NULL, _K_STR_NULL = _k(_BOOL, _NULL), _k(_STR, _NULL)
_K_SIZED, _K_STR_ARR = _k(_STR, _ARR, _OBJ), _k(_STR, _ARR)


_DECLARED: dict[str, Kind] = {
    "str": _k(_STR, _NULL),
    "bool": _k(_BOOL, _NULL),
    "int": _k(_NUM, _NULL),
    "list[str]": _k(_ARR, _NULL),
    "object": _k(_OBJ, _NULL),
}

#: Result types of the built-in functions (by JMESPath type name).
_RETURNS: dict[str, Kind] = {
    "abs": _k(_NUM),
    "avg": _k(_NUM, _NULL),
    "ceil": _k(_NUM),
    "floor": _k(_NUM),
    "contains": _k(_BOOL),
    "ends_with": _k(_BOOL),
    "starts_with": _k(_BOOL),
    "join": _k(_STR),
    "keys": _k(_ARR),
    "values": _k(_ARR),
    "length": _k(_NUM),
    "map": _k(_ARR),
    "max": _k(_NUM, _STR, _NULL),
    "min": _k(_NUM, _STR, _NULL),
    "max_by": _ANY,
    "min_by": _ANY,
    "merge": _k(_OBJ),
    "reverse": _k(_ARR, _STR),
    "sort": _k(_ARR),
    "sort_by": _k(_ARR),
    "sum": _k(_NUM),
    "to_array": _k(_ARR),
    "to_number": _k(_NUM, _NULL),
    "to_string": _k(_STR),
    "type": _k(_STR, _NULL),
}

_MAX_LOOPS = 8  # nested loops in one generated function (CPython allows 20 blocks)
_MAX_DEPTH = 40  # indentation levels in one generated function (CPython allows 100)


class _Unsupported(Exception):
    """The compiler does not handle this expression: use the reference interpreter."""


class _NoLiteral:
    pass


_NO_LITERAL: Any = _NoLiteral()


class _Val(NamedTuple):
    """A compiled value: ``code`` is a Python expression.

    ``simple`` values (a name or a literal) can be repeated freely. Other values are expressions
    that must be evaluated exactly once, at the point where they were produced: a consumer either
    embeds them once (keeping the evaluation order) or binds them to a name first (``simple()``).
    """

    code: str
    kind: Kind
    literal: Any = _NO_LITERAL
    root: bool = False
    simple: bool = True

    @property
    def is_literal(self) -> bool:
        return self.literal is not _NO_LITERAL


class _Fn:
    """One generated Python function."""

    def __init__(self, name: str, param: str) -> None:
        self.name = name
        self.param = param
        self.lines: list[str] = []
        self.depth = 1
        self.loops = 0

    def emit(self, line: str) -> None:
        self.lines.append("    " * self.depth + line)

    @contextmanager
    def block(self, header: str, *, loop: bool = False) -> Iterator[None]:
        self.emit(header)
        self.depth += 1
        self.loops += loop
        start = len(self.lines)
        try:
            yield
        finally:
            if len(self.lines) == start:
                self.emit("pass")
            self.depth -= 1
            self.loops -= loop

    def source(self, result: str, *, on_attribute_error: str = "") -> str:
        body = [*self.lines, f"    return {result}"]
        if on_attribute_error:
            body = ["    try:", *("    " + line for line in body)]
            body += ["    except AttributeError:", f"        return {on_attribute_error}"]
        return f"def {self.name}({self.param}):\n" + "\n".join(body) + "\n"


_CODE_CACHE: dict[str, Any] = {}
_CODE_CACHE_SIZE = 4096


def _kind_of(value: Any) -> Kind:
    if value is None:
        return _k(_NULL)
    if isinstance(value, bool):
        return _k(_BOOL)
    if isinstance(value, (int, float)):
        return _k(_NUM)
    if isinstance(value, str):
        return _k(_STR)
    if isinstance(value, list):
        return _k(_ARR)
    if isinstance(value, dict):
        return _k(_OBJ)
    return _ANY


_Node = Mapping[str, Any]


def _expr(code: str, kind: Kind) -> _Val:
    """A value that is an expression to evaluate once (parenthesised, so it embeds anywhere)."""
    return _Val(f"({code})", kind, simple=False)


class _Codegen:
    """Generates the Python source of one expression.

    ``optimistic`` code reads fields with a bare ``value.get(key)``: fast, and exact as long as
    every value it reads a field from has a ``get`` (is an object). When one does not (null, a
    list, a string ...) it raises AttributeError, and the evaluation is redone from the start by
    the guarded (non-optimistic) code, which reads fields exactly like the reference interpreter.
    Evaluation is pure, so doing it twice is unobservable.
    """

    def __init__(self, field_types: Mapping[str, str] | None, *, optimistic: bool = False) -> None:
        self.optimistic = optimistic
        self.field_types = dict(field_types or {})
        self.globals: dict[str, Any] = {}
        self.defs: list[str] = []
        self.counter = 0

    # -- plumbing ---------------------------------------------------------------------------

    def name(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def const(self, value: Any) -> _Val:
        """A literal. Only null/true/false are written into the source: every other constant
        is a global, so expressions that differ only in their literals and field names
        generate the same source and share one compiled code object (``_CODE_CACHE``)."""
        if value is None or value is True or value is False:
            code = repr(value)
        else:
            code = self.global_("_k", value)
        return _Val(code, _kind_of(value), value)

    def global_(self, prefix: str, value: Any) -> str:
        name = self.name(prefix)
        self.globals[name] = value
        return name

    def build(
        self, ast: _Node, deoptimize: Callable[[Any], Any] | None = None
    ) -> tuple[Callable[[Any], Any], str]:
        """The evaluator for ``ast`` (optimistic code calls ``deoptimize(data)`` on errors)."""
        main = _Fn("_jp_main", "data")
        result = self.expr(ast, _Val("data", _ANY, root=True), main)
        handler = "_deoptimize(data)" if self.optimistic else ""
        self.defs.append(main.source(result.code, on_attribute_error=handler))
        source = "\n".join(self.defs)
        namespace = {**_RUNTIME, **self.globals, "_deoptimize": deoptimize}
        code = _CODE_CACHE.get(source)
        if code is None:
            code = compile(source, "<jmespath>", "exec")
            if len(_CODE_CACHE) >= _CODE_CACHE_SIZE:
                _CODE_CACHE.clear()
            _CODE_CACHE[source] = code
        exec(code, namespace)
        function: Callable[[Any], Any] = namespace["_jp_main"]
        return function, source

    def expr(self, node: _Node, cur: _Val, fn: _Fn) -> _Val:
        """Compile ``node`` applied to ``cur`` (always a simple value)."""
        if fn.loops >= _MAX_LOOPS or fn.depth >= _MAX_DEPTH:
            return self.hoist(node, cur, fn)
        handler = getattr(self, "n_" + node["type"], None)
        if handler is None:
            raise _Unsupported(f"unsupported node type {node['type']!r}")
        result: _Val = handler(node, cur, fn)
        return result

    def in_order(self, items: list[tuple[_Node, _Val]], fn: _Fn) -> list[_Val]:
        """Compile several nodes evaluated left to right; their values may be embedded later.

        When a node emits statements, the pending (not yet evaluated) values of the nodes
        before it are bound to names right where they were produced, so evaluation order (and
        hence which error is raised first) is exactly the reference's.
        """
        values: list[_Val] = []
        marks: list[tuple[int, int]] = []
        for node, cur in items:
            before = len(fn.lines)
            value = self.expr(node, cur, fn)
            if len(fn.lines) > before:
                for i in reversed(range(len(values))):
                    if not values[i].simple:
                        t = self.name("t")
                        position, depth = marks[i]
                        fn.lines.insert(position, "    " * depth + f"{t} = {values[i].code}")
                        values[i] = values[i]._replace(code=t, simple=True)
            values.append(value)
            marks.append((len(fn.lines), fn.depth))
        return values

    def simple(self, v: _Val, fn: _Fn) -> _Val:
        if v.simple:
            return v
        t = self.name("t")
        fn.emit(f"{t} = {v.code}")
        return v._replace(code=t, simple=True)

    def hoist(self, node: _Node, cur: _Val, fn: _Fn) -> _Val:
        """Compile ``node`` into a function of its own (bounds nesting in generated code)."""
        sub = _Fn(self.name("_h"), "c")
        value = self.expr(node, cur._replace(code="c", simple=True), sub)
        self.defs.append(sub.source(value.code))
        return _expr(f"{sub.name}({cur.code})", value.kind)

    def truth(self, v: _Val, fn: _Fn) -> str:
        """A Python condition equivalent to the JMESPath truth of ``v`` (embeds it once)."""
        if v.is_literal:
            return repr(_truthy(v.literal))
        if _NUM not in v.kind:
            return v.code  # Python and JMESPath truth agree on every other type
        if v.kind == _K_NUM:  # numbers are always true; a pending value is still evaluated
            return "True" if v.simple else f"({v.code} is not None)"
        c = self.simple(v, fn).code
        return f"({c} or ({c} == 0 and {c} is not False))"

    def collect(self, fn: _Fn, target: str, v: _Val) -> None:
        """``target.append(v)`` unless v is null (projections drop nulls)."""
        if v.is_literal and v.literal is None:
            return
        if _NULL in v.kind:
            v = self.simple(v, fn)
            with fn.block(f"if {v.code} is not None:"):
                fn.emit(f"{target}.append({v.code})")
        else:
            fn.emit(f"{target}.append({v.code})")

    # -- nodes ------------------------------------------------------------------------------

    def n_literal(self, node: _Node, cur: _Val, fn: _Fn) -> _Val:
        return self.const(node["value"])

    def n_current(self, node: _Node, cur: _Val, fn: _Fn) -> _Val:
        return cur

    n_identity = n_current

    def n_field(self, node: _Node, cur: _Val, fn: _Fn) -> _Val:
        key = node["value"]
        if cur.is_literal:
            return self.const(cur.literal.get(key) if isinstance(cur.literal, dict) else None)
        if _OBJ not in cur.kind:
            return self.discard(cur, fn)
        kind = _ANY
        if cur.root and key in self.field_types:
            kind = _DECLARED[self.field_types[key]]
        c, k = cur.code, self.global_("_k", key)
        if self.optimistic or cur.kind == _K_OBJ:
            # Optimistic: a value without .get raises AttributeError, and the whole evaluation
            # is redone by the guarded code (see compile_expression).
            code = f"{c}.get({k})"
        else:
            code = f"{c}.get({k}) if {c}.__class__ is dict else _getf({c}, {k})"
        return _expr(code, kind)

    def n_subexpression(self, node: _Node, cur: _Val, fn: _Fn) -> _Val:
        result = cur
        for child in node["children"]:
            if not (self.optimistic and child["type"] == "field"):
                result = self.simple(result, fn)  # an optimistic field embeds its operand once
            result = self.expr(child, result, fn)
        return result

    n_index_expression = n_subexpression
    n_pipe = n_subexpression

    def n_index(self, node: _Node, cur: _Val, fn: _Fn) -> _Val:
        i: int = node["value"]
        if cur.is_literal:
            return self.const(_index(cur.literal, i))
        if _ARR not in cur.kind:
            return self.const(None)
        c = cur.code
        fits = f"len({c}) > {i}" if i >= 0 else f"len({c}) >= {-i}"
        if cur.kind == _K_ARR:
            return _expr(f"{c}[{i}] if {fits} else None", _ANY)
        code = f"({c}[{i}] if {fits} else None) if {c}.__class__ is list else _index({c}, {i})"
        return _expr(code, _ANY)

    def n_slice(self, node: _Node, cur: _Val, fn: _Fn) -> _Val:
        if _ARR not in cur.kind or (cur.is_literal and not isinstance(cur.literal, list)):
            return self.const(None)
        parts = ["" if part is None else str(int(part)) for part in node["children"]]
        c = cur.code
        sliced = f"{c}[{':'.join(parts)}]"
        if cur.kind == _K_ARR:
            return _expr(sliced, _k(_ARR))
        return _expr(f"{sliced} if isinstance({c}, list) else None", _k(_ARR, _NULL))

    def n_comparator(self, node: _Node, cur: _Val, fn: _Fn) -> _Val:
        op: str = node["value"]
        a, b = self.in_order([(child, cur) for child in node["children"]], fn)
        if a.is_literal and b.is_literal:
            if op == "eq":
                return self.const(_eq(a.literal, b.literal))
            if op == "ne":
                return self.const(not _eq(a.literal, b.literal))
            return self.const(_ORDERING[op](a.literal, b.literal))
        if op in ("eq", "ne"):
            return _expr(self.equality(a, b, fn, negate=op == "ne"), _k(_BOOL))
        py = _ORDERING_PY[op]
        if a.kind == _K_NUM and b.kind == _K_NUM:
            return _expr(f"{a.code} {py} {b.code}", _k(_BOOL))
        if _NUM not in a.kind or _NUM not in b.kind:
            # Never both numbers: null (both sides were still evaluated, in order).
            for v in (a, b):
                if not v.simple:
                    fn.emit(v.code)
            return self.const(None)
        a = self.simple(a, fn)
        b = self.simple(b, fn)
        guards = " and ".join(f"{v.code}.__class__ in _NUMS" for v in (a, b) if v.kind != {_NUM})
        slow = f"_{_ORDERING[op].__name__.lstrip('_')}({a.code}, {b.code})"
        code = f"({a.code} {py} {b.code}) if {guards} else {slow}"
        return _expr(code, _k(_BOOL, _NULL))

    def equality(self, a: _Val, b: _Val, fn: _Fn, *, negate: bool) -> str:
        """A Python expression for JMESPath ``a == b`` (or ``!=``); not both literals."""
        eq, is_, not_ = ("!=", "is not", "not ") if negate else ("==", "is", "")
        for x, y in ((a, b), (b, a)):
            if not y.is_literal or x.is_literal:
                continue
            lit = y.literal
            if lit is None or lit is True or lit is False:
                return f"{x.code} {is_} {lit!r}"
            if lit.__class__ is str:
                return f"{a.code} {eq} {b.code}"
            if lit.__class__ in (int, float) and math.isfinite(lit):
                if lit == 0 or lit == 1:
                    x = self.simple(x, fn)
                    boolean = "False" if lit == 0 else "True"
                    return f"{not_}({x.code} == {y.code} and {x.code} is not {boolean})"
                return f"{a.code} {eq} {b.code}"
        for x in (a, b):
            if x.kind <= _K_STR_NULL:
                return f"{a.code} {eq} {b.code}"
            if x.kind <= _K_BOOL_NULL:
                return f"{a.code} {is_} {b.code}"
        return f"{not_}_eq({a.code}, {b.code})"

    def n_and_expression(self, node: _Node, cur: _Val, fn: _Fn) -> _Val:
        return self.logical(node, cur, fn, is_and=True)

    def n_or_expression(self, node: _Node, cur: _Val, fn: _Fn) -> _Val:
        return self.logical(node, cur, fn, is_and=False)

    def logical(self, node: _Node, cur: _Val, fn: _Fn, *, is_and: bool) -> _Val:
        left, right = node["children"]
        a = self.expr(left, cur, fn)
        if a.is_literal:
            if _truthy(a.literal) is not is_and:
                return a
            return self.expr(right, cur, fn)
        mark = len(fn.lines)
        t = self.name("t")
        fn.emit(f"{t} = {a.code}")
        held = a._replace(code=t, simple=True)
        test = self.truth(held, fn)
        with fn.block(f"if {test}:" if is_and else f"if not {test}:"):
            inner = len(fn.lines)
            b = self.expr(right, cur, fn)
            emitted = len(fn.lines) > inner
            fn.emit(f"{t} = {b.code}")
        kind = a.kind | b.kind
        if not emitted and _NUM not in a.kind:
            # Python's and/or return the same operand as JMESPath's when truth agrees.
            del fn.lines[mark:]
            op = "and" if is_and else "or"
            return _expr(f"({a.code} {op} {b.code})", kind)
        return _Val(t, kind)

    def n_not_expression(self, node: _Node, cur: _Val, fn: _Fn) -> _Val:
        a = self.expr(node["children"][0], cur, fn)
        if a.is_literal:
            return self.const(not _truthy(a.literal))
        return _expr(f"not {self.truth(a, fn)}", _k(_BOOL))

    def n_multi_select_list(self, node: _Node, cur: _Val, fn: _Fn) -> _Val:
        return self.multi_select(node, cur, fn, is_dict=False)

    def n_multi_select_dict(self, node: _Node, cur: _Val, fn: _Fn) -> _Val:
        return self.multi_select(node, cur, fn, is_dict=True)

    def multi_select(self, node: _Node, cur: _Val, fn: _Fn, *, is_dict: bool) -> _Val:
        if cur.is_literal and cur.literal is None:
            return self.const(None)
        kind = _k(_OBJ if is_dict else _ARR)
        nullable = _NULL in cur.kind and not cur.is_literal
        children = node["children"]
        if is_dict:
            items = [(child["children"][0], cur) for child in children]
        else:
            items = [(child, cur) for child in children]
        mark = len(fn.lines)
        t = self.name("t")
        if nullable:
            fn.emit(f"{t} = None")
        with fn.block(f"if {cur.code} is not None:") if nullable else nullcontext():
            inner = len(fn.lines)
            values = self.in_order(items, fn)
            emitted = len(fn.lines) > inner
            if is_dict:
                keys = [self.global_("_k", child["value"]) for child in children]
                parts = [f"{k}: {v.code}" for k, v in zip(keys, values, strict=True)]
                display = "{" + ", ".join(parts) + "}"
            else:
                display = "[" + ", ".join(v.code for v in values) + "]"
            fn.emit(f"{t} = {display}")
        if not emitted:
            del fn.lines[mark:]
            if nullable:
                return _expr(f"{display} if {cur.code} is not None else None", kind | _K_NULL)
            return _expr(display, kind)
        return _Val(t, kind | _K_NULL if nullable else kind)

    def project(self, base: _Val, right: _Node, fn: _Fn, condition: _Node | None = None) -> _Val:
        """A projection (or filter) loop over the simple iterable ``base``; drops nulls."""
        e = self.name("e")
        element = _Val(e, _ANY)
        if condition is None and right["type"] == "identity":
            return _expr(f"[{e} for {e} in {base.code} if {e} is not None]", _k(_ARR))
        t = self.name("t")
        fn.emit(f"{t} = []")
        with fn.block(f"for {e} in {base.code}:", loop=True):
            if condition is None:
                self.collect(fn, t, self.expr(right, element, fn))
            else:
                test = self.truth(self.expr(condition, element, fn), fn)
                with fn.block(f"if {test}:"):
                    self.collect(fn, t, self.expr(right, element, fn))
        return _Val(t, _k(_ARR))

    def guarded(self, base: _Val, fn: _Fn, body: Callable[[_Val], _Val]) -> _Val:
        """``body(base)`` when ``base`` is a list, else null (``base`` is made simple)."""
        base = self.simple(base, fn)
        if base.kind == _K_ARR:
            return body(base)
        mark = len(fn.lines)
        t = self.name("t")
        fn.emit(f"{t} = None")
        with fn.block(f"if isinstance({base.code}, list):"):
            inner_mark = len(fn.lines)
            inner = body(base)
            emitted = len(fn.lines) > inner_mark
            fn.emit(f"{t} = {inner.code}")
        if not emitted:
            del fn.lines[mark:]
            code = f"({inner.code}) if isinstance({base.code}, list) else None"
            return _expr(code, inner.kind | _K_NULL)
        return _Val(t, inner.kind | _K_NULL)

    def n_projection(self, node: _Node, cur: _Val, fn: _Fn) -> _Val:
        left, right = node["children"]
        base = self.expr(left, cur, fn)
        if _ARR not in base.kind or (base.is_literal and not isinstance(base.literal, list)):
            return self.discard(base, fn)
        return self.guarded(base, fn, lambda b: self.project(b, right, fn))

    def n_filter_projection(self, node: _Node, cur: _Val, fn: _Fn) -> _Val:
        left, right, condition = node["children"]
        base = self.expr(left, cur, fn)
        if _ARR not in base.kind or (base.is_literal and not isinstance(base.literal, list)):
            return self.discard(base, fn)
        return self.guarded(base, fn, lambda b: self.project(b, right, fn, condition))

    def n_value_projection(self, node: _Node, cur: _Val, fn: _Fn) -> _Val:
        left, right = node["children"]
        base = self.expr(left, cur, fn)
        if _OBJ not in base.kind or (base.is_literal and not isinstance(base.literal, dict)):
            return self.discard(base, fn)
        b = self.simple(base, fn).code
        values = self.simple(
            _expr(f"{b}.values() if {b}.__class__ is dict else _values({b})", _ANY),
            fn,
        )
        t = self.name("t")
        fn.emit(f"{t} = None")
        with fn.block(f"if {values.code} is not None:"):
            inner = self.project(values, right, fn)
            fn.emit(f"{t} = {inner.code}")
        return _Val(t, _k(_ARR, _NULL))

    def n_flatten(self, node: _Node, cur: _Val, fn: _Fn) -> _Val:
        base = self.expr(node["children"][0], cur, fn)
        if _ARR not in base.kind or (base.is_literal and not isinstance(base.literal, list)):
            return self.discard(base, fn)
        kind = _k(_ARR) if base.kind == _K_ARR else _k(_ARR, _NULL)
        return _expr(f"_flatten({base.code})", kind)

    def discard(self, v: _Val, fn: _Fn) -> _Val:
        """Evaluate ``v`` for its errors only; the result is null."""
        if not v.simple:
            fn.emit(v.code)
        return self.const(None)

    def n_expref(self, node: _Node, cur: _Val, fn: _Fn) -> _Val:
        raise _Unsupported("an expression reference used as a value")

    # -- functions --------------------------------------------------------------------------

    def expref(self, node: _Node) -> _Val:
        sub = _Fn(self.name("_x"), "c")
        value = self.expr(node["children"][0], _Val("c", _ANY), sub)
        self.defs.append(sub.source(value.code))
        return _Val(sub.name, _EXPREF)

    def n_function_expression(self, node: _Node, cur: _Val, fn: _Fn) -> _Val:
        name: str = node["value"]
        declared = _FUNCTION_TABLE[name]["signature"]
        children = node["children"]
        items: list[tuple[_Node, _Val]] = []
        for position, child in enumerate(children):
            types = declared[min(position, len(declared) - 1)]["types"]
            wants_expref = types == ["expref"]
            if (child["type"] == "expref") != wants_expref:
                what = "an expression reference" if not wants_expref else "a value"
                raise _Unsupported(f"{what} passed to {name}() where it does not belong")
            if not wants_expref:
                items.append((child, cur))
        literal_set = name == "contains" and _string_literals(children[0]) is not None
        if literal_set:  # a list of string literals has nothing to evaluate: see f_contains
            items = items[1:]
        values = iter(self.in_order(items, fn))
        args = [
            self.expref(child)
            if child["type"] == "expref"
            else self.const(None)
            if literal_set and position == 0
            else next(values)
            for position, child in enumerate(children)
        ]
        special = getattr(self, "f_" + name, None)
        if special is not None:
            result: _Val | None = special(args, fn, children, cur)
            if result is not None:
                return result
        codes = ", ".join(a.code for a in args)
        if name in POLICY_FUNCTION_SPECS:
            spec = POLICY_FUNCTION_SPECS[name]
            kind = frozenset(spec.returns) or _ANY
            if not spec.variadic and all(
                not types or all(_allowed_kind(t, a) for t in types)
                for types, a in zip(spec.arg_types, args, strict=True)
            ):
                impl = self.global_("_impl_", spec.impl)
                return _expr(f"{impl}({codes})", kind)
            return _expr(f"_pf_{name}({codes})", kind)
        if name not in _RETURNS:  # pragma: no cover - every built-in is listed
            raise _Unsupported(f"no compiled form for {name}()")
        return _expr(f"_f_{name}({codes})", _RETURNS[name])

    def simples(self, args: list[_Val], fn: _Fn) -> list[_Val]:
        return [self.simple(a, fn) for a in args]

    def f_length(self, args: list[_Val], fn: _Fn, nodes: list[_Node], cur: _Val) -> _Val | None:
        (a,) = args
        if a.kind <= _K_SIZED:
            return _expr(f"len({a.code})", _k(_NUM))
        (a,) = self.simples(args, fn)
        code = f"len({a.code}) if {a.code}.__class__ in _LEN_TYPES else _f_length({a.code})"
        return _expr(code, _k(_NUM))

    def f_contains(self, args: list[_Val], fn: _Fn, nodes: list[_Node], cur: _Val) -> _Val | None:
        literals = _string_literals(nodes[0])
        if literals is not None:
            # contains(['a', 'b'], x): a frozenset lookup; the list is null when @ is.
            (search,) = self.simples(args[1:], fn)
            members = self.global_("_set", frozenset(literals))
            fast = f"({search.code} in {members}) if {search.code}.__class__ is str else False"
            if _NULL not in cur.kind:
                return _expr(fast, _k(_BOOL))
            slow = f"_f_contains(None, {search.code})"
            return _expr(f"({fast}) if {cur.code} is not None else {slow}", _k(_BOOL))
        subject, search = self.simples(args, fn)
        s, x = subject.code, search.code
        guards = []
        if not subject.kind <= _K_STR_ARR:
            guards.append(f"{s}.__class__ in _STR_LIST")
        if not search.kind <= _K_STR:
            guards.append(f"{x}.__class__ is str")
        if not guards:
            return _expr(f"{x} in {s}", _k(_BOOL))
        code = f"({x} in {s}) if {' and '.join(guards)} else _f_contains({s}, {x})"
        return _expr(code, _k(_BOOL))

    def _string_method(self, args: list[_Val], fn: _Fn, method: str, name: str) -> _Val:
        subject, other = self.simples(args, fn)
        guards = [f"{v.code}.__class__ is str" for v in (subject, other) if not v.kind <= _K_STR]
        call = f"{subject.code}.{method}({other.code})"
        if not guards:
            return _expr(call, _k(_BOOL))
        slow = f"_f_{name}({subject.code}, {other.code})"
        return _expr(f"{call} if {' and '.join(guards)} else {slow}", _k(_BOOL))

    def f_starts_with(
        self, args: list[_Val], fn: _Fn, nodes: list[_Node], cur: _Val
    ) -> _Val | None:
        return self._string_method(args, fn, "startswith", "starts_with")

    def f_ends_with(self, args: list[_Val], fn: _Fn, nodes: list[_Node], cur: _Val) -> _Val | None:
        return self._string_method(args, fn, "endswith", "ends_with")

    def f_not_null(self, args: list[_Val], fn: _Fn, nodes: list[_Node], cur: _Val) -> _Val | None:
        args = self.simples(args, fn)  # every argument is evaluated, whatever comes first
        tested: list[_Val] = []
        tail = self.const(None)
        for a in args:
            if a.is_literal:
                if a.literal is None:
                    continue
                tail = a
                break
            tested.append(a)
        if not tested:
            return tail
        kind: Kind = tail.kind.union(*(a.kind for a in tested))
        code = " else ".join(f"{a.code} if {a.code} is not None" for a in tested)
        return _expr(f"{code} else {tail.code}", kind)

    def f_to_string(self, args: list[_Val], fn: _Fn, nodes: list[_Node], cur: _Val) -> _Val | None:
        (a,) = args
        if a.kind <= _K_STR:
            return a
        (a,) = self.simples(args, fn)
        code = f"{a.code} if {a.code}.__class__ is str else _f_to_string({a.code})"
        return _expr(code, _k(_STR))

    def _case(self, args: list[_Val], fn: _Fn, method: str) -> _Val:
        (a,) = args
        if a.kind <= _K_STR:
            return _expr(f"{a.code}.{method}()", _k(_STR))
        (a,) = self.simples(args, fn)
        code = f"{a.code}.{method}() if {a.code}.__class__ is str else _pf_{method}({a.code})"
        return _expr(code, _k(_STR))

    def f_lower(self, args: list[_Val], fn: _Fn, nodes: list[_Node], cur: _Val) -> _Val | None:
        return self._case(args, fn, "lower")

    def f_upper(self, args: list[_Val], fn: _Fn, nodes: list[_Node], cur: _Val) -> _Val | None:
        return self._case(args, fn, "upper")

    def _pattern(
        self, args: list[_Val], fn: _Fn, name: str, matcher: Callable[[str], Any]
    ) -> _Val | None:
        pattern, subject = args
        if not (pattern.is_literal and isinstance(pattern.literal, str)):
            return None
        try:
            match = matcher(pattern.literal)
        except re.error:
            return None  # the generic call raises the invalid-value error when evaluated
        m = self.global_("_m", match)
        if subject.kind <= _K_STR:
            return _expr(f"{m}({subject.code}) is not None", _k(_BOOL))
        s = self.simple(subject, fn).code
        slow = f"_pf_{name}({pattern.code}, {s})"
        code = f"({m}({s}) is not None) if {s}.__class__ is str else {slow}"
        return _expr(code, _k(_BOOL))

    def f_regex_match(
        self, args: list[_Val], fn: _Fn, nodes: list[_Node], cur: _Val
    ) -> _Val | None:
        return self._pattern(args, fn, "regex_match", lambda p: re.compile(p).search)

    def f_glob_match(self, args: list[_Val], fn: _Fn, nodes: list[_Node], cur: _Val) -> _Val | None:
        return self._pattern(
            args, fn, "glob_match", lambda p: re.compile(fnmatch.translate(p)).match
        )


def _string_literals(node: _Node) -> list[str] | None:
    """The strings of a multi-select list made only of string literals (else None)."""
    if node["type"] != "multi_select_list":
        return None
    values = [child.get("value") for child in node["children"] if child["type"] == "literal"]
    if len(values) != len(node["children"]) or not all(isinstance(v, str) for v in values):
        return None
    return values


def _allowed_kind(jmespath_type: str, value: _Val) -> bool:
    """True when every value of ``value``'s kind passes the check for ``jmespath_type``."""
    return "-" not in jmespath_type and value.kind <= {jmespath_type}


# --------------------------------------------------------------------------------------------
# Public API.
# --------------------------------------------------------------------------------------------


class CompiledExpression:
    """A JMESPath expression ready to evaluate: ``expr.search(data)``. Immutable.

    ``compiled`` is False when the expression runs on the (corrected) reference interpreter,
    with the reason in ``fallback_reason``. ``source`` is the generated Python ("" if none).
    ``ast`` is jmespath's parsed AST, shared with its parser cache: do not mutate it.
    Its only internal state change: optimistic code replaces ``search`` with its guarded
    version the first time it meets a value it cannot read a field from (see
    ``compile_expression``); the results are the same.
    """

    text: str
    ast: dict[str, Any]
    compiled: bool
    fallback_reason: str
    source: str

    def __init__(
        self,
        text: str,
        ast: dict[str, Any],
        evaluate: Callable[[Any], Any],
        *,
        compiled: bool,
        fallback_reason: str = "",
        source: str = "",
    ) -> None:
        setter = object.__setattr__
        setter(self, "text", text)
        setter(self, "ast", ast)
        setter(self, "compiled", compiled)
        setter(self, "fallback_reason", fallback_reason)
        setter(self, "source", source)
        setter(self, "_evaluate", evaluate)
        # Shadow the method with the evaluator itself: one Python call less per evaluation.
        setter(self, "search", evaluate)

    def search(self, data: Any) -> Any:
        """Evaluate the expression against ``data`` (a JSON-like value)."""
        evaluate: Callable[[Any], Any] = self.__dict__["_evaluate"]
        return evaluate(data)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("CompiledExpression is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("CompiledExpression is immutable")

    def __repr__(self) -> str:
        how = "compiled" if self.compiled else f"reference: {self.fallback_reason}"
        return f"CompiledExpression({self.text!r}, {how})"


_STATS = {"compiled": 0, "fallback": 0, "reference": 0}
_STATS_LOCK = threading.Lock()


def _count(key: str) -> None:
    with _STATS_LOCK:
        _STATS[key] += 1


def compile_stats() -> dict[str, int]:
    """Process-wide counts: ``compiled``, ``fallback`` (compiler gave up), ``reference`` (asked)."""
    with _STATS_LOCK:
        return dict(_STATS)


def _check_functions(node: Mapping[str, Any]) -> None:
    """Unknown functions and wrong arities, in the order the reference would meet them."""
    for child in node.get("children", ()):
        if isinstance(child, Mapping):
            _check_functions(child)
    if node.get("type") != "function_expression":
        return
    name = node["value"]
    try:
        spec = _FUNCTION_TABLE[name]
    except KeyError:
        raise exceptions.UnknownFunctionError(f"Unknown function: {name}()") from None
    declared = spec["signature"]
    actual = len(node["children"])
    if declared and declared[-1].get("variadic"):
        if actual < len(declared):
            raise exceptions.VariadictArityError(len(declared), actual, name)
    elif actual != len(declared):
        raise exceptions.ArityError(len(declared), actual, name)


def compile_expression(
    text: str, *, field_types: Mapping[str, str] | None = None, reference: bool = False
) -> CompiledExpression:
    """Parse and compile a JMESPath expression.

    Parse errors are jmespath's own (``ParseError``, ``LexerError``, ``IncompleteExpressionError``,
    ``EmptyExpressionError``); unknown functions and wrong arities raise ``UnknownFunctionError``
    / ``ArityError`` here, at compile time. ``reference=True`` evaluates with the (corrected)
    reference interpreter instead of generated code.

    ``field_types`` maps root field names to ``"str"``, ``"bool"``, ``"int"``, ``"list[str]"`` or
    ``"object"``. It is a promise about the root document: each named field is either missing or
    null, or holds a value of that type. The compiler uses it only for specialisations that hold
    for every such value: Python's truth for a non-``int`` field (``if kind:``), a plain ``==``
    or ``is`` for a ``str``/``bool`` field, ``x in list`` for ``contains`` of a ``str`` field, and
    ``null`` without a test for an ordering comparison of a ``str``/``bool`` field. Reading a
    field of an ``"object"`` field stays guarded, so a broken promise there gives ``null``.

    The returned expression is optimistic (see ``_Codegen``): it reads fields without checking
    that the value is an object, and on the first value that is not, redoes that evaluation with
    guarded code and keeps using the guarded code (``search`` is replaced) from then on.
    """
    for field, declared in (field_types or {}).items():
        if declared not in FIELD_TYPES:
            raise ValueError(
                f"field_types[{field!r}]: unknown type {declared!r}; "
                f"use one of {sorted(FIELD_TYPES)}"
            )
    parsed = Parser().parse(text)
    ast = cast("dict[str, Any]", parsed.parsed)
    _check_functions(ast)
    reason = "reference interpreter requested" if reference else ""
    if not reference:
        try:
            evaluate, source, settle = _build(ast, field_types)
        except _Unsupported as exc:
            reason = str(exc)
        except _COMPILE_ERRORS as exc:
            reason = f"generated code did not compile: {type(exc).__name__}: {exc}"
        else:
            _count("compiled")
            expression = CompiledExpression(text, ast, evaluate, compiled=True, source=source)
            settle(expression)
            return expression
    _count("reference" if reference else "fallback")
    return CompiledExpression(text, ast, _interpreter(ast), compiled=False, fallback_reason=reason)


_COMPILE_ERRORS = (SyntaxError, RecursionError, MemoryError, ValueError, OverflowError)


def _interpreter(ast: Any) -> Callable[[Any], Any]:
    def interpret(data: Any) -> Any:
        return _INTERPRETER.visit(ast, data)

    return interpret


def _build(
    ast: dict[str, Any], field_types: Mapping[str, str] | None, *, optimistic: bool = True
) -> tuple[Callable[[Any], Any], str, Callable[[CompiledExpression], None]]:
    """Compile ``ast``: (evaluator, source, a hook to call with the CompiledExpression).

    The optimistic evaluator falls back, on the first AttributeError, to guarded code compiled
    then (once), and from then on the expression's ``search`` is the guarded code: expressions
    that meet nulls (or lists ...) where they read fields pay the guards, the others do not.
    """
    if not optimistic:
        evaluate, source = _Codegen(field_types).build(ast)
        return evaluate, source, lambda expression: None
    state: dict[str, Any] = {}

    def deoptimize(data: Any) -> Any:
        guarded = state.get("guarded")
        if guarded is None:
            try:
                guarded, _source = _Codegen(field_types).build(ast)
            except _COMPILE_ERRORS:  # pragma: no cover - the optimistic code compiled
                guarded = _interpreter(ast)
            state["guarded"] = guarded
            expression = state.get("expression")
            if expression is not None:
                object.__setattr__(expression, "search", guarded)
                object.__setattr__(expression, "_evaluate", guarded)
        return guarded(data)

    evaluate, source = _Codegen(field_types, optimistic=True).build(ast, deoptimize)

    def settle(expression: CompiledExpression) -> None:
        state["expression"] = expression

    return evaluate, source, settle


# --------------------------------------------------------------------------------------------
# Root paths.
# --------------------------------------------------------------------------------------------

_Chains = tuple[tuple[str, ...], ...]


def root_paths(ast: Mapping[str, Any]) -> list[tuple[str, ...]]:
    """Every chain of field names the expression reads from the root document.

    ``work_item.kind == 'x' && contains(labels, 'y')`` gives ``[("work_item", "kind"),
    ("labels",)]``. Only maximal chains are listed (``work_item.kind`` implies ``work_item``), in
    order of first appearance. Fields read relative to projected elements (``labels[?@ == 'x']``,
    ``items[*].name``, ``*.x``, ``&name`` in ``sort_by(items, &name)``) are not root paths; a
    pipe's right side reads the left side's result, so ``work_item | kind`` reads
    ``("work_item", "kind")`` while ``items[0] | name`` reads only ``("items",)``. Either operand
    of ``||`` and any argument of ``not_null`` can be the value, so ``(a || b).c`` reads
    ``("a", "c")`` and ``("b", "c")``; ``(a && b).c`` reads ``("a",)`` and ``("b", "c")`` (a
    falsy ``a``, the only one ``&&`` returns, has no fields to read).
    """
    found: dict[tuple[str, ...], None] = {}

    def union(*chains: _Chains) -> _Chains:
        merged: dict[tuple[str, ...], None] = {}
        for group in chains:
            merged.update(dict.fromkeys(group))
        return tuple(merged)

    def walk(node: Mapping[str, Any], cur: _Chains) -> _Chains:
        kind = node["type"]
        children = node.get("children", [])
        if kind == "field":
            out = tuple((*chain, node["value"]) for chain in cur)
            found.update(dict.fromkeys(out))
            return out
        if kind in ("subexpression", "index_expression", "pipe"):
            result = cur
            for child in children:
                result = walk(child, result)
            return result
        if kind in ("current", "identity"):
            return cur
        if kind in ("index", "slice", "literal"):
            return ()
        if kind in ("projection", "value_projection"):
            walk(children[0], cur)
            walk(children[1], ())
            return ()
        if kind == "filter_projection":
            walk(children[0], cur)
            walk(children[1], ())
            walk(children[2], ())
            return ()
        if kind == "expref":
            walk(children[0], ())
            return ()
        if kind == "or_expression":  # either operand can be the value
            return union(walk(children[0], cur), walk(children[1], cur))
        if kind == "and_expression":  # the left operand is the value only when it is falsy,
            walk(children[0], cur)  # and then nothing can be read from it
            return walk(children[1], cur)
        if kind == "key_val_pair":
            return walk(children[0], cur)
        if kind == "function_expression":
            results = [walk(child, cur) for child in children]
            return union(*results) if node["value"] == "not_null" else ()
        # comparator, not_expression, multi_select_*, flatten and anything new: the node's
        # value is not a field chain, but its children are read relative to the same node.
        for child in children:
            if isinstance(child, Mapping):
                walk(child, cur)
        return ()

    walk(ast, ((),))
    paths = [path for path in found if path]
    return [
        path
        for path in paths
        if not any(len(other) > len(path) and other[: len(path)] == path for other in paths)
    ]
