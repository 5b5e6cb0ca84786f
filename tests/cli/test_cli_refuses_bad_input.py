"""Issue 20 items 9 and 10: inputs that used to hang, spin or crash the CLI (a FIFO or a
device as a file, a duration of inf or nan) are refused with one sentence naming the thing
and the fix."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from runtime_helpers import LoopDir
from the_loop.cli import main


@pytest.mark.parametrize("value", ["inf", "nan", "-1", "0", "1e-300", "0.001", "1e400", "soon"])
def test_poll_interval_that_is_not_a_positive_finite_number_is_a_usage_error(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, value: str) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["poll", "--once", "--interval", value, "--config", str(tmp_path / "none.yaml")])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == (
        "the-loop poll: error: argument --interval: expected a number of seconds from 0.05 "
        f"up to 86400 (e.g. 5 or 0.5), got {value!r}")
    assert "bug" not in err


@pytest.mark.parametrize("value", ["inf", "nan", "-5"])
def test_reply_wait_that_is_not_a_finite_duration_is_a_usage_error(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, value: str) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["reply", "1", "hello", "--wait", value, "--config", str(tmp_path / "none.yaml")])
    assert stopped.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "the-loop reply: error: argument --wait: expected a number of seconds from 0 up to "
        f"86400 (e.g. 5 or 0.5), got {value!r}")


# ------------------------------------------------------------------ item 9: what is read

def _bounded_cli(tmp_path: Path, *args: str, stdin: int | None = None
                 ) -> subprocess.CompletedProcess[str]:
    """The CLI in a child with 1 GiB of address space and 30 s: a read that never ends
    fails the test instead of the machine (in process it would block or eat memory)."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    env = {k: v for k, v in os.environ.items() if not k.startswith("THE_LOOP_")}
    env["HOME"] = str(tmp_path)
    return subprocess.run([sys.executable, "-m", "the_loop", *args], cwd=tmp_path, env=env,
                          stdin=stdin if stdin is not None else subprocess.DEVNULL,
                          text=True, capture_output=True, timeout=30, check=False,
                          preexec_fn=limit)


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def test_a_fifo_as_cli_config_is_refused_naming_it(tmp_path: Path) -> None:
    fifo = _fifo(tmp_path / "cli-config.yaml")
    done = _bounded_cli(tmp_path, "--config", str(fifo), "hooks")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (f"the-loop: {fifo}: cannot read: not a regular file (a FIFO, "
                           "socket or device); name a regular file\n")


def test_a_fifo_as_the_graph_is_refused_by_poll_once_naming_it(tmp_path: Path) -> None:
    with LoopDir(tmp_path) as ld:
        ld.write_config(graph="graph.fifo")
        fifo = _fifo(tmp_path / "graph.fifo")
        done = _bounded_cli(tmp_path, "--config", str(ld.config), "poll", "--once")
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == (
        f"the-loop: graph {fifo}: cannot read: not a regular file (a FIFO, socket or "
        "device); name a regular file")


@pytest.mark.parametrize("source", ["/dev/zero", "fifo", "big.json", "-"])
def test_hooks_run_context_that_never_ends_or_is_too_large_is_refused(
        tmp_path: Path, source: str) -> None:
    """/dev/zero, a FIFO, a 9 MiB file, and /dev/zero on standard input: each is one line
    naming the input, never a read until memory runs out."""
    if source == "fifo":
        _fifo(tmp_path / source)
    elif source == "big.json":
        with open(tmp_path / source, "wb") as fh:
            fh.truncate(9 << 20)
    with open("/dev/zero", "rb") as zero:
        done = _bounded_cli(tmp_path, "--config", str(tmp_path / "none.yaml"), "hooks", "run",
                            "session_spawn", "--context", source, stdin=zero.fileno())
    assert done.returncode == 2
    why = {"/dev/zero": "not a regular file (a FIFO, socket or device); name a regular file",
           "fifo": "not a regular file (a FIFO, socket or device); name a regular file",
           "big.json": "larger than 8 MiB; an operator file is far smaller (is this the "
                       "right file?)",
           "-": "more than 8 MiB on standard input; a context is far smaller (is this the "
                "right input?)"}[source]
    assert done.stderr == f"the-loop: --context {source}: cannot read: {why}\n"


def test_hooks_run_context_not_utf8_names_the_byte(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "ctx.json").write_bytes(b'{"prompt": "caf\xe9"}')
    code = main(["--config", str(tmp_path / "none.yaml"), "hooks", "run", "session_spawn",
                 "--context", str(tmp_path / "ctx.json")])
    assert code == 2
    assert capsys.readouterr().err == (
        f"the-loop: --context {tmp_path / 'ctx.json'}: cannot read: not UTF-8 text (byte 0xe9 "
        "at offset 15); save it as UTF-8, or name the right file\n")
