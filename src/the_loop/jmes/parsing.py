"""The parser: the ``jmespath`` package's, with the function-argument grammar of the spec.

The specification writes a call as ``name "(" function-arg *( "," function-arg ) ")"``: the
arguments are separated by commas, and a comma is always followed by another argument. The
package's parser (1.1.0) treats each comma as optional, so ``contains(labels 'base:main')``
parses as a call with two arguments and ``f(a,)`` as a call with one. ``SpecParser`` refuses
both with ``ArgumentSeparatorError`` (a ``ParseError``), which names the token and carries the
corrected expression when one is obvious (``fix``). Everything else is the package's parser;
the JMESPath compliance suite runs against this one (tests/policy/test_jmespath_compiler.py).
"""

from __future__ import annotations

from typing import Any, ClassVar

from jmespath import ast
from jmespath.exceptions import ParseError
from jmespath.parser import Parser

__all__ = ["ArgumentSeparatorError", "SpecParser"]


class ArgumentSeparatorError(ParseError):
    """A call whose arguments are not separated by single commas. ``reason`` says what is
    wrong in words; ``fix`` is the expression with the comma put in ("" when none is)."""

    def __init__(self, token: dict[str, Any], reason: str, fix: str = "") -> None:
        super().__init__(token["start"], token["value"], token["type"], reason)
        self.reason = reason
        self.fix = fix


class SpecParser(Parser):
    """``jmespath.parser.Parser`` with commas required between function arguments.

    (The package's type stubs leave out the parser's private methods, which the Pratt loop
    calls by name; `me` is `self` typed as `Any` to reach them.)
    """

    # Its own cache: the package's class-level one may hold an AST the package accepted.
    _CACHE: ClassVar[dict[str, Any]] = {}

    def _token_led_lparen(self, left: dict[str, Any]) -> Any:
        me: Any = self
        if left["type"] != "field":
            return getattr(super(), "_token_led_lparen")(left)  # raises: not a name  # noqa: B009
        name = left["value"]
        args: list[Any] = []
        while me._current_token() != "rparen":
            args.append(me._expression())
            token = me._lookahead_token(0)
            if token["type"] in ("rparen", "eof"):
                break  # `)`, or the end: `_match` below says the call is incomplete
            if token["type"] != "comma":
                before = me._lookahead_token(-1)
                raise ArgumentSeparatorError(
                    token,
                    f"expected ',' before {_shown(token)}: the arguments of {name}() are "
                    "separated by commas",
                    self._expression_text[:before["end"]] + ","
                    + self._expression_text[before["end"]:],
                )
            me._match("comma")
            if me._current_token() == "rparen":
                raise ArgumentSeparatorError(
                    token, f"a ',' in {name}() must be followed by another argument",
                    self._expression_text[:token["start"]]
                    + self._expression_text[token["end"]:],
                )
        me._match("rparen")
        return ast.function_expression(name, args)

    def _do_parse(self, expression: str) -> Any:
        self._expression_text = expression
        return getattr(super(), "_do_parse")(expression)  # noqa: B009


def _shown(token: dict[str, Any]) -> str:
    token_type, value = token["type"], token["value"]
    if token_type == "literal" and isinstance(value, str):
        return repr(value)
    if token_type == "eof":
        return "the end"
    return f"{value!r}" if value not in (None, "") else token_type
