"""Harness sessions through real processes: session_spawn and session_spawned decide the
launch and its announcement; pull-request sessions, respawns and git worktrees (issue 6:
items 5, 7, 8; R2.6, R2.7)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from runtime_helpers import LoopDir

ANNOUNCE_OFF_HOOK = '''
from the_loop.sdk.hooks import LifecycleHooks, SessionSpawned


class Quiet(LifecycleHooks):
    def session_spawned(self, ctx: SessionSpawned) -> SessionSpawned:
        ctx.announce = False
        return ctx
'''


def test_r2_6_spawn_refused_by_a_policy_rule_starts_no_process(ld: LoopDir) -> None:
    """A `policies/` rule on session_spawn with proceed false: no harness process, one
    marked comment naming the hook, hooks.refused, the item blocked; not retried."""
    ld.write("policies/spawn.yaml", """
        rules:
          - name: sessions-paused
            on: session_spawn
            set:
              proceed: false
              reason: "sessions are paused for {{ work_item.ref }}"
    """)
    ld.write_config("hooks:\n  - {name: house, policy: policies}\n")
    ref = ld.add()
    ld.start(ref)
    ld.poll()

    assert ld.launches() == [] and ld.query("SELECT * FROM sessions") == []
    assert "session.launched" not in ld.names()
    [point] = ld.points("session_spawn")
    assert point["decisions"]["proceed"] is False
    assert point["steps"][0]["rules"] == ["sessions-paused"]
    [refused] = ld.events("hooks.refused")
    assert (refused["point"], refused["hook"]) == ("session_spawn", "house")
    assert ld.comments(ref, raw=True) == [
        "A session launch for this work item was refused by hook `house` at `session_spawn`: "
        f"sessions are paused for {ref}\n\n"
        f"<!-- the-loop:{ld.query('SELECT key FROM steps WHERE outcome=?', 'refused')[0]['key']}"
        " -->"]
    assert ld.work(ref)["state"] == "blocked"

    ld.poll()
    assert len(ld.points("session_spawn")) == 1 and len(ld.comments(ref)) == 1


def test_r2_7_r7_1_announce_false_skips_the_session_comment_only(ld: LoopDir) -> None:
    """announce: false at session_spawned: no "session started" comment; the session runs."""
    ld.write("hooks/quiet.py", ANNOUNCE_OFF_HOOK)
    ld.write_config("hooks:\n  - {name: quiet, path: hooks/quiet.py}\n")
    ref = ld.add()
    ld.start(ref)
    ld.poll()

    assert len(ld.launches()) == 1
    [session] = ld.query("SELECT * FROM sessions")
    [launched] = ld.events("session.launched")
    assert launched["session_id"] == session["id"]
    [point] = ld.points("session_spawned")
    assert point["decisions"] == {"announce": False}
    assert "session.announced" not in ld.names()
    assert ld.comments(ref) == []
    assert ld.work(ref)["state"] == "running"
    assert Path(session["log"]).read_text().startswith("recorder: got")


PR_POLICY = """
    rules:
      - name: no-pr-sessions
        on: session_spawn
        when: "endpoint.kind == 'pull-request'"
        set: {proceed: false, reason: "pull requests are handled in the ticket's session"}
"""


def test_r2_6_pull_request_session_refused_goes_to_the_ticket_session(ld: LoopDir) -> None:
    """A review on the ticket's pull request would launch the PR's own session (endpoint =
    the PR); a rule refuses it, so the review is delivered into the ticket's session."""
    ld.write("policies/prs.yaml", PR_POLICY)
    ld.write_config("hooks:\n  - {name: house, policy: policies}\n" + ld.add_recorder())
    ticket = ld.add("Add a login page")
    pr = ld.add("Login page", "--kind", "pull-request", "--for", ticket)
    ld.start(ticket)
    ld.poll()
    ld.ok("items", "comment", pr, "Please rename the button.", "--author", "bob")
    ld.poll()

    spawns = ld.seen("session_spawn")
    assert [(s["endpoint"]["ref"], s["endpoint"]["kind"], s["respawn"]) for s in spawns] == [
        (ticket, "issue", False), (pr, "pull-request", True), (ticket, "issue", True)]
    assert all(s["work_item"]["ref"] == ticket for s in spawns)
    [review] = ld.seen("input_received")
    assert (review["kind"], review["actor"], review["text"]) == (
        "review", "bob", "Please rename the button.")
    [refused] = ld.events("session.refused")
    assert (refused["endpoint"], refused["hook"]) == (pr, "house")
    launches = ld.launches()
    assert len(launches) == 2
    assert "Please rename the button." in launches[1]["prompt"]
    assert launches[1]["env"]["THE_LOOP_WORK_ITEM"] == ticket
    assert [r["endpoint"] for r in ld.query("SELECT endpoint FROM sessions ORDER BY started")] \
        == [ticket, ticket]
    assert ld.comments(pr, author="the-loop") == []
    [said] = [c for c in ld.comments(ticket) if "refused" in c]  # one, naming hook and reason
    assert f"session of pull request {pr} was refused by hook `house` at `session_spawn`: " \
           "pull requests are handled in the ticket's session." in said
    assert ld.work(ticket)["state"] == "running"


def test_r2_6_a_refused_pull_request_session_is_said_once_on_the_ticket_after_a_crash(
        ld: LoopDir) -> None:
    """The redirected launch posts one marked comment on the ticket naming the hook and its
    reason: a loop killed just after posting it redoes the step without posting it, or
    recording `session.refused`, again."""
    ld.write("policies/prs.yaml", PR_POLICY)
    ld.write_config("hooks:\n  - {name: house, policy: policies}\n")
    ticket = ld.add("Add a login page")
    pr = ld.add("Login page", "--kind", "pull-request", "--for", ticket)
    ld.start(ticket)
    ld.poll()
    ld.ok("items", "comment", pr, "Please rename the button.", "--author", "bob")
    crashed = ld.cli("poll", "--once", env={"THE_LOOP_FAILPOINT": "after-refusal-comment"},
                     ok=False)
    assert crashed.returncode == 86, crashed.stderr
    ld.poll()  # redoes the refused launch: the ticket's session takes the review

    said = [c for c in ld.comments(ticket) if "refused" in c]
    assert said == [f"A session of pull request {pr} was refused by hook `house` at "
                    "`session_spawn`: pull requests are handled in the ticket's session. Its "
                    "input goes to this work item's session instead."]
    assert ld.comments(pr) == []
    launches = ld.launches()
    assert len(launches) == 2 and "Please rename the button." in launches[1]["prompt"]
    assert ld.work(ticket)["state"] == "running"
    # recorded once, as it was said once (issue 30 item 8: the redo emitted it again)
    assert [r["endpoint"] for r in ld.events("session.refused")] == [pr]


def test_a_pull_request_session_launches_with_the_pr_as_endpoint(ld: LoopDir) -> None:
    """Without a refusal the review launches a session whose endpoint is the PR."""
    ld.write_config("hooks:\n" + ld.add_recorder())
    ticket = ld.add("Add a login page")
    pr = ld.add("Login page", "--kind", "pull-request", "--for", ticket)
    ld.start(ticket)
    ld.poll()
    ld.ok("items", "comment", pr, "Nit: spacing.", "--author", "bob")
    ld.poll()
    assert [s["endpoint"]["ref"] for s in ld.seen("session_spawned")] == [ticket, pr]
    assert [r["endpoint"] for r in ld.query("SELECT endpoint FROM sessions ORDER BY started")] \
        == [ticket, pr]


def test_dead_session_is_respawned_once_through_session_spawn(ld: LoopDir) -> None:
    """A harness that exits without finishing its node is respawned once (respawn: true at
    session_spawn), then the item is blocked with a comment."""
    ld.write_config("hooks:\n" + ld.add_recorder())
    ref = ld.add()
    ld.start(ref)
    ld.poll()
    ld.poll()  # reaps the first session, respawns
    ld.poll()  # reaps the respawn: blocked
    assert [s["respawn"] for s in ld.seen("session_spawn")] == [False, True]
    assert len(ld.launches()) == 2
    assert ld.work(ref)["state"] == "blocked"
    assert "ended twice without finishing write" in ld.comments(ref)[-1]


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid",
         "-c", "init.defaultBranch=main", *args],
        cwd=cwd, check=True, capture_output=True, text=True,
    ).stdout


def test_workspace_is_a_git_worktree_when_repository_names_a_local_repo(ld: LoopDir) -> None:
    """`repository:` → the session runs in a git worktree on branch loop/<repo>-<n>."""
    repo = ld.root / "app"
    repo.mkdir()
    git("init", "-q", cwd=repo)
    (repo / "README.md").write_text("app\n")
    git("add", "README.md", cwd=repo)
    git("commit", "-q", "-m", "init", cwd=repo)
    ld.write_config("repository: app\n")
    ref = ld.add()
    ld.start(ref)
    ld.poll()

    [prepared] = ld.events("workspace.prepared")
    path = Path(prepared["path"])
    assert prepared["git"] is True
    assert (path / ".git").is_file() and (path / "README.md").read_text() == "app\n"
    assert git("rev-parse", "--abbrev-ref", "HEAD", cwd=path).strip() == "loop/app-1"
    assert str(path) in git("worktree", "list", cwd=repo)
    [launch] = ld.launches()
    assert launch["cwd"] == str(path)
    assert ld.work(ref)["state"] == "running"


@pytest.mark.parametrize(("config", "named"), [
    ("repository: not-a-repo\n", "cannot create a git worktree for local:acme/app#1"),
    ("harnesses:\n  - {name: gone, command: [no-such-harness-binary]}\n",
     "cannot launch 'no-such-harness-binary': No such file or directory"),
])
def test_a_session_that_cannot_start_blocks_the_item_and_the_poller_goes_on(
        ld: LoopDir, config: str, named: str) -> None:
    """A workspace or harness failure is the item's, not the daemon's: poll exits 0, the
    item is blocked with one comment saying why, and it is not retried."""
    (ld.root / "not-a-repo").mkdir()
    ld.config.write_text("loop: acme\nstateDir: .the-loop\n" + config, encoding="utf-8")
    ref = ld.add()
    ld.start(ref)
    done = ld.poll()
    assert "Traceback" not in done.stderr
    assert ld.work(ref)["state"] == "blocked"
    [comment] = ld.comments(ref)
    assert comment.startswith("A session for this work item could not start: ")
    assert named in comment and f"re-arm with `the-loop start {ref}`" in comment
    [failed] = ld.events("session.failed")
    assert named in failed["error"]
    assert ld.query("SELECT * FROM sessions") == []

    ld.poll()
    assert len(ld.comments(ref)) == 1 and len(ld.events("session.failed")) == 1


def test_comments_on_a_pull_request_before_arming_are_not_input(ld: LoopDir) -> None:
    """Input is what people write after the arming, on the ticket and its pull requests."""
    ticket = ld.add("Add a login page")
    pr = ld.add("Login page", "--kind", "pull-request", "--for", ticket)
    ld.run("items", "comment", ticket, "old note", "--author", "bob")
    ld.run("items", "comment", pr, "old review", "--author", "bob")
    ld.start(ticket)
    ld.poll()
    assert ld.points("input_received") == []
    assert len(ld.launches()) == 1

    ld.run("items", "comment", pr, "new review", "--author", "bob")
    ld.poll()
    [point] = ld.points("input_received")
    assert point["decisions"]["text"] == "new review"


def test_reply_on_a_pull_request_is_input_for_its_ticket(ld: LoopDir) -> None:
    """`the-loop reply PR TEXT`: delivered into the ticket's work with the PR as endpoint
    (it used to be ignored, and the poller then skipped the comment too)."""
    ticket = ld.add("Add a login page")
    pr = ld.add("Login page", "--kind", "pull-request", "--for", ticket)
    ld.start(ticket)
    ld.poll()
    assert ld.reply(pr, "Please add a test.", actor="bob") == f"{pr}: resumed"
    [launched] = [r for r in ld.events("session.launched") if r["respawn"]]
    assert launched["endpoint"] == pr and launched["work_item"] == ticket
    assert "Please add a test." in ld.launches()[-1]["prompt"]
