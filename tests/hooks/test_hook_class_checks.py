"""Hook classes are checked at load (issue 25.4): a method named like a point must be one, and
a point method takes (self, ctx); helpers and the upstream-style examples keep loading."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from any_loop_data import THEIR_STYLE_HOOK
from conftest import CliRun

HEADER = "from the_loop.sdk.hooks import LifecycleHooks\n\n\n"


def declare(tmp_path: Path, body: str) -> None:
    (tmp_path / "hooks").mkdir(exist_ok=True)
    (tmp_path / "hooks" / "h.py").write_text(HEADER + textwrap.dedent(body), encoding="utf-8")
    (tmp_path / "cli-config.yaml").write_text("hooks:\n  - name: house\n    path: hooks/h.py\n",
                                              encoding="utf-8")


@pytest.mark.parametrize(("method", "nearest"), [
    ("session_spwan", "session_spawn"),      # two letters swapped
    ("phase_change", "phase_changed"),       # a letter short
    ("work_item_started", "work_item_start"),
    ("sessionSpawned", "session_spawned"),   # camelCase
    ("on_input_received", "input_received"),
])
def test_a_method_named_like_a_point_fails_to_load_naming_the_nearest_point(
    tmp_path: Path, run_cli: CliRun, method: str, nearest: str
) -> None:
    declare(tmp_path, f"""
        class House(LifecycleHooks):
            def {method}(self, ctx):
                ctx.proceed = False
                return ctx
    """)
    result = run_cli("hooks", "run", "session_spawn")
    assert result.returncode == 1, result.stdout
    assert result.stderr.startswith(
        f"the-loop: hooks[0] ('house') → path: House.{method} is not a point; did you mean "
        f"{nearest}? "), result.stderr
    assert "start a helper's name with _" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(("source", "says"), [
    ("def session_spawn(self):\n    return None\n",
     "House.session_spawn takes (self); a point method takes one context: "
     "def session_spawn(self, ctx)"),
    ("def session_spawn(self, ctx, extra):\n    return None\n",
     "House.session_spawn takes (self, ctx, extra); a point method takes one context"),
    ("@staticmethod\ndef session_spawn():\n    return None\n",
     "House.session_spawn takes (no parameter); a point method takes one context"),
    ("async def session_spawn(self, ctx):\n    return None\n",
     "House.session_spawn is async; the loop calls a point method and uses what it returns"),
    ("session_spawn = None\n",
     "House.session_spawn is a NoneType, not a method"),
])
def test_a_point_method_of_the_wrong_shape_fails_to_load(
    tmp_path: Path, run_cli: CliRun, source: str, says: str
) -> None:
    declare(tmp_path, "class House(LifecycleHooks):\n" + textwrap.indent(source, "    "))
    result = run_cli("hooks", "run", "session_spawn")
    assert result.returncode == 1, result.stdout
    assert says in result.stderr, result.stderr


def test_every_problem_of_a_class_and_its_own_bases_is_named_at_once(
    tmp_path: Path, run_cli: CliRun
) -> None:
    declare(tmp_path, """
        class Mixin:
            def waiting_for_inptu(self, ctx):
                return None

        class House(Mixin, LifecycleHooks):
            def work_item_complete(self):
                return None
    """)
    result = run_cli("hooks", "run", "session_spawn")
    assert result.returncode == 1
    assert "House.work_item_complete takes (self)" in result.stderr
    assert "House.waiting_for_inptu is not a point; did you mean waiting_for_input?" in (
        result.stderr)


def test_helpers_named_unlike_a_point_and_private_ones_keep_loading(
    tmp_path: Path, run_cli: CliRun
) -> None:
    declare(tmp_path, """
        class House(LifecycleHooks):
            limit = 3
            spawn_count = 0

            def __init__(self, prefix="ACME: "):
                self.prefix = prefix

            def _session_spwan(self, ctx):  # private: anything goes
                return None

            def prefixed(self, text):
                return self.prefix + text

            @staticmethod
            def allowed(actor):
                return actor == "alice"

            @classmethod
            def build(cls):
                return cls()

            @property
            def phase_change(self):  # not a method
                return None

            def session_spawn(self, ctx):
                ctx.prompt = self.prefixed(ctx.prompt)
                return ctx

            @classmethod
            def phase_changed(cls, ctx):
                return None
    """)
    result = run_cli("hooks", "run", "session_spawn", "--context", "-",
                     stdin='{"prompt": "fix it"}')
    assert result.returncode == 0, result.stderr
    assert "changed prompt=\"ACME: fix it\"" in result.stdout


def test_the_upstream_style_house_rules_class_loads_and_runs(
    tmp_path: Path, run_cli: CliRun
) -> None:
    (tmp_path / "hooks").mkdir()
    (tmp_path / "hooks" / "h.py").write_text(THEIR_STYLE_HOOK, encoding="utf-8")
    (tmp_path / "cli-config.yaml").write_text("hooks:\n  - name: house\n    path: hooks/h.py\n",
                                              encoding="utf-8")
    result = run_cli("hooks", "run", "input_received", "--context", "-",
                     stdin='{"control": "stop", "actor": "bob"}')
    assert result.returncode == 0, result.stderr
    assert "only alice may stop (bob asked)" in result.stdout


def test_hooks_serve_refuses_a_misspelt_point_as_the_declaration_does(
    tmp_path: Path, run_cli: CliRun
) -> None:
    declare(tmp_path, """
        class House(LifecycleHooks):
            def work_itme_start(self, ctx):
                return None
    """)
    result = run_cli("hooks", "serve", "--path", str(tmp_path / "hooks" / "h.py"),
                     "--port", "0")
    assert result.returncode != 0
    assert "House.work_itme_start is not a point; did you mean work_item_start?" in (
        result.stderr)
