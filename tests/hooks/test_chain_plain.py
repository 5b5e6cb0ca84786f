"""Issue 33 §1: the chain stays plain — no reference counting, short, and no function in
`hooks/engine/chain.py` over complexity 15 (ruff's mccabe count, as radon counts)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CHAIN = Path(__file__).resolve().parents[2] / "src" / "the_loop" / "hooks" / "engine" / "chain.py"


def test_chain_py_counts_no_references_and_stays_under_350_lines() -> None:
    text = CHAIN.read_text(encoding="utf-8")
    assert "getrefcount" not in text and "getweakrefcount" not in text
    assert len(text.splitlines()) < 350


def test_no_function_in_chain_py_is_over_complexity_15() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--select", "C901",
         "--config", "lint.mccabe.max-complexity = 15", str(CHAIN)],
        capture_output=True, text=True, check=False, timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
