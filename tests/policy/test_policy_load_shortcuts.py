"""The load's shortcuts change no outcome: a data read spelt with an escape is still data, and
loading a policy leaves Python's cyclic collector as it found it (`gcpause`)."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from the_loop.cli import main
from the_loop.hooks.executors.policy import load_policy
from the_loop.hooks.policy import PolicyError

RULE = """\
rules:
  - name: approve-needs-maintainer
    on: input_received
    when: '{when}'
    set: {{proceed: false, reason: "maintainers only"}}
"""


def _folder(tmp_path: Path, when: str) -> Path:
    folder = tmp_path / "policies"
    (folder / "data").mkdir(parents=True)
    (folder / "rules.yaml").write_text(RULE.format(when=when), "utf-8")
    (folder / "data" / "people.yaml").write_text("maintainers: [alice, bob]\n", "utf-8")
    return folder


def test_a_data_read_spelt_with_a_unicode_escape_reads_the_policy_data(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # "\u0064ata" is the field `data`: the policy data, not an unknown field of the context.
    folder = _folder(tmp_path, r'!contains("\u0064ata".maintainers, actor)')
    assert main(["policy", "check", str(folder)]) == 0, capsys.readouterr().err
    missing = _folder(tmp_path / "b", r'!contains("\u0064ata".maintainerz, actor)')
    assert main(["policy", "check", str(missing)]) == 1
    assert "data has no 'maintainerz'" in capsys.readouterr().err


@pytest.mark.parametrize("enabled", [True, False])
def test_loading_a_policy_leaves_the_garbage_collector_as_it_was(
        tmp_path: Path, enabled: bool) -> None:
    good = _folder(tmp_path, 'control == `"approve"`')
    bad = _folder(tmp_path / "b", "control ==")
    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        load_policy("p", good)
        assert gc.isenabled() is enabled
        with pytest.raises(PolicyError):
            load_policy("p", bad)
        assert gc.isenabled() is enabled
    finally:
        gc.enable() if was else gc.disable()
