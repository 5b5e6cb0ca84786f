"""`the-loop init`: a working starting point the config lookup finds (issue 15, item 1)."""

from __future__ import annotations

import errno
import json
import os
import resource
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from the_loop.cli import main
from the_loop.hooks.policy.testing import run_tests
from the_loop.scaffold import FILES


def test_init_writes_every_file_and_says_what_to_run_next(tmp_path: Path, run_cli: Any) -> None:
    done = run_cli("init")
    assert done.returncode == 0, done.stderr
    written = sorted(str(p.relative_to(tmp_path / ".the-loop"))
                     for p in (tmp_path / ".the-loop").rglob("*") if p.is_file())
    assert written == sorted(FILES)
    assert "the-loop policy check\n" in done.stdout
    assert "--config" not in done.stdout  # the lookup finds ./.the-loop/cli-config.yaml
    # The harness it declares is not isolated: the one line to read says where to look.
    assert ("note: this config runs its harness (the demo agent) as your own user, so an "
            "agent is not isolated from the loop; before declaring a real one, read \"What the "
            "operator must do: isolate the harness\" in docs/security.md\n") in done.stdout


def test_right_after_init_the_author_commands_work_with_no_flags(
    tmp_path: Path, run_cli: Any
) -> None:
    done = run_cli("init")
    assert done.returncode == 0
    check = run_cli("policy", "check")
    assert check.returncode == 0, check.stderr
    folder = tmp_path / ".the-loop" / "policies"
    header, listing = check.stdout.splitlines()[:2]
    assert header == "== policy entry 'house-rules' (.the-loop/policies)"
    assert listing.startswith(f"{folder}: 6 rule(s)")
    test = run_cli("policy", "test")
    assert test.returncode == 0, test.stdout
    assert test.stdout.splitlines()[-1] == "15 passed, 0 failed"
    # Its cases make every part of every condition true and false, so a newcomer who turns
    # on branch coverage starts from green, not from init's own gaps.
    branches = run_cli("policy", "test", "--coverage-of", "branches", "--min-coverage", "100")
    assert branches.returncode == 0, branches.stdout
    assert "branches: 100.0% of condition outcomes seen" in branches.stdout
    listed = run_cli("hooks")
    assert listed.returncode == 0 and "house-rules" in listed.stdout
    assert "hooks/example.py" in listed.stdout
    # The dry run init suggests, run as printed (with --json to read its answer).
    [suggested] = [line.strip() for line in done.stdout.splitlines()
                   if line.strip().startswith("echo ")]
    env = {k: v for k, v in os.environ.items() if k != "THE_LOOP_CLI_CONFIG"}
    env["HOME"] = str(tmp_path / "_home")
    dry = subprocess.run(
        ["bash", "-c", suggested.replace("| the-loop ", f"| {shlex.quote(sys.executable)} -m "
                                                         "the_loop ") + " --json"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert dry.returncode == 0, dry.stderr
    final = json.loads(dry.stdout)["context"]
    assert final["loop"] == "my-loop"  # from the config, not ""
    assert final["proceed"] is False
    assert final["reason"] == "local:acme/app#7 is labelled do-not-automate"
    asked = run_cli("hooks", "run", "waiting_for_input", "--context", "-", "--json",
                    stdin='{"kind": "question", "question": "Which database?"}')
    assert json.loads(asked.stdout)["context"]["question"] == "[my-loop] Which database?"
    # and from inside the folder itself, by ./cli-config.yaml
    inside = run_cli("policy", "test", cwd=tmp_path / ".the-loop")
    assert inside.returncode == 0, inside.stdout


def test_every_example_rule_has_a_case_that_matches_it_and_one_that_does_not(
    tmp_path: Path, run_cli: Any
) -> None:
    run_cli("init")
    report = run_tests(tmp_path / ".the-loop" / "policies")
    assert report.ok and report.unexercised == []
    matched = [r.rules for r in report.results]
    assert matched.count([]) == 8 and len(matched) == 15


def test_init_never_overwrites_a_file(tmp_path: Path, run_cli: Any) -> None:
    (tmp_path / ".the-loop" / "policies").mkdir(parents=True)
    (tmp_path / ".the-loop" / "policies" / "10-starts.yaml").write_text("mine", "utf-8")
    done = run_cli("init")
    assert done.returncode == 1
    assert done.stderr == (
        "the-loop: .the-loop: not written, it already holds policies/10-starts.yaml; init "
        "never overwrites a file: pass another DIR, or move those away\n"
    )
    assert (tmp_path / ".the-loop" / "policies" / "10-starts.yaml").read_text("utf-8") == "mine"
    assert not (tmp_path / ".the-loop" / "cli-config.yaml").exists()


def test_init_elsewhere_prints_commands_that_name_the_config(
    tmp_path: Path, run_cli: Any
) -> None:
    done = run_cli("init", "ops/loop")
    config = tmp_path / "ops" / "loop" / "cli-config.yaml"
    assert done.returncode == 0
    assert f"the-loop --config {config} policy test --coverage" in done.stdout
    assert run_cli("--config", str(config), "policy", "test").returncode == 0


def test_init_into_a_folder_with_a_space_prints_commands_that_paste_into_a_shell(
    tmp_path: Path, run_cli: Any
) -> None:
    done = run_cli("init", "team's loop/cfg")
    assert done.returncode == 0, done.stderr
    [check] = [line.strip() for line in done.stdout.splitlines()
               if line.strip().startswith("the-loop --config") and "policy check" in line]
    env = {k: v for k, v in os.environ.items() if k != "THE_LOOP_CLI_CONFIG"}
    pasted = subprocess.run(
        ["bash", "-c", check.replace("the-loop ", f"{shlex.quote(sys.executable)} -m the_loop ",
                                     1)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert pasted.returncode == 0, pasted.stderr
    assert "6 rule(s)" in pasted.stdout


def test_init_with_config_says_to_name_the_folder_instead(tmp_path: Path, run_cli: Any) -> None:
    done = run_cli("init", "--config", "elsewhere/cli-config.yaml")
    assert done.returncode == 2
    assert "init writes DIR/cli-config.yaml and takes no --config" in done.stderr
    assert not (tmp_path / ".the-loop").exists() and not (tmp_path / "elsewhere").exists()


def test_init_on_a_full_disk_leaves_nothing_and_says_what_failed(tmp_path: Path) -> None:
    """Writes past 600 bytes fail in the child (RLIMIT_FSIZE, as a full disk would fail
    them): init names the file and the reason, and leaves no half-written file behind."""
    def small_files() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a killed child
        resource.setrlimit(resource.RLIMIT_FSIZE, (600, 600))

    env = {k: v for k, v in os.environ.items() if k != "THE_LOOP_CLI_CONFIG"}
    env["HOME"] = str(tmp_path)
    done = subprocess.run([sys.executable, "-m", "the_loop", "init", "ops/loop"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
                          check=False, preexec_fn=small_files)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == ("the-loop: ops/loop: cannot write cli-config.yaml: File too large; "
                           "nothing was written: free some space, or pass a DIR you may "
                           "write to\n")
    assert sorted(tmp_path.iterdir()) == []


def test_init_that_fails_midway_removes_the_files_it_had_already_put_in_place(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The disk fills while the files are renamed into place (the fourth rename fails):
    the three already in place are removed too, and the folder init made with them."""
    renamed: list[str] = []
    real_rename = os.rename

    def rename(src: Any, dst: Any) -> None:
        if len(renamed) == 3:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_rename(src, dst)
        renamed.append(str(dst))

    (tmp_path / "mine").mkdir()
    monkeypatch.setattr(os, "rename", rename)
    assert main(["init", str(tmp_path / "mine" / "loop")]) == 1
    assert capsys.readouterr().err == (
        f"the-loop: {tmp_path}/mine/loop: cannot write policies/30-notifications.yaml: No "
        "space left on device; nothing was written: free some space, or pass a DIR you may "
        "write to\n")
    assert len(renamed) == 3
    assert list((tmp_path / "mine").iterdir()) == []
