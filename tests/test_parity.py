"""R1.4 / R2.5 parity: the catalog, LifecycleHooks, the SDK exports and docs/ agree.

Adding a point to the catalog without a LifecycleHooks method, an SDK export and a
regenerated docs/points.md fails one of these tests.
"""

from __future__ import annotations

import importlib.util
import inspect
import re
import subprocess
import sys
import typing
from pathlib import Path
from types import ModuleType

import pytest

from the_loop.hooks.engine.executor import LifecycleHooks
from the_loop.hooks.engine.points import CONTEXT_CLASSES, POINTS, SPECS, Context, point_doc

ROOT = Path(__file__).resolve().parent.parent
FIXED_POINTS = [
    "work_item_start", "session_spawn", "session_spawned", "waiting_for_input",
    "input_received", "phase_changed", "work_item_complete",
]
FIXED_DECISIONS = {"proceed", "reason", "prompt", "announce", "question", "summary", "notify",
                   "text"}


def gen_docs() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts" / "gen_docs.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_r1_1_the_catalog_is_the_seven_named_points_in_lifecycle_order() -> None:
    assert list(POINTS) == FIXED_POINTS
    assert list(SPECS) == FIXED_POINTS
    assert [cls.POINT for cls in CONTEXT_CLASSES] == FIXED_POINTS
    assert all(POINTS[p] is SPECS[p].context for p in POINTS)


def test_r1_4_lifecycle_hooks_has_one_method_per_point_in_catalog_order() -> None:
    own = [name for name in vars(LifecycleHooks) if not name.startswith("_")]
    methods = [name for name in own if name in POINTS]
    assert methods == list(POINTS)
    assert set(own) - set(POINTS) == {"overridden_points", "handles"}  # handles: issue 14


@pytest.mark.parametrize("point", FIXED_POINTS)
def test_r1_4_each_method_takes_and_returns_its_points_context(point: str) -> None:
    method = getattr(LifecycleHooks, point)
    params = list(inspect.signature(method).parameters)
    assert params == ["self", "ctx"]
    hints = typing.get_type_hints(method)
    cls = POINTS[point]
    assert hints["ctx"] is cls
    assert hints["return"] == cls | None
    assert method(LifecycleHooks(), cls()) is None


def test_r1_4_sdk_exports_every_context_the_base_class_and_the_catalog() -> None:
    from the_loop.sdk import hooks as sdk

    assert sdk.POINTS is POINTS
    assert sdk.LifecycleHooks is LifecycleHooks
    exported = {name: getattr(sdk, name) for name in sdk.__all__}
    contexts = {obj for obj in exported.values()
                if isinstance(obj, type) and issubclass(obj, Context) and obj is not Context}
    assert contexts == set(POINTS.values())
    for cls in POINTS.values():
        assert exported[cls.__name__] is cls


def test_r1_4_docs_points_md_is_the_one_generated_from_the_catalog() -> None:
    committed = (ROOT / "docs" / "points.md").read_text(encoding="utf-8")
    assert committed == gen_docs().render(), (
        "docs/points.md is stale: run python scripts/gen_docs.py"
    )


def test_r1_4_docs_table_names_every_point_fact_and_decision() -> None:
    text = (ROOT / "docs" / "points.md").read_text(encoding="utf-8")
    for spec in SPECS.values():
        section = text.split(f"## `{spec.name}`", 1)[1].split("\n## ", 1)[0]
        for f in spec.fields:
            assert re.search(rf"^\| `{f.name}` \| `{re.escape(f.type)}` \|", section, re.M), (
                spec.name, f.name,
            )


def test_gen_docs_check_exits_1_when_the_file_differs(tmp_path: Path) -> None:
    module = _own_copies(gen_docs(), tmp_path)
    module.TARGET.write_text("stale\n", encoding="utf-8")
    assert module.main(["--check"]) == 1
    assert module.main([]) == 0
    assert module.main(["--check"]) == 0


def test_gen_docs_check_passes_on_the_committed_tree() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_docs.py"), "--check"],
        capture_output=True, text=True, check=False,
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("point", FIXED_POINTS)
def test_r2_5_sdk_docstrings_are_the_catalog_table(point: str) -> None:
    spec = SPECS[point]
    assert spec.context.__doc__ == point_doc(spec)
    method_doc = getattr(LifecycleHooks, point).__doc__
    assert spec.when in method_doc
    for d in spec.decisions:
        assert d.applied in spec.context.__doc__ and d.applied in method_doc


def test_r2_5_decisions_use_the_fixed_names_and_are_bool_or_str() -> None:
    for spec in SPECS.values():
        assert spec.decisions, spec.name
        for d in spec.decisions:
            assert d.name in FIXED_DECISIONS, (spec.name, d.name)
            assert d.type in ("bool", "str") and type(d.default).__name__ == d.type
            assert d.applied and d.doc


def test_r2_5_the_readme_table_lists_each_points_decisions() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `([a-z_]+)` \| (.+?) \|$", text, re.M))
    assert list(rows) == FIXED_POINTS
    for point, cell in rows.items():
        assert re.findall(r"`([a-z_]+)`", cell) == [d.name for d in SPECS[point].decisions]


def test_the_guides_function_table_is_the_one_generated_from_the_records() -> None:
    module = gen_docs()
    text = (ROOT / "docs" / "policy-guide.md").read_text(encoding="utf-8")
    after = text.split(module.FUNCTIONS_MARKER, 1)[1].splitlines()[1:]
    table = after[: next(i for i, line in enumerate(after) if not line.startswith("|"))]
    assert table == module.function_rows(), (
        "docs/policy-guide.md's function table is stale: run python scripts/gen_docs.py"
    )


def test_gen_docs_check_fails_when_a_record_has_no_row_in_the_guide(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dataclasses

    module = _own_copies(gen_docs(), tmp_path)
    assert module.main(["--check"]) == 0
    first = module.POLICY_FUNCTION_RECORDS[0]
    added = dataclasses.replace(first, name="regex_find", example="regex_find('a', node)")
    monkeypatch.setattr(module, "POLICY_FUNCTION_RECORDS", (*module.POLICY_FUNCTION_RECORDS,
                                                            added))
    assert module.main(["--check"]) == 1
    assert module.main([]) == 0
    guide = module.GUIDE.read_text("utf-8")
    assert "| `regex_find(string $pattern, string $subject) -> boolean` |" in guide
    assert module.main(["--check"]) == 0
    assert guide.count("## Functions") == 1


def _own_copies(module: ModuleType, tmp_path: Path) -> ModuleType:
    """Point the generator at copies of the files it writes, in `tmp_path` (never the
    repository's): points.md as generated now, the policy and declaring guides as
    committed."""
    module.TARGET = tmp_path / "points.md"
    module.TARGET.write_text(module.render(), encoding="utf-8")
    for attr, name in (("GUIDE", "policy-guide.md"), ("DECLARING", "declaring-hooks.md")):
        setattr(module, attr, tmp_path / name)
        (tmp_path / name).write_text((ROOT / "docs" / name).read_text("utf-8"), "utf-8")
    return module


def test_the_declaring_guides_kind_tables_are_the_ones_generated_from_the_registry() -> None:
    module = gen_docs()
    committed = (ROOT / "docs" / "declaring-hooks.md").read_text(encoding="utf-8")
    assert committed == module.render_declaring(committed), (
        "docs/declaring-hooks.md's kind tables are stale: run python scripts/gen_docs.py"
    )


def test_gen_docs_check_fails_when_a_registered_kind_has_no_row_in_the_declaring_guide(
    tmp_path: Path
) -> None:
    """A kind added to the registry makes the committed tables stale until regenerated."""
    import dataclasses

    from the_loop.configspec import Field, Str
    from the_loop.hooks.executors import registry
    from the_loop.hooks.executors.kind import KeyDoc

    module = _own_copies(gen_docs(), tmp_path)
    assert module.main(["--check"]) == 0
    toy = dataclasses.replace(registry.KINDS["policy"], name="toy", about="a toy",
                              keys={"toy": {"toy": Field(Str())}}, paths=frozenset(),
                              classes=(f"{__name__}.Toy",),
                              docs={"toy": KeyDoc("string", "—", "what the toy says")})
    remove = registry.register(toy)
    try:
        assert module.main(["--check"]) == 1
        assert module.main([]) == 0
    finally:
        remove()
    text = module.DECLARING.read_text("utf-8")
    assert "| `toy:` | `toy` | a toy |" in text
    assert "| `toy` | toy | string | — | what the toy says |" in text
