"""`the-loop hooks schema`: one JSON Schema for cli-config.yaml, fitting every example in the docs.

The schema is derived from the same descriptions the loader checks with, so an example the
docs show passes both, and a broken config fails both. Checked with `jsonschema`, a real
draft 2020-12 validator.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from the_loop import yamlsafe
from the_loop.cli import main
from the_loop.config import TOP_LEVEL_KEYS, read_config
from the_loop.config_schema import CONFIG, config_schema
from the_loop.errors import ConfigError
from the_loop.hooks.declaring.declaration import parse_hooks
from the_loop.runtime.graph import parse_graph
from the_loop.runtime.settings import settings_of

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def yaml_examples() -> list[tuple[str, Any]]:
    """Every ```yaml block of the README and docs/, read as the loop reads YAML."""
    out: list[tuple[str, Any]] = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for n, block in enumerate(re.findall(r"```ya?ml\n(.*?)```", text, re.S)):
            out.append((f"{doc.name}#{n}", yamlsafe.load(block)))
    return out


EXAMPLES = [(w, d) for w, d in yaml_examples()
            if isinstance(d, dict) and set(d) <= set(TOP_LEVEL_KEYS)]
GRAPHS = [(w, d) for w, d in yaml_examples() if isinstance(d, dict) and "nodes" in d]


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = config_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def loader_accepts(data: dict[str, Any], folder: Path) -> bool:
    """What the loop itself says of `data` written as cli-config.yaml."""
    path = folder / "cli-config.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    try:
        config = read_config(path)
        parse_hooks(config.data.get("hooks"), folder)
        settings_of(config)
    except ConfigError:
        return False
    return True


def test_hooks_schema_prints_the_whole_config_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["hooks", "schema"]) == 0
    assert json.loads(capsys.readouterr().out) == config_schema()


def test_the_schema_describes_every_top_level_key_and_no_other() -> None:
    assert list(CONFIG.fields) == list(TOP_LEVEL_KEYS)
    assert config_schema()["additionalProperties"] is False


def test_the_docs_hold_config_examples_of_every_runtime_key() -> None:
    keys = {k for _, data in EXAMPLES for k in data}
    assert len(EXAMPLES) >= 8
    assert keys == set(TOP_LEVEL_KEYS)


@pytest.mark.parametrize(("where", "data"), EXAMPLES, ids=[w for w, _ in EXAMPLES])
def test_every_config_example_in_the_docs_fits_the_schema_and_the_loader(
    validator: jsonschema.Draft202012Validator, where: str, data: dict[str, Any],
    tmp_path: Path,
) -> None:
    errors = [e.message for e in validator.iter_errors(data)]
    assert errors == [], where
    assert loader_accepts(data, tmp_path), where


INVALID: list[dict[str, Any]] = [
    {"hook": []},
    {"tracker": {"kind": "jira"}},
    {"tracker": {"repository": "no-slash"}},
    {"harnesses": [{"name": "Big", "command": ["x"]}]},
    {"harnesses": [{"name": "a"}]},
    {"harnesses": [{"name": "a", "command": ["x"], "env": ["$HOME"]}]},
    {"channels": [{"kind": "smoke"}]},
    {"channels": [{"kind": "webhook", "url": "ftp://h.example/"}]},
    {"serve": {"port": 8080}},
    {"serve": {"tokens": {"alice": "not a name"}}},
    {"decisionLog": {"keepDays": 0}},
    {"graph": ""},
    {"hooks": [{"name": "a", "url": "http://hooks.localhost/"}]},
    {"hooks": [{"name": "a", "module": "m", "tokenEnv": "T"}]},
]


@pytest.mark.parametrize("data", INVALID, ids=lambda d: json.dumps(d)[:50])
def test_a_broken_config_fails_the_schema_and_the_loader(
    validator: jsonschema.Draft202012Validator, data: dict[str, Any], tmp_path: Path
) -> None:
    assert not validator.is_valid(data)
    assert not loader_accepts(data, tmp_path)


@pytest.mark.parametrize(("where", "data"), GRAPHS, ids=[w for w, _ in GRAPHS])
def test_every_graph_example_in_the_docs_loads(where: str, data: dict[str, Any]) -> None:
    assert parse_graph(data, where).nodes
