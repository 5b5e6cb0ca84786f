"""The corrected reference interpreter: the fallback for what the compiler does not handle.

``jmespath``'s ``TreeInterpreter`` with the caller's functions (``library.py``), whose
comparisons and functions (``contains``, ``to_number``, ``max_by``/``min_by``, ``merge``) are
those of ``semantics.py``: an expression the compiler cannot handle evaluates here and gives
exactly what generated code would. ``Reference.function_table`` is the table of every function
an expression may call.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from jmespath.functions import Functions, signature
from jmespath.visitor import Options, TreeInterpreter

from the_loop.jmes.semantics import (
    ORDERING_OPS,
    contains,
    eq,
    is_num,
    merge,
    minmax_by,
    to_number,
)

__all__ = ["Reference"]

_ANY_TYPE: Any = {"types": []}


class _SpecFunctions(Functions):
    """The built-ins, with the package's divergences from the specification corrected."""

    @signature({"types": ["array", "string"]}, _ANY_TYPE)
    def _func_contains(self, subject: Any, search: Any) -> bool:
        return contains(subject, search)

    @signature(_ANY_TYPE)
    def _func_to_number(self, arg: Any) -> Any:
        return to_number(arg)

    @signature({"types": ["array"]}, {"types": ["expref"]})
    def _func_max_by(self, array: list[Any], expref: Any) -> Any:
        return minmax_by(
            "max_by", array, lambda x: expref.visit(expref.expression, x), maximum=True
        )

    @signature({"types": ["array"]}, {"types": ["expref"]})
    def _func_min_by(self, array: list[Any], expref: Any) -> Any:
        return minmax_by(
            "min_by", array, lambda x: expref.visit(expref.expression, x), maximum=False
        )

    @signature({"types": ["object"], "variadic": True})
    def _func_merge(self, *arguments: Any) -> dict[Any, Any]:
        return merge(arguments)


class _SpecInterpreter(TreeInterpreter):
    """``TreeInterpreter`` with the specification's comparison semantics."""

    def visit_comparator(self, node: Any, value: Any) -> Any:
        children = node["children"]
        left = self.visit(children[0], value)
        right = self.visit(children[1], value)
        op = node["value"]
        if op == "eq":
            return eq(left, right)
        if op == "ne":
            return not eq(left, right)
        if is_num(left) and is_num(right):
            return ORDERING_OPS[op](left, right)
        return None


class Reference:
    """The corrected reference interpreter with the built-ins and ``methods``: the caller's
    functions as ``Functions`` methods (``_func_<name>``, with a ``signature``)."""

    def __init__(self, methods: Mapping[str, Callable[..., Any]]) -> None:
        # Functions' metaclass builds FUNCTION_TABLE from the `_func_` methods when called.
        registry: Any = type(Functions)
        cls = registry("_LibraryFunctions", (_SpecFunctions,), dict(methods))
        self.function_table: dict[str, Any] = cls.FUNCTION_TABLE
        self._interpreter = _SpecInterpreter(Options(custom_functions=cls()))

    def evaluator(self, ast: Any) -> Callable[[Any], Any]:
        """An evaluator of the parsed ``ast``."""
        visit = self._interpreter.visit

        def interpret(data: Any) -> Any:
            return visit(ast, data)

        return interpret
