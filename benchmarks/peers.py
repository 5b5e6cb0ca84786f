"""The benchmark's rules written for two peers, measured in the same run: OPA's Go engine and CEL.

Each peer gets the rules of `policy.rules_yaml` in its own language and the same facts, and
must produce the same prompt prefix; load is adding and preparing the rules, a call is one
evaluation of all of them on one context. A peer that is not installed is a row that says
how to install it, never a stored figure (issue 33).

- OPA: `opa-golib-python-bindings` (OPA's Go engine in process, through ctypes). It declares
  Python >= 3.14 but runs on 3.11: `pip install --ignore-requires-python
  'opa-golib-python-bindings>=0.4,<1'`.
- CEL: `common-expression-language` (cel-rust through PyO3), in the `bench` extra; one
  compiled program per rule, as a Kubernetes ValidatingAdmissionPolicy holds its
  expressions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

OPA_INSTALL = "pip install --ignore-requires-python 'opa-golib-python-bindings>=0.4,<1'"
CEL_INSTALL = "pip install 'common-expression-language>=0.10,<1' (the bench extra)"


def label_of(i: int) -> str:
    return "loop" if i % 10 == 0 else f"team-{i}"


def facts_of(ctx: Any) -> dict[str, Any]:
    """The facts the rules read, as the JSON a peer is given."""
    return {"work_item": {"repository": ctx.work_item.repository}, "labels": list(ctx.labels),
            "prompt": ctx.prompt}


def rego_of(n: int) -> str:
    """The rules in Rego: each rule a key of one object (keys sort in rule order), the prefix
    their values joined in key order, as the YAML policy composes prefixes in rule order."""
    lines = ["package bench", "import rego.v1", ""]
    for i in range(n):
        lines += [
            f'matched["{i:06d}"] := "[{i}] " if {{',
            '    input.work_item.repository == "acme/app"',
            f'    "{label_of(i)}" in input.labels',
            "}",
        ]
    lines += ["", 'prefix := concat("", [v | some k; v := matched[k]])', ""]
    return "\n".join(lines)


class Opa:
    """OPA's engine with the n rules added and prepared (the first evaluation prepares)."""

    def __init__(self, n: int, facts: dict[str, Any]) -> None:
        from opa_bindings import OpaEngine

        self.engine = OpaEngine()
        self.engine.add_policy("bench.rego", rego_of(n))
        self.prefix = self.engine.eval_document("bench.prefix", input=facts)

    def call(self, facts: dict[str, Any]) -> str:
        prefix: str = self.engine.eval_document("bench.prefix", input=facts)
        return prefix

    def close(self) -> None:
        self.engine.close()


class Cel:
    """The n rules as n compiled CEL programs; a call runs each on one context."""

    def __init__(self, n: int, facts: dict[str, Any]) -> None:
        import cel

        self.context_of: Callable[[dict[str, Any]], Any] = cel.Context
        self.rules = [
            (cel.compile(f"work_item.repository == 'acme/app' && '{label_of(i)}' in labels"),
             f"[{i}] ")
            for i in range(n)
        ]
        self.prefix = self.call(facts)

    def call(self, facts: dict[str, Any]) -> str:
        context = self.context_of(facts)
        return "".join(prefix for program, prefix in self.rules if program.execute(context))

    def close(self) -> None:
        self.rules = []


PEERS: dict[str, tuple[type[Opa] | type[Cel], str, str]] = {
    "OPA (Go engine)": (Opa, "opa_bindings", OPA_INSTALL),
    "CEL (cel-rust)": (Cel, "cel", CEL_INSTALL),
}


def missing(module: str) -> bool:
    """True when the peer's module is absent; else it is imported (and OPA's library loaded)
    now, so a first load's import is not counted as the peer's load."""
    import importlib
    import importlib.util

    if importlib.util.find_spec(module) is None:
        return True
    importlib.import_module(module)
    if module == "opa_bindings":
        from opa_bindings import OpaEngine

        OpaEngine().close()
    return False
