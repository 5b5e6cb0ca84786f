"""Harness sessions: launch any command with the prompt on stdin and its output in a log file."""

from __future__ import annotations

import os
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

from the_loop.config import ENV_VAR
from the_loop.errors import LoopError


@dataclass(frozen=True)
class Launched:
    session_id: str
    pid: int
    log: Path


def new_session_id() -> str:
    return "s-" + uuid.uuid4().hex[:12]


def launch(
    argv: tuple[str, ...] | list[str], *, prompt: str, cwd: Path, config_path: Path | None,
    work_item: str, session_id: str, log_dir: Path, extra_env: dict[str, str] | None = None,
) -> tuple[Launched, subprocess.Popen[bytes]]:
    """Start the process; the prompt goes to stdin, which is then closed.

    Raises `LoopError` when the command cannot be started (not found, not executable).
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{session_id}.log"
    env = dict(os.environ)
    env[ENV_VAR] = str(config_path or "")
    env["THE_LOOP_WORK_ITEM"] = work_item
    env["THE_LOOP_SESSION"] = session_id
    env.update(extra_env or {})
    with open(log_path, "ab") as log:
        try:
            proc = subprocess.Popen(
                list(argv), stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
                cwd=str(cwd), env=env, start_new_session=True,
            )
        except OSError as exc:
            raise LoopError(
                f"cannot launch {argv[0]!r}: {exc.strerror or exc} (check `harnesses:` "
                "→ command in cli-config.yaml)"
            ) from None
    assert proc.stdin is not None
    try:
        proc.stdin.write(prompt.encode("utf-8"))
        proc.stdin.close()
    except BrokenPipeError:
        pass  # the harness did not read its prompt; its exit is recorded when reaped
    return Launched(session_id, proc.pid, log_path), proc


def alive(pid: int) -> bool:
    """Whether a process we launched is still running (reaps it if it is our child)."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A session launched by a process that has since exited is reparented; until its new
    # parent reaps it, it is a zombie that kill(0) still finds. A zombie has ended.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return True  # no procfs (not Linux): kill(0) is all we know
    return stat.rsplit(")", 1)[-1].split()[:1] != ["Z"]
