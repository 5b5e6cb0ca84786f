"""`the-loop demo`: one work item from start to close on a fresh folder, narrated, with its
log left for `the-loop events` (issue 7, item 10)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from runtime_helpers import child_env
from the_loop.demo.scenario import fresh_dir
from the_loop.hooks.engine.points import POINTS

TOKEN = "demo-token-that-must-not-leak"


def the_loop(
    *args: str, home: Path, cwd: Path | None = None, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    env = child_env(HOME=str(home), THE_LOOP_DEMO_TOKEN=TOKEN)
    return subprocess.run([sys.executable, "-m", "the_loop", *args], cwd=cwd or home, env=env,
                          input=stdin, text=True, capture_output=True, timeout=120, check=False)


def test_demo_closes_its_work_item_prints_each_point_and_leaves_a_readable_log(
        tmp_path: Path) -> None:
    folder = tmp_path / "demo"
    done = the_loop("demo", "--dir", str(folder), home=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout

    for point in POINTS:
        assert f"● {point}" in out, point
    assert "points fired: " + ", ".join(POINTS) in out
    assert "local:acme/app#1 is closed (loop state done)" in out
    # What the hooks decided: the policy's preamble, the local stamp, the remote redaction.
    assert 'house-rules  changed prompt: prefix "Follow the house rules' in out
    assert "[rules: house-preamble]" in out
    assert 'stamp        changed question: prefix "[acme] "' in out
    # A refusal: the policy drops a non-maintainer's /approve.
    assert "✗ refused: only maintainers (alice, bob) may approve; mallory is not one" in out
    assert "compliance   changed text=" in out and "password=[redacted]" in out
    for phase in ("requirements → requirements-review", "tasks-review → done"):
        assert f"── {phase}" in out

    config = folder / "cli-config.yaml"
    assert config.is_file() and (folder / "policies").is_dir()
    assert (folder / "hooks" / "stamp.py").is_file()
    shown = json.loads(the_loop("--config", str(config), "items", "show", "#1", "--json",
                                home=tmp_path).stdout)
    assert (shown["state"], shown["labels"]) == ("closed", ["loop", "loop:done"])

    events = the_loop("--config", str(config), "events", home=tmp_path)
    assert events.returncode == 0
    lines = events.stdout.splitlines()
    assert any(" lifecycle.point " in x and "point=work_item_complete" in x for x in lines)
    as_json = the_loop("--config", str(config), "events", "--json", "--event", "hooks.*",
                       home=tmp_path)
    hooks = [json.loads(x) for x in as_json.stdout.splitlines()]
    assert {"hooks.loaded", "hooks.decided"} <= {r["event"] for r in hooks}
    assert not [r for r in hooks if r["event"] in ("hooks.failed", "hooks.load_failed")]

    log = (folder / ".the-loop" / "events.jsonl").read_text()
    assert TOKEN not in log and TOKEN not in config.read_text()

    # The folder is a starting point afterwards: from inside it, with no flags (issue 15).
    check = the_loop("policy", "check", home=tmp_path, cwd=folder)
    assert check.returncode == 0 and f"\n{folder / 'policies'}: 11 rule" in check.stdout
    tested = the_loop("policy", "test", "--min-coverage", "100", home=tmp_path, cwd=folder)
    assert tested.returncode == 0, tested.stdout
    assert the_loop("events", "--event", "item.*", home=tmp_path, cwd=folder).stdout
    dry = the_loop("hooks", "run", "session_spawn", "--context", "-", "--json", home=tmp_path,
                   cwd=folder, stdin='{"prompt": "go"}')
    assert dry.returncode == 0, dry.stderr
    trace = {s["hook"]: s for s in json.loads(dry.stdout)["trace"]}
    # The demo's remote hook stopped with the demo: that hook's failure, nothing more.
    assert trace["compliance"]["status"] == "failed"
    assert trace["house-rules"]["status"] == "changed"


def test_demo_never_reuses_a_folder_that_has_files(tmp_path: Path) -> None:
    """A second demo into the same --dir goes to a fresh sibling, never over the first."""
    base = tmp_path / "d"
    assert fresh_dir(base) == base
    (base / "cli-config.yaml").write_text("loop: x\n")
    assert fresh_dir(base) == tmp_path / "d-2"
    (tmp_path / "d-2" / "f").write_text("")
    assert fresh_dir(base) == tmp_path / "d-3"
