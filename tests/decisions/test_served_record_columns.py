"""The columns beside a served record kept as received match those of the record built from
the same call, for the refs and rule lists its flat path treats apart (issue 32, item 5).

Real policy folders answer real request bytes through `handle_request`; each call's row is
made both ways and read back by the reader replay and the console use.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from serving_helpers import SPAWN_RULES
from the_loop.decisions.layout import ITEM_KEY_MAX, item_key, recorded
from the_loop.decisions.masking import Masker
from the_loop.decisions.served import ServedRecords
from the_loop.hooks.serving.hosted import policy_executor
from the_loop.hooks.serving.jsonrpc import CallRecord, handle_request


def _body(ref: str, labels: list[str]) -> bytes:
    params = {"labels": labels, "prompt": "build the page",
              "work_item": {"ref": ref, "number": 7}}
    return json.dumps({"jsonrpc": "2.0", "method": "session_spawn", "params": params,
                       "id": 7}).encode()


def _call(tmp_path: Path, body: bytes) -> CallRecord:
    folder = tmp_path / "rules"
    folder.mkdir(exist_ok=True)
    (folder / "rules.yaml").write_text(SPAWN_RULES, encoding="utf-8")
    heard: list[CallRecord] = []
    handle_request(policy_executor(folder), body, on_call=heard.append)
    assert len(heard) == 1 and heard[0].context is not None
    return heard[0]


@pytest.mark.parametrize("ref", [
    "github:acme/app#7",
    "github:acme/app#7\u0000x",  # a NUL (written \\u0000: built, not kept as received)
    "github:acme/app#" + "9" * (ITEM_KEY_MAX + 40),  # past the key's bound: hashed
    "github:acme/app#" + "9" * (ITEM_KEY_MAX - 16),  # exactly at the bound: kept whole
], ids=["plain", "nul", "long", "at-the-bound"])
@pytest.mark.parametrize("labels", [[], ["frozen"], ["draft"], ["frozen", "draft"]],
                         ids=["no-rule", "enforced", "audit", "both"])
def test_a_row_kept_as_received_has_the_columns_of_the_row_built_from_it(
        tmp_path: Path, ref: str, labels: list[str]) -> None:
    """Item key, rules and refused columns agree, and both read back as one point."""
    body = _body(ref, labels)
    call = _call(tmp_path, body)
    records = ServedRecords(Masker())
    kept = records.row(1.0, call)
    built = records._built(1.0, call)
    assert ('"request":' in kept[3]) is (b"\\u" not in body)
    assert '"request":' not in built[3]
    assert kept[2] == item_key(ref)
    assert kept[:3] == built[:3] and kept[4:] == built[4:]
    assert recorded((3, *kept[:4])) == recorded((3, *built[:4]))


def test_the_rules_column_names_each_rule_with_its_mode(tmp_path: Path) -> None:
    """An enforced and an audit rule both matched: one line each, hook, rule and mode."""
    call = _call(tmp_path, _body("github:acme/app#7", ["frozen", "draft"]))
    row: Any = ServedRecords(Masker()).row(1.0, call)
    assert row[5] == "policy\tfrozen\te\npolicy\twatch-drafts\ta"
    assert row[6] == 1
