"""Issue 33 §1: the chain stays plain — no reference counting, short, and no function in
`hooks/engine/chain.py` over complexity 15 by radon's count (the count issue 33 uses; radon
is a test dependency, so the check runs wherever the README's test command does)."""

from __future__ import annotations

from pathlib import Path

from radon.complexity import cc_visit

CHAIN = Path(__file__).resolve().parents[2] / "src" / "the_loop" / "hooks" / "engine" / "chain.py"


def test_chain_py_counts_no_references_and_stays_under_350_lines() -> None:
    text = CHAIN.read_text(encoding="utf-8")
    assert "getrefcount" not in text and "getweakrefcount" not in text
    assert len(text.splitlines()) < 350


def test_no_function_in_chain_py_is_over_complexity_15() -> None:
    over = [f"{b.fullname} ({b.complexity})"
            for b in cc_visit(CHAIN.read_text(encoding="utf-8")) if b.complexity > 15]
    assert not over, over
