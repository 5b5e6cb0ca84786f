"""Round 4, ninth stop, attack b: a SIGTERM storm at the stop of the two servers (commit
0d1bf5f made the poller's clean-up ignore SIGTERMs after the one that stopped it; `hooks
serve` and `the-loop serve` died by the signal instead: exit -15, no stop line), with real
processes on port 0."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from runtime_helpers import child_env


def _storm_until_exit(proc: subprocess.Popen[str], health: str) -> str:
    """Wait until `health` answers (its handlers are in place), then send SIGTERMs every
    half millisecond until the process exits; its stderr."""
    for _ in range(200):
        try:
            urllib.request.urlopen(health, timeout=5).close()
            break
        except urllib.error.HTTPError:
            break  # it answered
        except OSError:
            time.sleep(0.05)
    for _ in range(20000):
        if proc.poll() is not None:
            break
        try:
            os.kill(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            break
        time.sleep(0.0005)
    _, err = proc.communicate(timeout=30)
    return err


def _start(args: list[str], cwd: Path, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "the_loop", *args], env=child_env(**env), cwd=cwd,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # CI may ignore it


def test_a_sigterm_storm_at_a_hook_servers_stop_is_one_clean_stop(tmp_path: Path) -> None:
    """The SIGTERMs after the first, while it closes its decision log, are ignored: it
    says it stopped and exits 0 (it died by the signal once its handler was put back)."""
    (tmp_path / "hooks.py").write_text(
        "from the_loop.sdk.hooks import LifecycleHooks\n\n\nclass H(LifecycleHooks):\n"
        "    pass\n", encoding="utf-8")
    proc = _start(["hooks", "serve", "--path", "hooks.py", "--port", "0"], tmp_path)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://"), url
        err = _storm_until_exit(proc, f"{url}health")
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0, (proc.returncode, err)
    assert "the-loop: hook server stopped" in err and "Traceback" not in err, err


def test_a_sigterm_storm_at_the_control_planes_stop_is_one_clean_stop(tmp_path: Path) -> None:
    """`the-loop serve` stopped by a storm of SIGTERMs exits 0, not by the signal (its
    handler stays only until Python puts the default back at exit)."""
    (tmp_path / "cli-config.yaml").write_text(
        "loop: storm\nstateDir: .the-loop\ntracker: {kind: local, repository: acme/app}\n",
        encoding="utf-8")
    proc = _start(["--config", "cli-config.yaml", "serve", "--port", "0", "--quiet",
                   "--token-env", "STORM_TOKEN"], tmp_path, STORM_TOKEN="a-token-of-storms")
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("the-loop control plane on http://"), line
        url = line.split(" on ", 1)[1].strip()
        err = _storm_until_exit(proc, f"{url}/health")
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0, (proc.returncode, err)
    assert "Traceback" not in err, err
