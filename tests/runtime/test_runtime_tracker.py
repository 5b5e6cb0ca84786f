"""The local tracker as a person at a terminal uses it: `the-loop items …` (issue 6, item 1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runtime_helpers import LoopDir


def test_items_add_list_show_comment_label_close_round_trip(ld: LoopDir) -> None:
    """Each subcommand works on the embedded tracker in its own process; refs are local:…#N."""
    ticket = ld.add("Add a login page", "--body", "Users sign in with email.",
                    "--label", "ui", "--author", "carol")
    assert ticket == "local:acme/app#1"
    assert ld.cli("items", "comment", "#1", "Looks right to me", "--author", "bob").stdout \
        .startswith("comment #")
    ld.cli("items", "label", "1", "loop")
    assert ld.cli("items", "close", "#1", "--actor", "dave").stdout.strip() == \
        "local:acme/app#1 closed"

    listed = ld.cli("items", "list").stdout
    assert "local:acme/app#1" in listed and "Add a login page" in listed
    assert "[loop, ui]" in listed and "closed" in listed
    shown = ld.cli("items", "show", "local:acme/app#1").stdout
    assert "Users sign in with email." in shown
    assert "@bob" in shown and "Looks right to me" in shown
    assert "labels: loop, ui" in shown

    # The rest of the surface, in-process (same code, fewer interpreters).
    assert ld.run("items", "label", "1", "ui", "--remove")[0] == 0
    assert ld.item(ticket)["labels"] == ["loop"]
    assert "already closed" in ld.run("items", "close", "#1")[1]
    assert ld.run("items", "add", "Login page", "--kind", "pull-request", "--for", "#1")[1] \
        == "local:acme/app#2\n"
    open_only = ld.run("items", "list", "--state", "open")[1]
    assert "local:acme/app#1 " not in open_only and "local:acme/app#2" in open_only
    assert "local:acme/app#1 " in ld.run("items", "list", "--state", "closed")[1]


def test_items_show_json_gives_ref_title_kind_state_labels_comments(ld: LoopDir) -> None:
    """The documented --json shape: ref, title, kind, state, labels, comments(author, body)."""
    ref = ld.run("items", "add", "Fix the footer", "--label", "bug")[1].strip()
    ld.run("items", "comment", ref, "first", "--author", "alice")
    ld.run("items", "comment", ref, "second", "--author", "bob")
    ld.run("items", "close", ref, "--actor", "alice")
    pr = ld.run("items", "add", "The fix", "--kind", "pull-request", "--for", ref)[1].strip()

    shown = json.loads(ld.cli("items", "show", ref, "--json").stdout)
    assert {k: shown[k] for k in ("ref", "title", "kind", "state", "labels")} == {
        "ref": "local:acme/app#1", "title": "Fix the footer", "kind": "issue",
        "state": "closed", "labels": ["bug"],
    }
    assert [(c["author"], c["body"]) for c in shown["comments"]] == [
        ("alice", "first"), ("bob", "second"),
    ]
    listed = json.loads(ld.cli("items", "list", "--json").stdout)
    assert [(i["ref"], i["kind"], i["state"]) for i in listed] == [
        ("local:acme/app#1", "issue", "closed"), (pr, "pull-request", "open"),
    ]
    assert listed[1]["for"] == "local:acme/app#1"


@pytest.mark.parametrize(("args", "message"), [
    (("items", "show", "#9"), "no work item local:acme/app#9; list them with"),
    (("items", "show", "nope"), "'nope' is not a work item ref; expected local:owner/repo#N"),
    (("items", "add", " "), "a work item needs a non-empty title"),
    (("items", "add", "x", "--for", "#1"), "--for links a pull request to its ticket"),
])
def test_items_user_errors_exit_1_naming_the_ref_or_fix(ld: LoopDir, args: tuple[str, ...],
                                                          message: str) -> None:
    """A wrong ref or a malformed add exits 1 with a message that says what to do."""
    assert ld.run("items", "add", "one ticket")[0] == 0
    code, _, err = ld.run(*args)
    assert code == 1
    assert message in err


def test_items_with_no_config_section_use_the_embedded_default(tmp_path: Path) -> None:
    """A config with only loop and stateDir still has a tracker (acme/app by default)."""
    with LoopDir(tmp_path) as ld:
        ld.config.write_text("loop: acme\nstateDir: .the-loop\n", encoding="utf-8")
        assert ld.run("items", "add", "X") == (0, "local:acme/app#1\n", "")
        assert (tmp_path / ".the-loop" / "loop.db").is_file()
        assert "local:acme/app#1" in ld.run("items", "list")[1]
