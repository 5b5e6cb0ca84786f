"""The entry point: ``Compiler(functions)`` compiles JMESPath expressions to Python functions.

``Compiler.compile_expression(text)`` parses ``text`` with the ``jmespath`` package's parser (with
the specification's function-argument grammar: ``parsing.py``) and turns its
AST into the source of one Python function, compiled with ``compile()``/``exec``. The generated
code mirrors ``jmespath.visitor.TreeInterpreter`` node by node (same evaluation order, same null
propagation, same errors) and specialises where the outcome is provably the same: a comparison with
a string literal is a plain ``==``, ``length(x)`` is ``len(x)`` once ``x`` is known to be a
``str``/``list``/``dict``, and so on. A typical policy condition runs 30-90 times faster than the
interpreter and within about 1-2.5 times hand-written Python (``benchmarks/jmespath_compiler.py``).

Two things keep it fast:

* field reads are optimistic (``value.get(key)`` without a type test); the first time a value
  has no ``get`` (null, a list ...) the evaluation is redone by guarded code, which the
  expression then keeps using (see ``Emitter`` and ``Compiler._build``);
* literals and field names are globals of the generated code, not part of its source, so
  expressions of the same shape (``work_item.kind == 'a'``, ``work_item.ref == 'b'``) share one
  code object (``emitter.CODE_CACHE``): compiling a policy costs little more than parsing it.

The functions an expression may call are JMESPath's built-ins plus those the caller passes in
(``Compiler(functions)``, each a ``library.FunctionSpec``); ``compile_expression`` is the
compiler with the built-ins only. ``Compiler.compile_matcher``/``compile_value`` compile many
expressions over one typed root object into one function (``batch.py``).

Where the ``jmespath`` package (1.1.0) disagrees with the JMESPath specification, the compiler
follows the specification (see ``docs/jmespath-divergences.md``):

* function arguments are separated by commas (``parsing.SpecParser``): the package parses
  ``contains(labels 'x')`` as two arguments and ``f(a,)`` as one;
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

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, cast

from jmespath import exceptions

from the_loop.jmes import batch
from the_loop.jmes.emitter import Emitter
from the_loop.jmes.ir import Node, Unsupported
from the_loop.jmes.jtypes import FIELD_TYPES
from the_loop.jmes.library import FunctionSpec, Library
from the_loop.jmes.nodes import NODES
from the_loop.jmes.parsing import SpecParser

__all__ = [
    "COMPILE_ERRORS", "CompiledExpression", "Compiler", "compile_expression", "compile_stats",
]


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
        self._settle(evaluate, compiled, fallback_reason, source)

    def _settle(
        self, evaluate: Callable[[Any], Any], compiled: bool, fallback_reason: str, source: str
    ) -> None:
        setter = object.__setattr__
        setter(self, "compiled", compiled)
        setter(self, "fallback_reason", fallback_reason)
        setter(self, "source", source)
        setter(self, "_evaluate", evaluate)
        # Shadow the method with the evaluator itself: one Python call less per evaluation.
        setter(self, "search", evaluate)

    def __getattr__(self, name: str) -> Any:
        """A lazy expression (``compile_expression(lazy=True)``) generates its code when one of
        ``compiled``, ``fallback_reason``, ``source`` is first read (or on its first search)."""
        generate = self.__dict__.get("_generate")
        if generate is None or name.startswith("__"):
            raise AttributeError(name)
        generate()
        try:
            return self.__dict__[name]
        except KeyError:
            raise AttributeError(name) from None

    def search(self, data: Any) -> Any:
        """Evaluate the expression against ``data`` (a JSON-like value)."""
        evaluate: Callable[[Any], Any] = self._evaluate  # generated now if lazy
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


def _check_functions(node: Mapping[str, Any], table: Mapping[str, Any]) -> None:
    """Unknown functions and wrong arities, in the order the reference would meet them."""
    for child in node.get("children", ()):
        if isinstance(child, Mapping):
            _check_functions(child, table)
    if node.get("type") != "function_expression":
        return
    name = node["value"]
    try:
        spec = table[name]
    except KeyError:
        raise exceptions.UnknownFunctionError(f"Unknown function: {name}()") from None
    declared = spec["signature"]
    actual = len(node["children"])
    if declared and declared[-1].get("variadic"):
        if actual < len(declared):
            raise exceptions.VariadictArityError(len(declared), actual, name)
    elif actual != len(declared):
        raise exceptions.ArityError(len(declared), actual, name)


#: What compiling generated code may raise; the expression then falls back to the reference.
COMPILE_ERRORS = (SyntaxError, RecursionError, MemoryError, ValueError, OverflowError)
_LAZY_LOCK = threading.Lock()


class Compiler:
    """Compiles expressions that may call JMESPath's built-ins and ``functions``."""

    def __init__(self, functions: Iterable[FunctionSpec] = ()) -> None:
        self.library = Library(functions)

    def compile_expression(
        self,
        text: str,
        *,
        field_types: Mapping[str, str] | None = None,
        reference: bool = False,
        lazy: bool = False,
        rewrite: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> CompiledExpression:
        """Parse and compile a JMESPath expression.

        Parse errors are jmespath's own (``ParseError``, ``LexerError``,
        ``IncompleteExpressionError``, ``EmptyExpressionError``); unknown functions and wrong
        arities raise ``UnknownFunctionError`` / ``ArityError`` here, at compile time.
        ``reference=True`` evaluates with the (corrected) reference interpreter instead of
        generated code. ``lazy=True`` parses and checks now but generates the code on first
        use (for an expression that usually runs inside a ``compile_matcher`` function
        instead); it is counted in ``compile_stats()`` then.

        ``field_types`` maps root field names to ``"str"``, ``"bool"``, ``"int"``,
        ``"list[str]"`` or ``"object"``. It is a promise about the root document: each named
        field is either missing or null, or holds a value of that type. The compiler uses it
        only for specialisations that hold for every such value: Python's truth for a
        non-``int`` field (``if kind:``), a plain ``==`` or ``is`` for a ``str``/``bool``
        field, ``x in list`` for ``contains`` of a ``str`` field, and ``null`` without a test
        for an ordering comparison of a ``str``/``bool`` field. Reading a field of an
        ``"object"`` field stays guarded, so a broken promise there gives ``null``.

        ``rewrite`` is given the parsed AST and returns the AST to compile (a new tree: the
        parsed one is shared with the parser's cache); a caller replaces reads of values it
        knows at compile time with literals this way, and may raise to refuse the expression.

        The returned expression is optimistic (see ``Emitter`` and ``_build``).
        """
        for field, declared in (field_types or {}).items():
            if declared not in FIELD_TYPES:
                raise ValueError(
                    f"field_types[{field!r}]: unknown type {declared!r}; "
                    f"use one of {sorted(FIELD_TYPES)}"
                )
        parsed = SpecParser().parse(text)
        ast = cast("dict[str, Any]", parsed.parsed)
        if rewrite is not None:
            ast = rewrite(ast)
        _check_functions(ast, self.library.table)
        expression: CompiledExpression = object.__new__(CompiledExpression)
        object.__setattr__(expression, "text", text)
        object.__setattr__(expression, "ast", ast)
        if not lazy or reference:
            self._generate(expression, field_types, reference)
            return expression

        def generate() -> None:
            with _LAZY_LOCK:
                if "_generate" in expression.__dict__:
                    self._generate(expression, field_types, reference)
                    del expression.__dict__["_generate"]

        def first_search(data: Any) -> Any:
            generate()
            return expression.search(data)

        object.__setattr__(expression, "_generate", generate)
        object.__setattr__(expression, "search", first_search)
        return expression

    def compile_matcher(
        self, conditions: Sequence[batch.Condition], root: batch.RootType, *,
        collect_errors: bool = False,
    ) -> Callable[[Any], Any]:
        """``batch.compile_matcher`` with this compiler's functions."""
        return batch.compile_matcher(
            conditions, root, self.library, collect_errors=collect_errors
        )

    def compile_value(
        self, ast: Node, root: batch.RootType, search: Callable[[Any], Any]
    ) -> Callable[[Any], Any]:
        """``batch.compile_value`` with this compiler's functions."""
        return batch.compile_value(ast, root, search, self.library)

    def _generate(
        self, expression: CompiledExpression, field_types: Mapping[str, str] | None,
        reference: bool,
    ) -> None:
        """Generate ``expression``'s evaluator (or fall back to the reference) and count it."""
        ast = expression.ast
        reason = "reference interpreter requested" if reference else ""
        if not reference:
            try:
                evaluate, source, settle = self._build(ast, field_types)
            except Unsupported as exc:
                reason = str(exc)
            except COMPILE_ERRORS as exc:
                reason = f"generated code did not compile: {type(exc).__name__}: {exc}"
            else:
                _count("compiled")
                expression._settle(evaluate, True, "", source)
                settle(expression)
                return
        _count("reference" if reference else "fallback")
        expression._settle(self.library.reference.evaluator(ast), False, reason, "")

    def _build(
        self, ast: dict[str, Any], field_types: Mapping[str, str] | None, *,
        optimistic: bool = True,
    ) -> tuple[Callable[[Any], Any], str, Callable[[CompiledExpression], None]]:
        """Compile ``ast``: (evaluator, source, a hook to call with the CompiledExpression).

        The optimistic evaluator falls back, on the first AttributeError, to guarded code
        compiled then (once), and from then on the expression's ``search`` is the guarded code:
        expressions that meet nulls (or lists ...) where they read fields pay the guards, the
        others do not.
        """
        library = self.library
        if not optimistic:
            evaluate, source = Emitter(library, NODES, field_types).build(ast)
            return evaluate, source, lambda expression: None
        state: dict[str, Any] = {}

        def deoptimize(data: Any) -> Any:
            guarded = state.get("guarded")
            if guarded is None:
                try:
                    guarded, _source = Emitter(library, NODES, field_types).build(ast)
                except COMPILE_ERRORS:  # pragma: no cover - the optimistic code compiled
                    guarded = library.reference.evaluator(ast)
                state["guarded"] = guarded
                expression = state.get("expression")
                if expression is not None:
                    object.__setattr__(expression, "search", guarded)
                    object.__setattr__(expression, "_evaluate", guarded)
            return guarded(data)

        optimistic_code = Emitter(library, NODES, field_types, optimistic=True)
        evaluate, source = optimistic_code.build(ast, deoptimize)

        def settle(expression: CompiledExpression) -> None:
            state["expression"] = expression

        return evaluate, source, settle


#: The compiler with JMESPath's built-in functions only.
BUILTINS = Compiler()
compile_expression = BUILTINS.compile_expression
