"""Every JMESPath example in docs/ and the README is compiled against the catalog, so a field
that does not exist (`work_item.draft`) cannot come back (issue 15, item 10)."""

from __future__ import annotations

import importlib.util
import re
import shutil
from pathlib import Path

import pytest
import yaml

from the_loop.hooks.engine.points import POINTS, SPECS, WORK_ITEM_FIELDS
from the_loop.hooks.executors.policy import load_policy
from the_loop.hooks.policy.checks import check_fields
from the_loop.hooks.policy.expressions import compile_expression
from the_loop.hooks.policy.typecheck import type_problems
from the_loop.jmes import root_paths

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RECORDS = [f.name for f in SPECS["session_spawn"].fields if f.type == "WorkItem"]


def problems_everywhere(text: str) -> list[str]:
    """[] when `text` reads only catalog fields, well typed, at some point; else the
    problems it has at each point."""
    ast = compile_expression(text).ast
    seen: list[str] = []
    for point in POINTS:
        found = check_fields(root_paths(ast), (point,), text) or [
            m for _, m in type_problems(ast, point, when=False)]
        if not found:
            return []
        seen += [f"{point}: {m}" for m in found]
    return seen


def rule_blocks() -> list[tuple[str, str]]:
    out = []
    for page in PAGES:
        for block in re.findall(r"```yaml\n(.*?)```", page.read_text("utf-8"), re.S):
            if "\nrules:" in "\n" + block:
                out.append((page.name, block))
    return out


@pytest.mark.parametrize(("page", "block"), rule_blocks())
def test_every_rule_example_in_the_docs_loads_against_the_catalog(
    tmp_path: Path, page: str, block: str
) -> None:
    shutil.copytree(ROOT / "policies" / "data", tmp_path / "data")  # what examples read
    (tmp_path / "rules.yaml").write_text(block, "utf-8")
    load_policy("docs", tmp_path)  # raises PolicyError naming each problem


def test_every_condition_the_docs_benchmark_shows_is_a_valid_rule() -> None:
    spec = importlib.util.spec_from_file_location(
        "bench_jmes", ROOT / "benchmarks" / "jmespath_compiler.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    guide = (ROOT / "docs" / "policy-guide.md").read_text("utf-8")
    for text, _ in module.POLICY:
        assert problems_everywhere(text) == [], text
        assert text[:40].replace("|", "\\|") in guide, f"{text!r} is not in the guide's table"


def test_every_record_field_the_docs_name_exists() -> None:
    """`work_item.x` / `endpoint.x` anywhere in a page (prose, tables, code) names a real field;
    lines that show an error message about a misspelt field are the exception."""
    pattern = re.compile(rf"\b({'|'.join(RECORDS)})\.([a-z_]+)\b")
    bad = []
    for page in PAGES:
        if page.name == "any-loop.md":  # another project's wire names, mapped onto ours
            continue
        for n, line in enumerate(page.read_text("utf-8").splitlines(), 1):
            if "did you mean" in line:
                continue
            for record, name in pattern.findall(line):
                if name not in WORK_ITEM_FIELDS and not name.endswith("yaml"):
                    bad.append(f"{page.name}:{n}: {record}.{name}")
    assert bad == []


def test_the_readme_example_config_declares_a_policy_whose_example_rule_loads() -> None:
    blocks = re.findall(r"```yaml\n(.*?)```", (ROOT / "README.md").read_text("utf-8"), re.S)
    config = next(yaml.safe_load(b) for b in blocks if b.startswith("# cli-config.yaml"))
    assert [h["policy"] for h in config["hooks"] if "policy" in h] == ["policies"]
