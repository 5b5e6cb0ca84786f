"""A limit on the shape of src/ that issue 33 set, kept here so later work cannot quietly
undo it: no function over cyclomatic complexity 20 by radon's count (the chain's own,
stricter limits are in tests/hooks/test_chain_plain.py)."""

from __future__ import annotations

from pathlib import Path

from radon.complexity import cc_visit

import the_loop

SRC = Path(the_loop.__file__).parent
CEILING = 20


def test_no_function_in_src_is_over_complexity_20() -> None:
    over = [
        f"{file.relative_to(SRC.parent)}:{block.lineno} {block.fullname} ({block.complexity})"
        for file in sorted(SRC.rglob("*.py"))
        for block in cc_visit(file.read_text(encoding="utf-8"))
        if block.complexity > CEILING
    ]
    assert not over, (f"over complexity {CEILING} by radon's count: give the parts of each "
                      "a name\n" + "\n".join(over))
