"""Issue 20, item 4: a secret a rule hid from the agent never reaches a case file that
`policy replay --write-cases` writes, and case files are owner-only whatever the umask."""

from __future__ import annotations

import json
import os
import stat

from runtime_helpers import LoopDir

GHP = "ghp_" + "A1b2C3d4E5" * 3 + "F6g7H8"  # the shape of a GitHub personal access token
HIDE = """
rules:
  - name: hide-pasted-tokens
    on: input_received
    when: "regex_match('ghp_[A-Za-z0-9]{36}', text)"
    set: {text: "(a GitHub token was pasted here and removed)"}
"""


def test_issue20_item4_write_cases_never_copies_a_text_a_rule_replaced_and_writes_0600(
        ld: LoopDir) -> None:
    """A pasted token a rule replaces: the decision log records that the rule replaced the
    text; replay writes the other input's case, skips this one with a sentence saying why,
    and the file is 0600 under a 022 umask and holds no part of the token."""
    ld.write("policies/hide.yaml", HIDE)
    ld.write_config("hooks:\n  - {name: house, policy: policies}\n")
    ref = ld.add()
    ld.start(ref)
    ld.poll()
    ld.reply(ref, "Looks good so far")
    ld.reply(ref, f"use this one: {GHP}")
    assert GHP not in "".join(launch["prompt"] for launch in ld.launches())
    [hidden] = [json.loads(r["record"]) for r in ld.query(
        "SELECT record FROM decision_log WHERE point='input_received' ORDER BY id")
        if GHP in r["record"]]
    assert [(s["hook"], s.get("replaced")) for s in hidden["steps"]] == [("house", ["text"])]
    old = os.umask(0o022)
    try:
        code, out, err = ld.run("policy", "replay", "--write-cases", "policies")
    finally:
        os.umask(old)
    assert code == 0, err
    [written] = list((ld.root / "policies" / "tests").glob("replay-*.yaml"))
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    text = written.read_text(encoding="utf-8")
    assert "Looks good so far" in text
    assert GHP[:8] not in text
    assert f"wrote 1 case(s) to tests/{written.name} in the policy folder " in out
    assert (f"(input_received, {ref}): not written: hook `house` replaced text when it ran (a "
            "redaction, perhaps), and the case would carry the text it replaced; write this "
            "case by hand with a made-up value") in out
    assert GHP not in out
