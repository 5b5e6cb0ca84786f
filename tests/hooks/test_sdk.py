"""The SDK surface `the_loop.sdk.hooks` (R4.5): re-exports only, light to import."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from serving_helpers import free_port

DESIGN_NAMES = {
    "LifecycleHooks", "WorkItem", "WorkItemStart", "SessionSpawn", "SessionSpawned",
    "WaitingForInput", "InputReceived", "PhaseChanged", "WorkItemComplete", "POINTS",
    "handle_request", "HookServer",
}
#: Issue 14: the names hook files written for the open-source the-loop import as well
#: (issue 30.12: `HookFailure`, which its SDK exports).
UPSTREAM_NAMES = {"Context", "DecisionTypeError", "HookFailure"}


def isort_key(name: str) -> tuple[int, str]:
    """The order ruff's RUF022 keeps: CONSTANTS, then Classes, then functions, each sorted."""
    return (0 if name.isupper() else 1 if name[:1].isupper() else 2, name)


def test_r4_5_sdk_all_is_sorted_and_is_the_design_list() -> None:
    from the_loop.sdk import hooks as sdk

    assert sdk.__all__ == sorted(sdk.__all__, key=isort_key)
    assert len(sdk.__all__) == len(set(sdk.__all__))
    assert set(sdk.__all__) == DESIGN_NAMES | UPSTREAM_NAMES


def test_r4_5_sdk_is_re_exports_only() -> None:
    from the_loop.sdk import hooks as sdk

    # dir(): HookServer and handle_request are resolved at first use (the SDK's __getattr__)
    public = {n for n in dir(sdk) if not n.startswith("_")}
    assert public == set(sdk.__all__)
    for name in sdk.__all__:
        obj = getattr(sdk, name)
        home = getattr(obj, "__module__", None) or "the_loop.hooks.engine.points"
        # HookFailure is the error tree's HookError (the_loop.errors), as the engine has it
        assert home.startswith("the_loop.hooks.") or (name, home) == (
            "HookFailure", "the_loop.errors"), (name, home)


PROBE = """
import json, sys
import the_loop.sdk.hooks
heavy = ("fastapi", "uvicorn", "starlette", "mcp")
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in heavy)))
"""


def test_r4_5_importing_the_sdk_loads_no_fastapi_uvicorn_starlette_or_mcp() -> None:
    result = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=False, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []


def test_r4_1_a_hook_written_against_the_sdk_runs_in_a_chain() -> None:
    from the_loop.hooks.engine.chain import Chain
    from the_loop.sdk.hooks import LifecycleHooks, SessionSpawn, WorkItem

    class Prefix(LifecycleHooks):
        def session_spawn(self, ctx: SessionSpawn) -> SessionSpawn:
            ctx.prompt = f"[{ctx.work_item.ref}] {ctx.prompt}"
            return ctx

    out = Chain.of(Prefix()).run(SessionSpawn(work_item=WorkItem(ref="local:a/b#1"), prompt="go"))
    assert out.prompt == "[local:a/b#1] go"


HOOK_RAISING_THEIR_FAILURE = """\
from the_loop.sdk.hooks import HookFailure, LifecycleHooks, WorkItemStart


class Compliance(LifecycleHooks):
    def work_item_start(self, ctx: WorkItemStart) -> None:
        raise HookFailure("the compliance database is down")
"""


def test_hook_failure_imports_as_there_and_a_hook_raising_it_is_that_hooks_failure(
    tmp_path: Path,
) -> None:
    """Issue 30.12: `from the_loop.sdk.hooks import HookFailure` works (their SDK exports
    it); raised by a hook, it is recorded as that hook's failure and a required one refuses;
    it is what our remote executor raises, and a RuntimeError as theirs is."""
    from the_loop.hooks import load_chain
    from the_loop.hooks.engine.points import WorkItemStart
    from the_loop.hooks.executors.remote import RemoteExecutor
    from the_loop.sdk.hooks import HookFailure

    (tmp_path / "compliance.py").write_text(HOOK_RAISING_THEIR_FAILURE, encoding="utf-8")
    config = tmp_path / "cli-config.yaml"
    config.write_text("hooks:\n  - name: compliance\n    path: compliance.py\n"
                      "    required: true\n", encoding="utf-8")
    out = load_chain(config).run(WorkItemStart())
    assert out.proceed is False
    assert "compliance" in out.reason and "the compliance database is down" in out.reason
    assert issubclass(HookFailure, RuntimeError)
    with pytest.raises(HookFailure, match=r"closed|refused|connect"):
        RemoteExecutor(name="down", url=f"http://127.0.0.1:{free_port()}/", timeout=2).call(
            "work_item_start", WorkItemStart())
