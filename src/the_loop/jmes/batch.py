"""Many expressions over one typed root object, compiled into one Python function: the hot path.

A policy evaluates every condition of a point against the same context. ``compile_matcher``
turns all of them into one generated function that

* reads each root field chain the conditions use once, straight from the root *object*
  (``ctx.work_item.repository``, no JSON view of the context), after checking that each record
  it reads from has the exact class ``RootType`` promised (otherwise it returns None and the caller
  evaluates the JSON view instead);
* evaluates the conditions in order with JMESPath's truth, each exactly as ``compile_expression``
  would on the JSON view (same code generator; a root field read becomes the value read once);
* returns the tags of the conditions that hold.

Nothing is written anywhere, so no condition can see another's effects. A condition that raises
stops the function with ``ConditionFailed(tag, error)``, or, with ``collect_errors``, is recorded
and skipped. A condition the code generator does not handle runs its ``fallback`` (the
reference interpreter) on the JSON view, built only when some condition needs it.
``compile_value`` does the same for one expression and returns its value (templates).
"""

from __future__ import annotations

import bisect
import keyword
import re
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from typing import Any, NamedTuple

from the_loop.jmes.emitter import Emitter
from the_loop.jmes.ir import Fn, Node, Unsupported, Val
from the_loop.jmes.jtypes import ANY, BOOL, K_ARR, K_NUM, K_OBJ, K_STR, JTypes, jtypes
from the_loop.jmes.library import Library
from the_loop.jmes.nodes import NODES
from the_loop.jmes.semantics import truthy

__all__ = [
    "Condition", "ConditionFailed", "RecordType", "RootType", "compile_matcher", "compile_value",
]

_ROOT = "_view"  # the JSON view of the root, in generated code (assigned only when used)
_USES_ROOT = re.compile(r"\b_view\b")
#: The exact class of each field type, checked once per call, and the jtypes it then proves.
_CLASSES = {"str": "str", "bool": "bool", "int": "int", "list[str]": "list"}
_JTYPES: dict[str, JTypes] = {"str": K_STR, "bool": jtypes(BOOL), "int": K_NUM, "list[str]": K_ARR}


class RecordType(NamedTuple):
    """A record-typed field (a frozen dataclass): its exact class, attribute types, JSON view."""

    cls: type
    fields: Mapping[str, str]  # attribute → "str" | "bool" | "int" | "list[str]"
    to_json: Callable[[Any], Any]


class RootType(NamedTuple):
    """The root object: its fields (a field type, or a ``RecordType``) and its whole JSON view."""

    fields: Mapping[str, str | RecordType]
    to_json: Callable[[Any], Any]


class Condition(NamedTuple):
    """One condition: its AST (None: always true), its tag, and the evaluator to fall back to."""

    ast: Mapping[str, Any] | None
    tag: Any
    fallback: Callable[[Any], Any] | None = None


class ConditionFailed(Exception):
    """The condition tagged ``tag`` raised ``error`` while being evaluated."""

    def __init__(self, tag: Any, error: Exception) -> None:
        super().__init__(tag, error)
        self.tag = tag
        self.error = error


class _Batch:
    """One function of the root object: the ``Emitter``'s code over root field chains read once.

    The emitter compiles each expression as usual; ``bind`` gives it, for each root field chain,
    a local read once in the prologue (``ctx.work_item.ref``) whose class is checked there.
    """

    def __init__(
        self, root: RootType, library: Library, *, on_mismatch: str = "return None"
    ) -> None:
        field_types = {
            name: "object" if isinstance(declared, RecordType) else declared
            for name, declared in root.fields.items()
        }
        self.gen = Emitter(
            library, NODES, field_types, inline_literals=True, bind=self.bind
        )
        self.library = library
        self.root = root
        self.on_mismatch = on_mismatch
        self.main = Fn("_jp_batch", "ctx")
        self.prologue: list[str] = []  # the field reads, each followed by its class check
        self.bound: dict[tuple[str, ...], Val] = {}
        self.spans: list[tuple[int, int, Any]] = []  # body lines of each condition, and its tag

    def bind(self, path: tuple[str, ...], fn: Fn) -> tuple[Val, int] | None:
        if fn is not self.main:  # hoisted helpers and expression references see only the view
            return None
        head = path[0]
        declared = self.root.fields.get(head)
        if declared is None or not _attribute(head):
            return None
        if not isinstance(declared, RecordType):
            return self.read((head,), f"ctx.{head}", declared), 1
        record = self.record(head, declared)
        if len(path) > 1 and path[1] in declared.fields and _attribute(path[1]):
            return self.read(path[:2], f"{record}.{path[1]}", declared.fields[path[1]]), 2
        to_json = self.gen.global_("_json", declared.to_json)
        return self.read((head,), f"{to_json}({record})", "object"), 1

    def record(self, head: str, declared: RecordType) -> str:
        found = self.bound.get(("<record>", head))
        if found is None:
            cls = self.gen.global_("_cls", declared.cls)
            found = self.bound[("<record>", head)] = self.checked(f"ctx.{head}", cls, K_OBJ)
        return found.code

    def read(self, path: tuple[str, ...], code: str, declared: str) -> Val:
        found = self.bound.get(path)
        if found is None:
            if declared == "object":  # the JSON view of a record: a dict, nothing to check
                var = self.gen.name("_p")
                self.prologue.append(f"{var} = {code}")
                found = Val(var, K_OBJ)
            else:
                found = self.checked(code, _CLASSES[declared], _JTYPES[declared])
            self.bound[path] = found
        return found

    def checked(self, code: str, cls: str, may_be: JTypes) -> Val:
        """A value read once, first thing, whose class is checked: its jtypes are then exact."""
        var = self.gen.name("_p")
        self.prologue += [f"{var} = {code}", f"if {var}.__class__ is not {cls}:",
                          f"    {self.on_mismatch}"]
        return Val(var, may_be)

    def condition(self, condition: Condition, collect_errors: bool) -> None:
        """Append ``condition`` to the main function: ``hits.append(tag)`` when it holds.

        With ``collect_errors`` each condition has its own ``try``; otherwise one ``try`` holds
        them all (a third of the compile time) and ``spans`` tells which one raised.
        """
        fn = self.main
        tag = self.gen.global_("_tag", condition.tag)
        first = len(fn.lines)
        if condition.ast is None:
            fn.emit(f"hits.append({tag})")
            return
        self.gen.reset_locals()
        mark, defs = len(fn.lines), len(self.gen.defs)
        try:
            with fn.block("try:") if collect_errors else nullcontext():
                value = self.gen.expr(condition.ast, Val(_ROOT, ANY, root=True), fn)
                with fn.block(f"if {self.gen.truth(value, fn)}:"):
                    fn.emit(f"hits.append({tag})")
        except Unsupported:
            if condition.fallback is None:
                raise
            del fn.lines[mark:], self.gen.defs[defs:]
            fallback = self.gen.global_("_fallback", condition.fallback)
            guard = fn.block("try:") if collect_errors else nullcontext()
            with guard, fn.block(f"if _truthy({fallback}({_ROOT})):"):
                fn.emit(f"hits.append({tag})")
        if collect_errors:
            with fn.block("except Exception as exc:"):
                fn.emit(f"errors.append(({tag}, exc))")
        else:
            self.spans.append((first, len(fn.lines), condition.tag))

    def value(self, ast: Mapping[str, Any]) -> None:
        """The main function returns the value of ``ast`` (``_search`` if unsupported)."""
        fn = self.main
        try:
            value = self.gen.expr(ast, Val(_ROOT, ANY, root=True), fn)
            fn.emit(f"result = {value.code}")
        except Unsupported:
            del fn.lines[:]
            fn.emit(f"result = _search({_ROOT})")

    def function(
        self, start: list[str], result: str, *, guard_all: bool = False
    ) -> Callable[[Any], Any]:
        """Compile the main function: prologue (field reads and checks, in a ``try`` whose
        failure is a mismatch), ``start``, the body (in one ``try`` if ``guard_all``)."""
        body = self.main.lines
        guard_all = guard_all and bool(body)
        lines: list[str] = []
        if self.prologue:
            lines += ["try:", *("    " + line for line in self.prologue),
                      "except Exception:", f"    {self.on_mismatch}"]
        if any(_USES_ROOT.search(line) for line in body):
            lines.append(f"{_ROOT} = _root_json(ctx)")
        lines += start
        if guard_all:
            lines.append("try:")
        head = [*"\n".join(self.gen.defs).splitlines(), "def _jp_batch(ctx):"]
        offset = len(head) + len(lines) + 1  # the line number of body[0]
        if guard_all:
            body = [*body, "    except Exception as exc:",
                    "        raise _ConditionFailed(_which(exc), exc) from None"]
        source = "\n".join([*head, *("    " + line for line in lines), *body,
                            f"    return {result}", ""])
        spans = [(offset + first, offset + end, tag) for first, end, tag in self.spans]
        namespace: dict[str, Any] = {
            **self.library.helpers, **self.gen.globals,
            "_truthy": truthy, "_root_json": self.root.to_json,
            "_ConditionFailed": ConditionFailed, "_which": _which_of(spans),
        }
        exec(compile(source, "<jmespath batch>", "exec"), namespace)
        function: Callable[[Any], Any] = namespace["_jp_batch"]
        function.__doc__ = source  # for a reader debugging a policy: help(matcher)
        return function


def _which_of(spans: list[tuple[int, int, Any]]) -> Callable[[BaseException], Any]:
    """The tag of the condition whose lines hold the line that raised ``exc`` in the main
    function (the first frame of its traceback: the exception was caught there)."""
    starts = [first for first, _, _ in spans]

    def which(exc: BaseException) -> Any:
        tb = exc.__traceback__
        line = tb.tb_lineno if tb is not None else 0
        i = bisect.bisect_right(starts, line) - 1
        if i < 0 or not spans[i][0] <= line < spans[i][1]:  # pragma: no cover - by construction
            raise RuntimeError(f"no condition at line {line} of the generated matcher") from exc
        return spans[i][2]

    return which


def _attribute(name: str) -> bool:
    return name.isidentifier() and not keyword.iskeyword(name) and not name.startswith("__")


_BUILTINS = Library()


def compile_matcher(
    conditions: Sequence[Condition],
    root: RootType,
    library: Library = _BUILTINS,
    *,
    collect_errors: bool = False,
) -> Callable[[Any], Any]:
    """One function of the root object evaluating ``conditions`` in order.

    It returns the list of the tags whose condition holds, or None when a record field of the
    root is not of its declared class (evaluate the JSON view instead). A condition that raises
    stops it with ``ConditionFailed(tag, error)``; with ``collect_errors`` it returns
    ``(tags, [(tag, error), ...])`` instead and goes on with the next condition. Raises
    ``Unsupported`` when a condition without a fallback cannot be compiled, or what ``compile``
    raises (``SyntaxError``, ``RecursionError`` ...) for a program too big for CPython.
    """
    gen = _Batch(root, library)
    if not collect_errors:
        gen.main.depth = 2  # inside the one `try:` around every condition
    for condition in conditions:
        gen.condition(condition, collect_errors)
    if collect_errors:
        return gen.function(["hits = []", "errors = []"], "(hits, errors)")
    return gen.function(["hits = []"], "hits", guard_all=True)


def compile_value(
    ast: Node, root: RootType, search: Callable[[Any], Any], library: Library = _BUILTINS
) -> Callable[[Any], Any]:
    """One function of the root object returning the value of ``ast``.

    ``search`` evaluates ``ast`` on the JSON view (a ``CompiledExpression.search``): it runs
    instead when the code generator cannot handle ``ast``, or when a record field of the root is
    not of its declared class, so the value is always exact.
    """
    gen = _Batch(root, library, on_mismatch="return _search(_root_json(ctx))")
    gen.gen.globals["_search"] = search
    gen.value(ast)
    return gen.function([], "result")
