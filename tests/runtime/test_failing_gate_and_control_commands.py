"""Issue 30 item 1: a required `url:` hook at input_received whose server is down, and a
person's `/stop`, `/approve` and `/reject` sent with the real `reply`:

- `/stop` always stops (the session ends before any hook is asked; the hook's failure and
  refusal are recorded and said, never obeyed);
- `/approve` is refused (fail-closed: a gate is not passed while its check cannot answer);
- `/reject` always goes through (a rejection keeps the work where it was; the refusal is
  recorded and said).
"""

from __future__ import annotations

from runtime_helpers import LoopDir, alive
from serving_helpers import free_port


def compliance_down(ld: LoopDir, harness: str) -> None:
    ld.write_config(
        "hooks:\n"
        f"  - {{name: compliance, url: 'http://127.0.0.1:{free_port()}/hooks', "
        "required: true, on: [input_received], timeoutSeconds: 2}\n", harness=harness)


def test_r6_3_a_stop_goes_through_a_failing_required_hook(ld: LoopDir) -> None:
    compliance_down(ld, "sleep")
    ref = ld.add()
    ld.start(ref)
    ld.cli("poll", "--once")  # launches the sleeping session
    [pid] = ld.session_pids()
    assert alive(pid)

    ld.cli("reply", ref, "/stop", "--actor", "alice")
    ld.cli("poll", "--once")
    assert ld.work(ref)["state"] == "stopped"
    assert not alive(pid)
    [step] = ld.query("SELECT outcome FROM steps WHERE kind='input'")
    assert step["outcome"] == "stopped"
    assert ld.comments(ref)[-1] == (
        f"Stopped by @alice; re-arm with `the-loop start {ref}`.\n\nHook `compliance` "
        "refused this /stop at `input_received` (required hook 'compliance' failed: "
        + ld.events("hooks.refused")[0]["reason"].split("failed: ", 1)[1]
        + "); a /stop is never refused: the refusal is recorded only.")
    [failed] = ld.events("hooks.failed")
    assert failed["hook"] == "compliance" and failed["point"] == "input_received"
    [overridden] = ld.events("input.refusal_overridden")
    assert (overridden["control"], overridden["hook"]) == ("stop", "compliance")
    assert not ld.events("input.refused")


def test_r6_3_a_failing_required_hook_refuses_an_approval_but_never_a_rejection(
        ld: LoopDir) -> None:
    compliance_down(ld, "record")
    ref = ld.add()
    ld.start(ref)
    ld.poll()
    ld.complete(ref)
    assert ld.work(ref)["state"] == "gate"

    assert ld.reply(ref, "/approve") == f"{ref}: refused"  # fail-closed
    assert ld.work(ref)["state"] == "gate" and ld.work(ref)["node"] == "review"
    assert ld.comments(ref)[-1].startswith(
        "Input from @alice was dropped by hook `compliance` at `input_received`: required "
        "hook 'compliance' failed: ")

    assert ld.reply(ref, "/reject add tests") == f"{ref}: rejected"  # never refused
    assert ld.work(ref)["node"] == "write"
    assert "Feedback from @alice:\n\nadd tests" in ld.launches()[-1]["prompt"]
    assert any(c.startswith("Hook `compliance` refused this /reject at `input_received` "
                            "(required hook 'compliance' failed: ") and
               c.endswith("); a rejection always goes through: the refusal is recorded "
                          "only.") for c in ld.comments(ref))
    assert [e["control"] for e in ld.events("input.refusal_overridden")] == ["reject"]
