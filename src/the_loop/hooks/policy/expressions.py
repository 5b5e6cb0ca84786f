"""Compiles a policy's JMESPath expressions: the one place jmespath's errors become ours.

`COMPILER` is the standalone compiler (`jmes.Compiler`) given the policy functions
(`functions.POLICY_FUNCTION_SPECS`); every policy expression, condition matcher and template
is compiled by it. `compile_policy_expression` wraps its `compile_expression` (which speaks
jmespath's own exception classes, as a JMESPath implementation should) and converts
each of them, once, into an `ExpressionError` carrying the reason, the column and the details
as data; `checks.describe_compile_error` words it. Two load checks of issue 11 rule 6 live
here too: a pattern given to `regex_match` or `glob_match` as a literal is compiled, so one
RE2 refuses is a load error, not a failure on the first work item; and an expression that
can build values more than `growth.MAX_GROWTH` times the size of what it reads is refused.
Nothing else is caught: a bug of ours in the compiler stays a bug, never a user's "syntax error".
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from jmespath import exceptions as jmes_errors

from the_loop.errors import ExpressionError
from the_loop.hooks.policy.functions import (
    POLICY_FUNCTION_SPECS,
    InvalidValueError,
    glob,
    regex,
)
from the_loop.hooks.policy.growth import MAX_GROWTH, worst
from the_loop.jmes import CompiledExpression, Compiler
from the_loop.jmes.parsing import ArgumentSeparatorError

#: The compiler of policy expressions: JMESPath's built-ins plus the policy functions.
COMPILER = Compiler(POLICY_FUNCTION_SPECS.values())
#: `COMPILER.compile_expression`: jmespath's own errors (`compile_policy_expression` converts).
compile_expression = COMPILER.compile_expression


def compile_policy_expression(
    text: str,
    *,
    field_types: Mapping[str, str] | None = None,
    reference: bool = False,
    lazy: bool = False,
    rewrite: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> CompiledExpression:
    """`compile_expression(text, …)`; raises `ExpressionError` for anything wrong with `text`.

    `rewrite` (see `Compiler.compile_expression`) may raise `ExpressionError` itself: the
    policy data does so for a name the data does not hold.
    """
    try:
        compiled = compile_expression(
            text, field_types=field_types, reference=reference, lazy=lazy, rewrite=rewrite
        )
    except jmes_errors.JMESPathError as exc:
        raise _convert(exc, text) from None
    except RecursionError:  # jmespath's parser recurses once per nesting level
        raise ExpressionError(
            "too-deep", "nests too deeply to parse; flatten the parentheses or brackets",
        ) from None
    grows = worst(compiled.ast)
    if grows > MAX_GROWTH:
        raise ExpressionError(
            "too-costly",
            f"can build values {grows if grows < MAX_GROWTH * 1024 else 'over ' + str(grows)} "
            f"times the size of what it reads (at most {MAX_GROWTH}): each `[@, @]` in a "
            "pipe doubles it; compare or count the parts instead of repeating them",
        )
    for function, pattern, column in _literal_patterns(compiled.ast, text):
        try:
            PATTERNS[function](pattern)
        except InvalidValueError as exc:
            raise ExpressionError(
                "bad-regex", str(exc).removeprefix(f"In function {function}(), "),
                column=column, function=function,
            ) from None
    return compiled


def _convert(exc: jmes_errors.JMESPathError, text: str) -> ExpressionError:
    """jmespath's exception as an `ExpressionError` (subclasses tested before their bases)."""
    position = getattr(exc, "lex_position", None)
    column = position + 1 if isinstance(position, int) else 0
    if isinstance(exc, jmes_errors.EmptyExpressionError):
        return ExpressionError("empty", "is empty")
    if isinstance(exc, jmes_errors.IncompleteExpressionError):
        return ExpressionError("incomplete", "is incomplete", column=len(text) + 1)
    if isinstance(exc, jmes_errors.LexerError):
        detail = str(getattr(exc, "message", "") or "unknown token")
        return ExpressionError("lexer", detail, column=column or 1, detail=detail)
    if isinstance(exc, (jmes_errors.VariadictArityError, jmes_errors.ArityError)):
        reason = "variadic-arity" if isinstance(exc, jmes_errors.VariadictArityError) else "arity"
        expected, got = getattr(exc, "expected_arity", None), getattr(exc, "actual_arity", None)
        return ExpressionError(
            reason, str(exc), function=str(getattr(exc, "function_name", "")),
            expected=expected if isinstance(expected, int) else None,
            got=got if isinstance(got, int) else None,
        )
    if isinstance(exc, jmes_errors.UnknownFunctionError):
        return ExpressionError("unknown-function", str(exc), detail=str(exc))
    if isinstance(exc, ArgumentSeparatorError):  # before ParseError, its base
        detail = exc.reason + (f"; write {exc.fix}" if exc.fix else "")
        return ExpressionError("syntax", detail, column=column or 1, detail=detail)
    if isinstance(exc, jmes_errors.ParseError):
        token = getattr(exc, "token_value", None)
        detail = f"unexpected {token!r}" if token not in (None, "") else "unexpected token"
        if str(getattr(exc, "token_type", "")).lower() == "number":
            detail = (f"unexpected number {token}; a number literal takes backquotes in "
                      f"JMESPath: `{token}`")
        return ExpressionError("syntax", detail, column=column or 1, detail=detail)
    return ExpressionError("syntax", str(exc), detail=str(exc))


#: The functions whose first argument is a pattern, and how each compiles it.
PATTERNS = {"regex_match": regex, "glob_match": glob}


def pattern_calls(ast: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any], Any]]:
    """(function, call node, its pattern argument or None) for each `regex_match` or
    `glob_match` call in `ast`, left to right."""
    stack: list[Any] = [ast]
    while stack:
        node = stack.pop()
        if not isinstance(node, Mapping):
            continue
        children = node.get("children") or []
        function = node.get("value")
        if node.get("type") == "function_expression" and function in PATTERNS:
            yield function, node, children[0] if children else None
        stack.extend(reversed([c for c in children if isinstance(c, Mapping)]))


def is_text(node: Any) -> bool:
    """Whether `node` is a string literal."""
    return isinstance(node, Mapping) and node.get("type") == "literal" and isinstance(
        node.get("value"), str)


def _literal_patterns(ast: Mapping[str, Any], text: str) -> Iterator[tuple[str, str, int]]:
    """(function, pattern, column) for each pattern function call whose pattern is a string
    literal."""
    for function, _call, pattern in pattern_calls(ast):
        if is_text(pattern):
            yield function, pattern["value"], text.find(function) + 1


__all__ = ["COMPILER", "compile_expression", "compile_policy_expression"]
