"""`command:` hooks through a real `poll` (issue 35): a shell script and a Python script each
refuse a pull request's own session (exit 2, the reason on stderr) and prefix the ticket's
prompt (stdout); a script past its timeout is killed with its child, recorded, and the item
goes on — or is refused when the entry is required (R2.6, R6.1, R6.3)."""

from __future__ import annotations

import json
import os
import sys
import time

import pytest

from runtime_helpers import LoopDir

REASON = "pull requests are handled in the ticket's session"

#: POSIX sh and sed only: the body is one line of ASCII JSON, so a string value is
#: `"…"` with `\"` inside; the prompt is put back escaped as it came.
SHELL_HOOK = r"""#!/bin/sh
body=$(cat)
endpoint=$(printf '%s' "$body" | sed -n 's/.*"endpoint":{\([^}]*\)}.*/\1/p')
case "$endpoint" in
  *'"kind":"pull-request"'*) echo "pull requests are handled in the ticket's session" >&2; exit 2 ;;
esac
prompt=$(printf '%s' "$body" | sed -En 's/.*"prompt":"(([^"\\]|\\.)*)".*/\1/p')
printf '{"prompt": "ACME: %s"}\n' "$prompt"
"""

PYTHON_HOOK = """\
import json, sys

request = json.load(sys.stdin)
ctx = request["params"]
if ctx["endpoint"]["kind"] == "pull-request":
    print("pull requests are handled in the ticket's session", file=sys.stderr)
    sys.exit(2)
result = {"prompt": "ACME: " + ctx["prompt"]}
print(json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": result}))
"""


def _refuses_the_pr_session_and_prefixes_the_prompt(ld: LoopDir, entry: str) -> None:
    ld.write_config("hooks:\n" + entry)
    ticket = ld.add("Add a login page")
    pr = ld.add("Login page", "--kind", "pull-request", "--for", ticket)
    ld.start(ticket)
    ld.poll()
    ld.ok("items", "comment", pr, "Please rename the button.", "--author", "bob")
    ld.poll()
    launches = ld.launches()
    assert len(launches) == 2  # the ticket's session, then the review delivered into it
    assert launches[0]["prompt"].startswith("ACME: Write Add a login page")
    assert launches[1]["prompt"].startswith("ACME: ")
    assert "Please rename the button." in launches[1]["prompt"]
    [refused] = ld.events("session.refused")
    assert (refused["endpoint"], refused["hook"]) == (pr, "gate")
    [said] = [c for c in ld.comments(ticket) if "refused" in c]
    assert (f"session of pull request {pr} was refused by hook `gate` at `session_spawn`: "
            f"{REASON}.") in said
    steps = [json.loads(r["record"])["steps"] for r in ld.query(
        "SELECT record FROM decision_log WHERE point = 'session_spawn'")]
    assert {(s["hook"], s["kind"]) for row in steps for s in row} == {("gate", "command")}


def test_a_shell_script_refuses_a_pull_request_session_and_prefixes_a_prompt(
    ld: LoopDir
) -> None:
    ld.write("hooks/gate.sh", SHELL_HOOK).chmod(0o755)
    _refuses_the_pr_session_and_prefixes_the_prompt(
        ld, "  - {name: gate, command: [hooks/gate.sh], on: [session_spawn]}\n")


def test_a_python_script_refuses_a_pull_request_session_and_prefixes_a_prompt(
    ld: LoopDir
) -> None:
    ld.write("hooks/gate.py", PYTHON_HOOK)
    _refuses_the_pr_session_and_prefixes_the_prompt(
        ld, f"  - {{name: gate, command: [{json.dumps(sys.executable)}, hooks/gate.py], "
            "on: [session_spawn]}\n")


SLOW_HOOK = """\
#!/bin/sh
sleep 60 &
echo $! >> child.pids
sleep 60
"""


@pytest.mark.parametrize("required", [False, True])
def test_a_script_past_its_timeout_is_killed_with_its_child_and_the_item_goes_on_unless_required(
    ld: LoopDir, required: bool
) -> None:
    ld.write("hooks/slow.sh", SLOW_HOOK).chmod(0o755)
    ld.write_config("hooks:\n  - {name: slow, command: [hooks/slow.sh], timeoutSeconds: 0.5, "
                    f"on: [work_item_start], required: {json.dumps(required)}}}\n")
    ticket = ld.add("Add a login page")
    ld.start(ticket)
    ld.poll()
    [failed] = ld.events("hooks.failed")
    assert (failed["hook"], failed["point"]) == ("slow", "work_item_start")
    assert failed["error"] == ("hooks/slow.sh ran past timeoutSeconds (0.5 s) and was killed "
                               "with its process group")
    [child] = [int(p) for p in (ld.root / "child.pids").read_text().split()]
    deadline = time.monotonic() + 5
    while _running(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(child)
    if required:
        assert ld.launches() == []
        [said] = [c for c in ld.comments(ticket) if "refused" in c]
        assert "required hook 'slow' failed: hooks/slow.sh ran past timeoutSeconds" in said
    else:
        assert len(ld.launches()) == 1  # the item went on: its session started


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:  # a zombie no longer runs
        return ") Z " not in f.read()


COUNTING_HOOK = """\
#!/bin/sh
cat > /dev/null
echo call >> calls.txt
echo '{"prompt": "counted"}'
"""


def test_replay_answers_a_command_hook_from_the_log_unless_asked_to_call_it(ld: LoopDir
                                                                            ) -> None:
    """A command may have side effects: replay never runs it unless --call-all says so."""
    from test_decision_log import fire_spawns, replay

    ld.write("hooks/count.sh", COUNTING_HOOK).chmod(0o755)
    ld.write_config("hooks:\n  - {name: count, command: [hooks/count.sh], "
                    "on: [session_spawn]}\n")
    fire_spawns(ld, 2)
    calls = ld.root / "calls.txt"
    assert calls.read_text().count("call") == 2
    data = replay(ld)
    assert (data["replayed"], data["changed"]) == (2, 0)
    assert data["stand_ins"] == {"hooks": ["count"], "called": False, "unrecorded": {}}
    assert calls.read_text().count("call") == 2  # not run
    data = replay(ld, "--call-all")
    assert (data["changed"], data["stand_ins"]["called"]) == (0, True)
    assert calls.read_text().count("call") == 4
