"""The policy author's loop end to end through the real CLI (issue 15, "done when"): init,
edit a rule, see the type error, fix it, see with --explain why it does not match a
context, and get `policy test --min-coverage 100` green."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def test_init_edit_type_error_fix_explain_and_full_coverage(
    tmp_path: Path, run_cli: Any
) -> None:
    assert run_cli("init").returncode == 0
    rules = tmp_path / ".the-loop" / "policies" / "10-starts.yaml"
    original = "when: \"contains(labels, 'do-not-automate')\""
    assert original in rules.read_text("utf-8")

    # A newcomer writes the condition the way other languages would.
    rules.write_text(rules.read_text("utf-8").replace(
        original, "when: \"labels == 'do-not-automate' || labels == 'wip'\""), "utf-8")
    check = run_cli("policy", "check")
    assert check.returncode == 1
    assert check.stdout == "== policy entry 'house-rules' (.the-loop/policies)\n"
    assert check.stderr.startswith("the-loop: 2 errors in policy folder ")
    assert (f"{rules}: rule 'refuse-by-label' → when: \"labels == 'do-not-automate' || "
            "labels == 'wip'\": labels == 'do-not-automate' compares labels (a list of "
            "strings) with 'do-not-automate' (a string): they are never equal, so it is always "
            "false. To test whether the list holds it, write contains(labels, "
            "'do-not-automate').") in check.stderr
    assert "write contains(labels, 'wip')." in check.stderr

    # The fix the message names.
    rules.write_text(rules.read_text("utf-8").replace(
        "labels == 'do-not-automate' || labels == 'wip'",
        "contains(labels, 'do-not-automate') || contains(labels, 'wip')"), "utf-8")
    assert run_cli("policy", "check").returncode == 0

    # Why does a ticket labelled `bug` start?
    why = run_cli("hooks", "run", "work_item_start", "--context", "-", "--explain",
                  stdin='{"labels": ["bug"]}')
    assert why.returncode == 0, why.stderr
    assert ("      refuse-by-label: not matched: contains(labels, 'do-not-automate') is false "
            "(labels = [\"bug\"]) and contains(labels, 'wip') is false (labels = [\"bug\"])"
            ) in why.stdout.splitlines()

    # The existing cases still pass and reach every rule; a case for the new label too.
    green = run_cli("policy", "test", "--min-coverage", "100")
    assert green.returncode == 0, green.stdout
    assert "coverage: 100.0% of rules matched by a case (6 of 6)" in green.stdout
    cases = tmp_path / ".the-loop" / "policies" / "tests" / "starts.yaml"
    cases.write_text(cases.read_text("utf-8") + """
  - name: a wip item is refused
    point: work_item_start
    facts: {labels: [wip]}
    expect: {proceed: false}
""", "utf-8")
    final = run_cli("policy", "test", "--min-coverage", "100")
    assert final.returncode == 0, final.stdout
    assert final.stdout.splitlines()[-1] == "16 passed, 0 failed"
