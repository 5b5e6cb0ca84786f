"""The corrected reference interpreter: the fallback for what the compiler does not handle.

``jmespath``'s ``TreeInterpreter`` with the policy functions, whose comparisons and functions
(``contains``, ``to_number``, ``max_by``/``min_by``, ``merge``) are those of ``semantics.py``:
an expression the compiler cannot handle evaluates here and gives exactly what generated code
would. ``FUNCTION_TABLE`` is the table of every function a policy expression may call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jmespath.functions import signature
from jmespath.visitor import Options, TreeInterpreter

from the_loop.hooks.policy.functions import PolicyFunctions
from the_loop.hooks.policy.jmes.semantics import (
    ORDERING_OPS,
    contains,
    eq,
    is_num,
    merge,
    minmax_by,
    to_number,
)

__all__ = ["FUNCTION_TABLE", "interpreter"]

_STRING: Any = {"types": ["string"]}
_ANY_TYPE: Any = {"types": []}


class _SpecFunctions(PolicyFunctions):
    """Built-ins + policy functions, with the package's divergences from the spec corrected."""

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


_FUNCTIONS = _SpecFunctions()
FUNCTION_TABLE: dict[str, Any] = _SpecFunctions.FUNCTION_TABLE
_INTERPRETER = _SpecInterpreter(Options(custom_functions=_FUNCTIONS))


def interpreter(ast: Any) -> Callable[[Any], Any]:
    """An evaluator of the parsed ``ast`` on the corrected reference interpreter."""

    def interpret(data: Any) -> Any:
        return _INTERPRETER.visit(ast, data)

    return interpret
