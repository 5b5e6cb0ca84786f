"""The policy engine's JMESPath compiler, by its historical name: re-exports ``policy.jmes``.

``compile_expression(text)`` turns a JMESPath expression into a Python function with the
specification's exact results (see ``the_loop.hooks.policy.jmes.api`` for how, and
``docs/jmespath-divergences.md`` for where that differs from the ``jmespath`` package).
"""

from __future__ import annotations

from the_loop.hooks.policy.jmes import (
    FIELD_TYPES,
    CompiledExpression,
    compile_expression,
    compile_stats,
    reference_options,
    root_paths,
)

__all__ = [
    "FIELD_TYPES",
    "CompiledExpression",
    "compile_expression",
    "compile_stats",
    "reference_options",
    "root_paths",
]
