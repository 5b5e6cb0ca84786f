"""The functions an expression may call: JMESPath's built-ins plus the caller's own.

A caller passes its functions in as ``FunctionSpec``s (``Compiler(functions)``); ``Library``
holds them in every form the compiler needs: the function table (names and signatures, for the
compile-time checks and the emitter), the corrected reference interpreter with those functions
(``reference.py``), and the names generated code runs with (``helpers.py``: one ``_pf_<name>``
per function, its signature's type checks in front of its implementation).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from jmespath.functions import Functions, signature

from the_loop.jmes.helpers import HELPERS
from the_loop.jmes.reference import Reference
from the_loop.jmes.semantics import check_type

__all__ = ["FunctionSpec", "Library"]


@dataclass(frozen=True)
class FunctionSpec:
    """One function besides the built-ins, as the compiler sees it.

    ``arg_types`` holds one tuple of JMESPath type names per declared parameter (``()`` means
    any type), as in a ``jmespath.functions.signature`` declaration; ``variadic`` means the last
    parameter repeats (that many arguments or more), otherwise exactly that many are required.
    ``returns`` lists the JMESPath types the function can return. ``impl`` is the plain
    implementation: it expects arguments that already passed the type check.

    Two optional facts let the emitter inline a call: ``str_method`` names the ``str`` method a
    one-argument string function is (``"lower"``); ``pattern_matcher`` is for a function
    ``f(pattern, subject) -> boolean``: given a literal pattern it returns ``m`` such that, for a
    string subject, ``f(pattern, subject)`` is ``m(subject) is not None`` (None for a pattern
    ``f`` rejects: the call then raises when evaluated, as without it).
    """

    name: str
    arg_types: tuple[tuple[str, ...], ...]
    variadic: bool
    returns: tuple[str, ...]
    impl: Callable[..., Any]
    str_method: str | None = None
    pattern_matcher: Callable[[str], Callable[[str], Any] | None] | None = None


class Library:
    """JMESPath's built-in functions plus ``functions``, in every form the compiler needs."""

    def __init__(self, functions: Iterable[FunctionSpec] = ()) -> None:
        self.extra: Mapping[str, FunctionSpec] = {spec.name: spec for spec in functions}
        clash = sorted(set(self.extra) & set(Functions.FUNCTION_TABLE))
        if clash:
            raise ValueError(f"{', '.join(clash)}: the name of a built-in function")
        self.reference = Reference({f"_func_{s.name}": _method(s) for s in self.extra.values()})
        #: name -> {"signature": [{"types": [...], "variadic"?: bool}, ...], ...}: every function.
        self.table: Mapping[str, Any] = self.reference.function_table
        #: The globals every generated function starts from.
        self.helpers: dict[str, Any] = {
            **HELPERS, **{f"_pf_{name}": _checked(spec) for name, spec in self.extra.items()}
        }


def _checked(spec: FunctionSpec) -> Callable[..., Any]:
    """``spec``'s function with the reference's argument type checks in front of it."""
    checks = [(i, types) for i, types in enumerate(spec.arg_types) if types]
    impl = spec.impl
    name = spec.name

    def call(*args: Any) -> Any:
        for i, types in checks:
            check_type(args[i], types, name)
        return impl(*args)

    call.__name__ = f"_pf_{name}"
    return call


def _method(spec: FunctionSpec) -> Callable[..., Any]:
    """``spec`` as a ``jmespath.functions.Functions`` method for the reference interpreter:
    its signature checked by jmespath, then ``impl``."""
    declared: list[Any] = [{"types": list(types)} for types in spec.arg_types]
    if spec.variadic:
        declared[-1]["variadic"] = True
    impl = spec.impl

    @signature(*declared)
    def method(self: Any, *args: Any) -> Any:
        return impl(*args)

    return method
