"""The demo's packaged rule files are the example policies/ an operator reads."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _sync_module():  # type: ignore[no-untyped-def]
    script = ROOT / "scripts" / "sync_demo_policies.py"
    spec = importlib.util.spec_from_file_location("sync", script)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_demo_ships_the_example_policies_unchanged() -> None:
    sync = _sync_module()
    assert sync.rule_files(sync.SOURCE), "policies/ has no rule files"
    for sub in (".", "tests", "data"):
        assert sync.rule_files(sync.TARGET / sub) == sync.rule_files(sync.SOURCE / sub), (
            f"src/the_loop/demo/policies/{sub} differs from policies/{sub}: run "
            "`python scripts/sync_demo_policies.py`"
        )
