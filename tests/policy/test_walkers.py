"""Every walker over a JMESPath AST dispatches by table, and every table has one entry per node
type the parser can produce (issue 21 part 4): a new node type is one entry in each table, and
this test names the walkers that still lack it."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import jmespath.ast
import pytest

from the_loop.hooks.policy.exprtext import SHOW, show
from the_loop.hooks.policy.growth import GROWTH, growth
from the_loop.hooks.policy.typecheck import INFER, T, type_problems
from the_loop.jmes import NODE_TYPES
from the_loop.jmes.jtypes import NUM, jtypes
from the_loop.jmes.nodes import NODES

#: Each walker over the AST, by the name a reader finds it under, and its dispatch table.
WALKERS: dict[str, Mapping[str, Any]] = {
    "the emitter (the_loop.jmes.nodes.NODES)": NODES,
    "the type checker (hooks.policy.typecheck.INFER)": INFER,
    "the growth bound (hooks.policy.growth.GROWTH)": GROWTH,
    "the expression printer (hooks.policy.exprtext.SHOW)": SHOW,
}


def parser_node_types() -> set[str]:
    """The `type` of every node jmespath's parser builds (each built by a `jmespath.ast`
    function, called here with placeholder arguments)."""
    out = set()
    for _, build in inspect.getmembers(jmespath.ast, inspect.isfunction):
        if build.__module__ == jmespath.ast.__name__:
            node = build(*[None] * len(inspect.signature(build).parameters))
            out.add(node["type"])
    return out


def lacking(walkers: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One line per walker whose table misses a node type or has one the parser never builds."""
    out = []
    for walker, table in walkers.items():
        missing, extra = sorted(NODE_TYPES - set(table)), sorted(set(table) - NODE_TYPES)
        if missing:
            out.append(f"{walker} has no entry for {', '.join(missing)}")
        if extra:
            out.append(f"{walker} has an entry for {', '.join(extra)}, not a node type")
    return out


def test_the_compilers_node_set_is_every_node_type_the_parser_produces() -> None:
    assert parser_node_types() == NODE_TYPES, (
        "jmespath's parser changed its node types: update the_loop.jmes.NODE_TYPES, then "
        "give every walker an entry for the new ones"
    )


def test_every_walker_has_one_entry_per_node_type() -> None:
    assert lacking(WALKERS) == []


@pytest.mark.parametrize("walker", list(WALKERS))
def test_a_walker_without_a_node_type_is_named_with_the_type(walker: str) -> None:
    table = {k: v for k, v in WALKERS[walker].items() if k != "pipe"}
    assert lacking({walker: table}) == [f"{walker} has no entry for pipe"]
    table = {**WALKERS[walker], "lambda": None}
    assert lacking({walker: table}) == [f"{walker} has an entry for lambda, not a node type"]


def _parsed(text: str) -> Any:
    return jmespath.compile(text).parsed


def test_show_dispatches_through_its_table(monkeypatch: pytest.MonkeyPatch) -> None:
    assert show(_parsed("a == `1`")) == "a == `1`"
    monkeypatch.setitem(SHOW, "literal", lambda node, children: "<lit>")
    assert show(_parsed("a == `1`")) == "a == <lit>"


def test_growth_dispatches_through_its_table(monkeypatch: pytest.MonkeyPatch) -> None:
    assert growth(_parsed("[a, b]")) == 2
    monkeypatch.setitem(GROWTH, "field", lambda node, grown: 5)
    assert growth(_parsed("[a, b]")) == 10


def test_infer_dispatches_through_its_table(monkeypatch: pytest.MonkeyPatch) -> None:
    ast = _parsed("lower(actor)")
    assert type_problems(ast, "session_spawn", when=False) == []
    monkeypatch.setitem(INFER, "field", lambda checker, node, cur: T(jtypes(NUM)))
    [(sub, message)] = type_problems(ast, "session_spawn", when=False)
    assert sub == "lower(actor)" and "actor (a number) as its first argument" in message
