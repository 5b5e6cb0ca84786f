"""`policy eval DIR` and `hooks run --policy/--path/--url` (issue 25.2): one policy folder or
one hook run on one context with no config; a ref fills its work item; long values are cut
for a person (issue 25.6)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from conftest import CliRun
from the_loop.hooks.engine.executor import LifecycleHooks
from the_loop.hooks.engine.points import SessionSpawn
from the_loop.hooks.serving.server import HookServer

RULES = """
rules:
  - name: no-bots
    on: work_item_start
    when: "ends_with(actor, '[bot]')"
    set:
      proceed: false
      reason: "bots do not start {{ work_item.repository }}#{{ work_item.number }}"
  - name: maintainers-only
    on: work_item_start
    when: "!contains(['alice', 'bob'], actor)"
    mode: audit
    set:
      reason: "{{ actor }} is not a maintainer"
  - name: preamble
    on: session_spawn
    set:
      prompt_prefix: "[{{ work_item.owner }}/{{ work_item.repo }} {{ work_item.url }}] "
"""


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    policy = tmp_path / "rules"
    policy.mkdir()
    (policy / "house.yaml").write_text(textwrap.dedent(RULES), encoding="utf-8")
    return policy


def test_policy_eval_runs_a_folder_with_no_config_and_fills_the_work_item_from_its_ref(
    folder: Path, run_cli: CliRun
) -> None:
    result = run_cli("policy", "eval", str(folder), "--point", "work_item_start", "--facts",
                     "actor=dependabot[bot]", "work_item=github:acme/app#12")
    assert result.returncode == 0, result.stderr
    assert "rules: no-bots" in result.stdout
    assert 'reason = "bots do not start acme/app#12"' in result.stdout
    assert "proceed = false" in result.stdout


def test_policy_eval_json_gives_the_decisions_and_the_rules_that_matched(
    folder: Path, run_cli: CliRun, tmp_path: Path
) -> None:
    context = tmp_path / "ctx.json"
    context.write_text(json.dumps({"actor": "mallory",
                                   "work_item": {"ref": "github:acme/app#7"}}))
    result = run_cli("policy", "eval", str(folder), "--point", "work_item_start",
                     "--context", str(context), "--json", "--explain")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["decisions"] == {"proceed": True, "reason": ""}
    assert doc["rules"] == [] and doc["audit"] == ["maintainers-only"]
    assert doc["ok"] is True and doc["error"] is None
    explained = {t["rule"]: t for t in doc["explain"]}
    assert explained["maintainers-only"]["would_set"] == {
        "reason": "mallory is not a maintainer"}
    assert explained["no-bots"]["outcome"] == "not matched"


def test_policy_eval_reads_the_context_from_stdin_and_facts_win(
    folder: Path, run_cli: CliRun
) -> None:
    result = run_cli("policy", "eval", str(folder), "--point", "session_spawn", "--context",
                     "-", "--facts", "work_item.kind=pull-request", "--json",
                     stdin='{"prompt": "go", "work_item": "gitlab:acme/app#3"}')
    assert result.returncode == 0, result.stderr
    prompt = json.loads(result.stdout)["decisions"]["prompt"]
    assert prompt == "[acme/app https://gitlab.com/acme/app/pull/3] go"


@pytest.mark.parametrize(("argv", "says"), [
    (["missing", "--point", "session_spawn"], "missing: nothing at "),
    (["rules", "--point", "sesion_spawn"],
     "--point: 'sesion_spawn' is not a lifecycle point; did you mean 'session_spawn'?"),
    (["rules", "--point", "session_spawn", "--facts", "actr=x"],
     "--facts actr: session_spawn has no field 'actr' (did you mean 'actor'?)"),
    (["rules", "--point", "session_spawn", "--facts", "respawn=maybe"],
     "--facts respawn=maybe: expected true or false"),
    (["rules", "--point", "session_spawn", "--facts", "work_item.numbr=3"],
     "--facts work_item.numbr: work_item has no field 'numbr' (did you mean 'number'?)"),
    (["rules", "--point", "session_spawn", "--facts", "work_item.number=three"],
     "--facts work_item.number=three: expected a whole number"),
    (["rules", "--point", "session_spawn", "--facts", "actor"],
     "--facts actor: expected NAME=VALUE"),
    (["rules/house.yaml", "--point", "session_spawn"], "not a folder; pass the folder"),
    (["rules", "--point", "session_spawn", "--context", "rules"], "--context rules: cannot "),
])
def test_policy_eval_refuses_bad_input_in_one_line(
    folder: Path, run_cli: CliRun, argv: list[str], says: str
) -> None:
    result = run_cli("policy", "eval", *argv)
    assert result.returncode in (1, 2)
    assert says in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr


def test_policy_eval_exits_1_when_the_policy_fails_on_the_context(
    tmp_path: Path, run_cli: CliRun
) -> None:
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "r.yaml").write_text(
        "rules:\n  - name: pattern\n    on: session_spawn\n"
        "    when: \"glob_match(actor, prompt)\"\n    set:\n      proceed: false\n")
    argv = ["policy", "eval", "p", "--point", "session_spawn", "--facts", "actor=" + "*" * 10001]
    result = run_cli(*argv, "--json")
    assert result.returncode == 1, result.stdout
    doc = json.loads(result.stdout)
    assert doc["ok"] is False and "pattern" in doc["error"]
    text = run_cli(*argv)
    assert text.returncode == 1 and "error: " in text.stdout


def test_long_values_are_cut_with_their_length_unless_full(
    folder: Path, run_cli: CliRun
) -> None:
    long = "step " * 200
    base = ["hooks", "run", "session_spawn", "--policy", str(folder), "--context", "-",
            "--facts", "work_item=github:acme/app#1", "--explain"]
    cut = run_cli(*base, stdin=json.dumps({"prompt": long}))
    assert cut.returncode == 0, cut.stderr
    final = next(line for line in cut.stdout.splitlines() if line.startswith("  prompt = "))
    assert final.startswith('  prompt = "[acme/app https://github.com/acme/app/issues/1] step')
    assert "…" in final and "(1,048 characters; --full shows all)" in final
    assert len(final) < 200
    whole = run_cli(*base, "--full", stdin=json.dumps({"prompt": long}))
    assert json.dumps("[acme/app https://github.com/acme/app/issues/1] " + long) in whole.stdout
    as_json = run_cli(*base[:-1], "--json", stdin=json.dumps({"prompt": long}))
    assert json.loads(as_json.stdout)["context"]["prompt"].endswith(long)


class Shout(LifecycleHooks):
    def session_spawn(self, ctx: SessionSpawn) -> SessionSpawn:
        ctx.prompt = ctx.prompt.upper() + f" ({ctx.work_item.repository})"
        return ctx


def test_hooks_run_url_calls_one_hook_server_with_no_config(
    run_cli: CliRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("H25B_SERVER_TOKEN", "s3cret-token")
    with HookServer(Shout(), token_env="H25B_SERVER_TOKEN") as server:
        ok = run_cli("hooks", "run", "session_spawn", "--url", server.url, "--token-env",
                     "H25B_TOKEN", "--facts", "prompt=fix it", "work_item=local:acme/app#4",
                     env={"H25B_TOKEN": "s3cret-token"})
        refused = run_cli("hooks", "run", "session_spawn", "--url", server.url, "--facts",
                          "prompt=fix it")
    assert ok.returncode == 0, ok.stderr
    assert 'prompt = "FIX IT (acme/app)"' in ok.stdout
    assert "url " in ok.stdout and "changed" in ok.stdout
    assert refused.returncode == 0 and "HTTP 401" in refused.stdout
    assert "s3cret-token" not in ok.stdout + ok.stderr + refused.stdout + refused.stderr


@pytest.mark.parametrize(("argv", "says"), [
    (["--url", "http://example.com/hooks"], "--url: plain http:// is only allowed to a "
                                             "loopback host"),
    (["--url", "http://127.0.0.1:9/h", "--token-env", "not a name"], "--token-env: "),
    (["--token-env", "TOKEN"], "--token-env names the token of a --url hook; pass --url"),
    (["--policy", "nowhere"], "--policy nowhere: nothing at "),
    (["--path", "nowhere.py"], "--path nowhere.py: nothing at "),
])
def test_hooks_run_one_hook_refuses_bad_options_in_one_line(
    run_cli: CliRun, argv: list[str], says: str
) -> None:
    result = run_cli("hooks", "run", "session_spawn", *argv)
    assert result.returncode in (1, 2)
    assert says in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_hooks_run_path_runs_one_class_with_no_config(tmp_path: Path, run_cli: CliRun) -> None:
    (tmp_path / "shout.py").write_text(textwrap.dedent("""
        from the_loop.sdk.hooks import LifecycleHooks

        class Shout(LifecycleHooks):
            def session_spawn(self, ctx):
                ctx.prompt = f"{ctx.prompt.upper()} #{ctx.work_item.number}"
                return ctx
    """))
    (tmp_path / "cli-config.yaml").write_text("hooks:\n  - name: x\n    path: missing.py\n")
    result = run_cli("hooks", "run", "session_spawn", "--path", "shout.py", "--json",
                     "--facts", "prompt=go", "work_item=github:acme/app#9")
    assert result.returncode == 0, result.stderr  # the config's broken entry is not loaded
    doc = json.loads(result.stdout)
    assert doc["context"]["prompt"] == "GO #9"
    assert [step["hook"] for step in doc["trace"]] == ["path"]


PREFIX_CLASS = """
from the_loop.sdk.hooks import LifecycleHooks

class Prefix(LifecycleHooks):
    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def session_spawn(self, ctx):
        ctx.prompt = self.prefix + ctx.prompt
        return ctx
"""


def test_hooks_run_path_with_gives_the_class_its_constructor_arguments(
    tmp_path: Path, run_cli: CliRun
) -> None:
    (tmp_path / "prefix.py").write_text(PREFIX_CLASS)
    result = run_cli("hooks", "run", "session_spawn", "--path", "prefix.py", "--json",
                     "--with", '{"prefix": "ACME: "}', "--facts", "prompt=go")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["context"]["prompt"] == "ACME: go"


@pytest.mark.parametrize(("argv", "says"), [
    ([], "--with: constructing Prefix(**with) failed: TypeError: "),
    (["--with", "{prefix"], "--with: not JSON ("),
    (["--with", '["x"]'], "--with: expected a JSON object of constructor keyword arguments"),
])
def test_hooks_run_path_with_a_missing_or_bad_argument_names_with(
    tmp_path: Path, run_cli: CliRun, argv: list[str], says: str
) -> None:
    (tmp_path / "prefix.py").write_text(PREFIX_CLASS)
    result = run_cli("hooks", "run", "session_spawn", "--path", "prefix.py", *argv)
    assert result.returncode in (1, 2)
    assert says in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_hooks_run_with_without_path_is_a_usage_error(folder: Path, run_cli: CliRun) -> None:
    result = run_cli("hooks", "run", "session_spawn", "--policy", str(folder),
                     "--with", '{"prefix": "x"}')
    assert result.returncode == 2
    assert "--with gives a class its constructor arguments; pass --path FILE too" in \
        result.stderr


def test_hooks_run_at_a_point_no_hook_handles_says_where_each_runs(
    tmp_path: Path, run_cli: CliRun
) -> None:
    (tmp_path / "prefix.py").write_text(PREFIX_CLASS)
    result = run_cli("hooks", "run", "phase_changed", "--path", "prefix.py",
                     "--with", '{"prefix": ""}')
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[:2] == [
        "phase_changed: 0 hook(s) run: none",
        "  none handles phase_changed: path runs at session_spawn",
    ]


def test_policy_test_explain_cuts_a_long_fact_unless_full(folder: Path, run_cli: CliRun) -> None:
    long = "word " * 100
    (folder / "tests").mkdir()
    (folder / "tests" / "long.yaml").write_text(json.dumps({"cases": [{
        "name": "a long actor", "point": "work_item_start",
        "facts": {"actor": long, "work_item": {"ref": "github:acme/app#1"}},
        "expect": {"proceed": True}}]}), encoding="utf-8")
    cut = run_cli("policy", "test", str(folder), "--explain")
    assert cut.returncode == 0, cut.stdout
    assert "(500 characters; --full shows all)" in cut.stdout
    assert json.dumps(long) not in cut.stdout
    whole = run_cli("policy", "test", str(folder), "--explain", "--full")
    assert json.dumps(long) in whole.stdout




def test_i30_17_policy_eval_after_a_run_time_failure_names_the_rule_and_what_required_does(
    tmp_path: Path, run_cli: CliRun
) -> None:
    """It printed `final decisions: proceed = true` (what a chain that does not require the
    policy applies) as if the policy had decided it."""
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "r.yaml").write_text(textwrap.dedent("""\
        rules:
          - name: bot-actors
            on: input_received
            when: "regex_match(actor, 'x')"
            set: {proceed: false, reason: "bots may not"}
          - name: bot-phases
            on: phase_changed
            when: "regex_match(actor, 'x')"
            set: {notify: false}
    """), encoding="utf-8")
    argv = ["policy", "eval", "p", "--point", "input_received", "--facts", "actor=a("]
    text = run_cli(*argv, "--full")
    assert text.returncode == 1
    out = text.stdout
    assert "final decisions:" not in out
    assert ("rule 'bot-actors' FAILED at input_received, so the policy decided nothing. Not "
            "required (the default), the chain records the failure and skips the policy: the "
            "decisions keep their incoming values:\n  text = \"\"\n  proceed = true\n") in out
    required = out.split("With required: true, the chain refuses:\n", 1)[1]
    assert required.startswith('  text = ""\n  proceed = false\n  reason = "required hook '
                               "'policy' failed: policy rule 'bot-actors'")
    doc = json.loads(run_cli(*argv, "--json").stdout)
    assert (doc["ok"], doc["failed_rule"]) == (False, "bot-actors")
    assert doc["decisions"]["proceed"] is True
    assert doc["decisions_if_required"]["proceed"] is False
    elsewhere = run_cli("policy", "eval", "p", "--point", "phase_changed", "--facts", "actor=a(")
    assert ("With required: true, nothing more (phase_changed has no proceed to refuse): the "
            "failure is recorded:\n  notify = true\n") in elsewhere.stdout
