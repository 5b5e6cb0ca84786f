"""Issue 20 items 9 and 10: inputs that used to hang, spin or crash the CLI are refused
with one sentence naming the thing and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from the_loop.cli import main


@pytest.mark.parametrize("value", ["inf", "nan", "-1", "0", "1e400", "soon"])
def test_poll_interval_that_is_not_a_positive_finite_number_is_a_usage_error(
        capsys: pytest.CaptureFixture[str], tmp_path: Path, value: str) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["poll", "--once", "--interval", value, "--config", str(tmp_path / "none.yaml")])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == (
        "the-loop poll: error: argument --interval: expected a number of seconds above 0 "
        f"and up to 86400 (e.g. 5 or 0.5), got {value!r}")
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
