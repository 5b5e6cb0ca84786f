"""A checkout of another commit to measure beside this one in the same run (issue 34).

`checkout(ref)` adds a detached `git worktree` of `ref` in a temporary folder and yields its
`src/` folder; a child process given `PYTHONPATH=<that src>` runs that commit's code with
this interpreter and its installed dependencies (the editable install of this worktree is a
path in a .pth file, which PYTHONPATH comes before). The worktree is removed on exit.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def describe(ref: str) -> str:
    """`ref` as a short commit id and subject, for the table's header."""
    out = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%h %s", ref],
                         capture_output=True, text=True, check=True).stdout.strip()
    return out[:70]


@contextlib.contextmanager
def checkout(ref: str) -> Iterator[Path]:
    """The `src/` folder of a temporary worktree of `ref`."""
    with tempfile.TemporaryDirectory(prefix="the-loop-baseline-") as tmp:
        where = Path(tmp) / "tree"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet",
                        str(where), ref], check=True)
        try:
            yield where / "src"
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                            str(where)], check=False)


def env_for(src: Path | None, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a child that runs the code in `src` (None: this checkout's)."""
    env = dict(os.environ if base is None else base)
    if src is not None:
        env["PYTHONPATH"] = str(src)
    else:
        env.pop("PYTHONPATH", None)
    return env
