"""A compiler from JMESPath expressions to Python functions, exact to the specification.

Modules, each with one concern: ``api`` (``compile_expression``, ``CompiledExpression``,
``compile_stats``), ``paths`` (``root_paths``), ``semantics`` (equality, ordering, truth, type
checks), ``runtime`` (the helpers generated code calls), ``reference`` (the corrected reference
interpreter, used as the fallback), ``values`` (kinds and the codegen's value records), and the
code generator in three layers: ``base`` (plumbing), ``calls`` (function calls), ``codegen``
(the node compilers). ``batch`` compiles many expressions over one typed root object into one
function (the policy executor's hot path).
"""

from __future__ import annotations

from the_loop.hooks.policy.jmes.api import CompiledExpression, compile_expression, compile_stats
from the_loop.hooks.policy.jmes.paths import root_paths
from the_loop.hooks.policy.jmes.values import FIELD_TYPES

__all__ = [
    "FIELD_TYPES",
    "CompiledExpression",
    "compile_expression",
    "compile_stats",
    "root_paths",
]
