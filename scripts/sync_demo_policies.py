"""Copy the example rule files in policies/ (and their tests/ and data/) into the package, where
`the-loop demo` finds them.

The top-level policies/ folder is what an operator reads and copies; an installed
the-loop has no checkout, so the demo ships a copy. tests/policy/test_demo_policies.py fails
when the two differ; run `python scripts/sync_demo_policies.py` to mend it.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "policies"
TARGET = ROOT / "src" / "the_loop" / "demo" / "policies"


def rule_files(folder: Path) -> dict[str, str]:
    return {p.name: p.read_text(encoding="utf-8")
            for p in sorted(folder.iterdir()) if p.suffix in (".yaml", ".yml")}


def main() -> int:
    for source, target in ((SOURCE, TARGET), (SOURCE / "tests", TARGET / "tests"),
                           (SOURCE / "data", TARGET / "data")):
        target.mkdir(parents=True, exist_ok=True)
        for old in target.iterdir():
            if old.suffix in (".yaml", ".yml"):
                old.unlink()
        for name in rule_files(source):
            shutil.copyfile(source / name, target / name)
        print(f"copied {len(rule_files(target))} files into {target.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
