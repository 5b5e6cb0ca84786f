"""One record per policy function (issue 21 part 2): an incomplete record fails at once, naming
what it lacks, and every other form of a function (the reference interpreter's method, the
compiler's spec, the documented signature, `policy check`'s messages) is derived from it."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import jmespath
import pytest
from jmespath.visitor import Options

from the_loop.cli import main
from the_loop.hooks.policy.functions import (
    POLICY_FUNCTION_RECORDS,
    POLICY_FUNCTION_SPECS,
    POLICY_FUNCTIONS,
    Param,
    PolicyFunction,
    PolicyFunctions,
    lower,
)

WORDS = {"string": "a string", "number": "a number", "array": "a list"}
COMPLETE: dict[str, Any] = {
    "name": "shout", "params": (Param("subject", ("string",)),), "returns": ("string",),
    "handler": lower, "description": "the subject, shouted.", "example": "shout(actor)",
}


def test_a_complete_record_builds_and_its_signature_text_is_generated() -> None:
    record = PolicyFunction(**COMPLETE)
    assert record.signature == "shout(string $subject) -> string"
    two = dataclasses.replace(record, params=(Param("pattern", ("string", "array-string")),
                                              Param("subject", ("string",))),
                              returns=("boolean", "null"), handler=lambda a, b: None)
    assert two.signature == "shout(string|array-string $pattern, string $subject) -> boolean|null"


@pytest.mark.parametrize(("change", "named"), [
    ({"description": ""}, "description is missing"),
    ({"description": "   "}, "description is missing"),
    ({"params": (Param("subject", ()),)}, "parameter subject needs JMESPath types"),
    ({"params": (Param("subject", ("text",)),)}, "parameter subject needs JMESPath types"),
    ({"params": (Param("", ("string",)),)}, "parameter 1 has no name"),
    ({"returns": ()}, "returns needs JMESPath types"),
    ({"returns": ("str",)}, "returns needs JMESPath types"),
    ({"example": "lower(actor)"}, "example 'lower(actor)' does not call shout()"),
    ({"handler": lambda: None}, "handler takes 0 argument(s), the record declares 1"),
    ({"name": "Shout"}, "is not a lower-case identifier"),
])
def test_an_incomplete_record_fails_naming_what_it_lacks(
    change: dict[str, Any], named: str
) -> None:
    with pytest.raises(ValueError, match="policy function") as info:
        PolicyFunction(**{**COMPLETE, **change})
    assert named in str(info.value)


@pytest.mark.parametrize("record", POLICY_FUNCTION_RECORDS, ids=lambda r: r.name)
def test_every_form_of_a_function_is_its_record(record: PolicyFunction) -> None:
    declared = PolicyFunctions.FUNCTION_TABLE[record.name]["signature"]
    assert [tuple(arg["types"]) for arg in declared] == [p.types for p in record.params]
    spec = POLICY_FUNCTION_SPECS[record.name]
    assert spec.arg_types == tuple(p.types for p in record.params)
    assert spec.returns == record.returns and spec.impl is record.handler
    assert POLICY_FUNCTIONS[record.name] == (record.signature, record.description,
                                             record.example)
    assert record.signature.startswith(f"{record.name}(") and "$" in record.signature
    args = ["'a'"] * len(record.params)
    call = f"{record.name}({', '.join(args)})"
    options = Options(custom_functions=PolicyFunctions())
    assert jmespath.search(call, {}, options=options) == record.handler(*["a"] * len(args))


def _check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
           when: str) -> str:
    where = tmp_path / "policies"
    where.mkdir(exist_ok=True)
    (where / "rules.yaml").write_text(
        "rules:\n  - name: r\n    on: session_spawn\n    when: \"" + when.replace('"', '\\"')
        + "\"\n    set: {proceed: false}\n", "utf-8")
    monkeypatch.chdir(tmp_path)
    assert main(["policy", "check", "policies"]) == 1
    return capsys.readouterr().err


@pytest.mark.parametrize("record", POLICY_FUNCTION_RECORDS, ids=lambda r: r.name)
def test_policy_check_words_a_bad_call_from_the_record(
    record: PolicyFunction, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    arity = len(record.params)
    many = ", ".join(["actor"] * (arity + 1))
    err = _check(tmp_path, monkeypatch, capsys, f"{record.name}({many}) == 'x'")
    assert f"calls {record.name}() with {arity + 1} argument(s) at column 1; it takes {arity}" \
        in err
    misspelt = record.name[:-1]
    err = _check(tmp_path, monkeypatch, capsys, f"{misspelt}({many}) == 'x'")
    assert f"calls unknown function {misspelt}()" in err
    assert f"did you mean {record.name}()?" in err
    listed = err.split("Functions: ", 1)[1].splitlines()[0].split(", ")
    assert {r.name for r in POLICY_FUNCTION_RECORDS} <= set(listed)
    args = ", ".join(["labels"] + ["actor"] * (arity - 1))
    err = _check(tmp_path, monkeypatch, capsys, f"{record.name}({args}) == 'x'")
    want = " or ".join(WORDS[t] for t in record.params[0].types)
    assert f"but {record.name}() takes {want} there, so every call fails" in err
