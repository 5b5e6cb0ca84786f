"""A compiler from JMESPath expressions to Python functions, exact to the specification.

It stands alone: it knows JMESPath and nothing of policies; a caller passes its own functions
in (``Compiler(functions)``, each a ``FunctionSpec``). Read it in this order, one file a phase:

1. ``api.py``: the entry point (``Compiler``, ``CompiledExpression``, ``compile_stats``):
   parse with the ``jmespath`` package, check function names and arities, generate, or fall
   back to the reference; optimistic code and its guarded twin.
2. ``jtypes.py``: the type lattice: the JMESPath types a value may have (``jtypes(STR, NULL)``).
3. ``ir.py``: the intermediate representation: a compiled value (``Val``: Python code and its
   jtypes) inside a generated function (``Fn``); ``NODE_TYPES``, every node type the parser builds.
4. ``emitter.py``: ``Emitter``, which walks the AST and writes Python source, and ``NODES``,
   the one dispatch table from node type to node compiler; then the node compilers themselves:
   ``nodes.py`` (fields, comparisons, logic, projections) and ``calls.py`` (function calls).
5. ``library.py``: the functions an expression may call (built-ins plus ``FunctionSpec``s),
   in every form the phases need.
6. ``helpers.py``: the run-time helpers generated code calls (``_f_length`` ...), and
   ``semantics.py``, JMESPath's equality, ordering, truth and type checks, which every
   evaluator shares.
7. ``reference.py``: the corrected reference interpreter, the fallback for what the emitter
   does not handle.
8. ``batch.py``: many expressions over one typed root object in one function
   (``compile_matcher``, ``compile_value``: the policy executor's hot path).
9. ``paths.py``: ``root_paths``, the root field chains an expression reads (load-time checks).
"""

from __future__ import annotations

from the_loop.jmes.api import (
    CompiledExpression,
    Compiler,
    compile_expression,
    compile_stats,
)
from the_loop.jmes.ir import NODE_TYPES
from the_loop.jmes.jtypes import FIELD_TYPES
from the_loop.jmes.library import FunctionSpec
from the_loop.jmes.paths import root_paths

__all__ = [
    "FIELD_TYPES",
    "NODE_TYPES",
    "CompiledExpression",
    "Compiler",
    "FunctionSpec",
    "compile_expression",
    "compile_stats",
    "root_paths",
]
