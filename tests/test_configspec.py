"""The config toolkit: one description gives the checks, path-aware messages and a JSON Schema."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from the_loop.configspec import (
    ENV_PATTERN,
    NAME,
    Bool,
    DictOf,
    Enum,
    Field,
    Invalid,
    KindOf,
    ListOf,
    Mapping,
    Number,
    Problem,
    Str,
    Tagged,
    const,
)


def _no_twins(items: list[dict[str, Any]], _ctx: object) -> list[dict[str, Any]]:
    names = [i["name"] for i in items]
    for index, name in enumerate(names):
        if name in names[:index]:
            raise Problem(f"{name!r} is listed twice", index, "name")
    return items


ITEM = Mapping(expected="a mapping with name", fields={
    "name": Field(NAME, required="every item needs a name"),
    "size": Field(Number(above=0, maximum=10, expected="a size in (0, 10]"), default=1),
    "tags": Field(ListOf(item=Str(pattern=ENV_PATTERN, expected="a tag"), single=True),
                  default=list),
    "on": Field(Bool(), default=True),
})
SECTION = Mapping(fields={
    "items": Field(ListOf(item=ITEM, then=(_no_twins,), expected="a list of items"),
                   required="list the items"),
    "mode": Field(Enum(values=("fast", "slow")), default="fast"),
    "env": Field(DictOf(key=Str(pattern=ENV_PATTERN, expected="a variable name"), value=Str(),
                        nullable=True, expected="a mapping of variable to value"),
                 default=dict),
    "sink": Field(KindOf(expected="{kind: file, path: P} or {kind: null}", variants={
        "file": Mapping(fields={"kind": Field(const("file")), "path": Field(Str())}),
        "null": Mapping(fields={"kind": Field(const("null"))}),
    })),
    "source": Field(Tagged(noun="source", expected="a mapping with one of git, dir", fields={},
                           variants={"git": {"git": Field(Str()), "ref": Field(Str())},
                                     "dir": {"dir": Field(Str())}})),
})


def problems(value: Any) -> list[tuple[str, str]]:
    return [(p.where, p.message) for p in SECTION.collect(value)[1]]


def test_a_good_value_comes_back_checked_with_defaults_filled_in() -> None:
    checked = SECTION.check({"items": [{"name": "a", "tags": "X"}], "env": None,
                             "source": {"git": "g"}})
    assert checked == {"items": [{"name": "a", "size": 1.0, "tags": ["X"], "on": True}],
                       "mode": "fast", "env": {}, "source": {"git": "g", "kind": "git"}}


def test_collect_reports_every_problem_of_a_mapping_in_field_order() -> None:
    assert problems({"itms": [], "mode": "fsat", "env": {"A": 1}}) == [
        ("itms", "unknown key (did you mean 'items'?). Allowed keys: items, mode, env, sink, "
                 "source"),
        ("items", "missing; list the items"),
        ("mode", "expected fast or slow, got 'fsat' (str) (did you mean 'fast'?)"),
        ("env", "A: expected a string, got 1 (int)"),
    ]


def test_a_problem_deep_in_a_list_names_the_path_to_it() -> None:
    assert problems({"items": [{"name": "a"}, {"name": "b", "size": 11}]}) == [
        ("items[1].size", "expected a size in (0, 10], got 11 (int)")]
    assert problems({"items": [{"name": "a", "tags": ["ok", "no way"]}]}) == [
        ("items[0].tags[1]", "expected a tag, got 'no way' (str)")]


def test_a_named_post_check_reports_below_the_value_it_checked() -> None:
    assert problems({"items": [{"name": "a"}, {"name": "a"}]}) == [
        ("items[1].name", "'a' is listed twice")]


def test_a_tagged_mapping_needs_exactly_one_tag_and_only_that_tags_keys() -> None:
    base = {"items": [{"name": "a"}]}
    assert problems({**base, "source": {}}) == [
        ("source.git/dir", "expected exactly one of git, dir; got none")]
    assert problems({**base, "source": {"dir": "d", "ref": "main"}}) == [
        ("source.ref", "not allowed on a dir source (keys for a dir source: none)")]


def test_a_kind_picks_the_description_of_the_rest() -> None:
    base = {"items": [{"name": "a"}]}
    assert problems({**base, "sink": {"kind": "pipe"}}) == [
        ("sink", "expected {kind: file, path: P} or {kind: null}, got {'kind': 'pipe'} (dict)")]
    assert problems({**base, "sink": {"kind": "null", "path": "p"}})[0][0] == "sink.path"


def test_check_raises_the_first_problem_with_its_path() -> None:
    with pytest.raises(Invalid) as info:
        SECTION.check({"items": "a"})
    assert (info.value.where, info.value.message) == (
        "items", "expected a list of items, got 'a' (str)")


VALUES: list[Any] = [
    {"items": [{"name": "a"}]},
    {"items": [{"name": "a", "size": 10, "tags": "T", "on": False}], "mode": "slow"},
    {"items": [], "env": {"A": "1"}, "sink": {"kind": "file", "path": "p"}},
    {"items": [], "sink": {"kind": "null"}, "source": {"git": "g", "ref": "r"}},
    {"items": [{"name": "A"}]},
    {"items": [{"name": "a", "size": 0}]},
    {"items": [{"name": "a", "size": True}]},
    {"items": [{"name": "a", "tags": ["x y"]}]},
    {"items": [{"name": "a", "on": "yes"}]},
    {"items": [], "mode": "medium"},
    {"items": [], "env": {"1A": "x"}},
    {"items": [], "sink": {"kind": "file", "path": 3}},
    {"items": [], "source": {"git": "g", "dir": "d"}},
    {"items": [], "source": {"dir": "d", "ref": "r"}},
    {"mode": "fast"},
    {"items": [], "extra": 1},
]


@pytest.mark.parametrize("value", VALUES)
def test_the_derived_json_schema_accepts_exactly_what_the_check_accepts(value: Any) -> None:
    """Cross-item rules (`then=`) aside, the schema and the check agree on every value."""
    schema = SECTION.json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert jsonschema.Draft202012Validator(schema).is_valid(value) == (problems(value) == [])
