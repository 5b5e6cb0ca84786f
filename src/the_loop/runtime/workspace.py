"""A work item's workspace: a folder under stateDir, or a git worktree on a branch for the item."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path

from the_loop.errors import LoopError
from the_loop.hooks.engine.points import WorkItem


def workspace_path(state_dir: Path, item: WorkItem) -> Path:
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", f"{item.repository}-{item.number}")
    return state_dir / "workspaces" / slug


def prepare(state_dir: Path, item: WorkItem, git_repository: Path | None,
            before_git: Callable[[], None] = lambda: None) -> tuple[Path, bool]:
    """Create (or reuse) the workspace; returns (path, is_git_worktree). `before_git` runs
    just before git checks a new worktree out (which takes as long as the repository)."""
    path = workspace_path(state_dir, item)
    if path.exists():
        return path, (path / ".git").exists()
    path.parent.mkdir(parents=True, mode=0o700, exist_ok=True)
    if git_repository is None:
        path.mkdir(mode=0o700)
        return path, False
    before_git()
    branch = f"loop/{item.repo}-{item.number}"
    exists = subprocess.run(
        ["git", "-C", str(git_repository), "rev-parse", "--verify", "--quiet", branch],
        capture_output=True, text=True, check=False,
    ).returncode == 0
    cmd = ["git", "-C", str(git_repository), "worktree", "add"]
    cmd += [str(path), branch] if exists else ["-b", branch, str(path)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise LoopError(
            f"cannot create a git worktree for {item.ref} from {git_repository}: "
            f"{done.stderr.strip() or done.stdout.strip()} (check `repository:` in "
            "cli-config.yaml names a git repository with at least one commit)"
        )
    return path, True
