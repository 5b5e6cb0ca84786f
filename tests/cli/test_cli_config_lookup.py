"""Finding the config by convention, `--config` anywhere, and the policy folders it declares
(issue 15, items 1, 2, 6 and 8; issue 13, item 7)."""

from __future__ import annotations

import argparse
import json
import pkgutil
from pathlib import Path
from typing import Any

import the_loop.cli as cli_pkg
from the_loop.cli import app

RULE = """\
rules:
  - name: {name}
    on: {on}
    when: "contains(labels, '{label}')"
    set: {{proceed: false, reason: "{label} refused"}}
"""
CASE = """\
cases:
  - name: {label} is refused
    point: {on}
    facts: {{labels: [{label}]}}
    expect: {{proceed: false}}
"""


def policy_folder(where: Path, name: str, on: str = "work_item_start", label: str = "x") -> Path:
    (where / "tests").mkdir(parents=True, exist_ok=True)
    (where / "rules.yaml").write_text(RULE.format(name=name, on=on, label=label), "utf-8")
    (where / "tests" / "cases.yaml").write_text(CASE.format(on=on, label=label), "utf-8")
    return where


def test_config_is_accepted_after_the_command_and_after_its_arguments(
    tmp_path: Path, run_cli: Any, write_config: Any
) -> None:
    cfg = write_config("loop: acme\n", folder=tmp_path / "conf")
    for args in (("hooks", "--config", str(cfg)),
                 ("hooks", "run", "work_item_start", "--config", str(cfg), "--json"),
                 ("--config", "nowhere.yaml", "hooks", "--config", str(cfg))):
        done = run_cli(*args)
        assert done.returncode == 0, (args, done.stderr)
    ran = run_cli("hooks", "run", "work_item_start", "--json", f"--config={cfg}")
    assert json.loads(ran.stdout)["context"]["loop"] == "acme"


def test_a_cli_config_yaml_in_the_working_directory_is_found(
    tmp_path: Path, run_cli: Any, write_config: Any
) -> None:
    write_config("loop: here\n", folder=tmp_path / "ops")
    done = run_cli("hooks", "run", "work_item_start", "--json", cwd=tmp_path / "ops")
    assert json.loads(done.stdout)["context"]["loop"] == "here"


def test_lookup_order_env_then_working_directory_then_its_dot_the_loop(
    tmp_path: Path, run_cli: Any, write_config: Any
) -> None:
    ops = tmp_path / "ops"
    write_config("loop: dot\n", folder=ops / ".the-loop")

    def loop_seen(env: dict[str, str] | None = None) -> str:
        done = run_cli("hooks", "run", "work_item_start", "--json", cwd=ops, env=env)
        assert done.returncode == 0, done.stderr
        return str(json.loads(done.stdout)["context"]["loop"])

    assert loop_seen() == "dot"
    write_config("loop: cwd\n", folder=ops)
    assert loop_seen() == "cwd"
    env_cfg = write_config("loop: env\n", folder=tmp_path / "env")
    # Inside a session the variable names the operator's config: a cli-config.yaml the agent
    # writes into its working directory is never read.
    assert loop_seen({"THE_LOOP_CLI_CONFIG": str(env_cfg)}) == "env"


def test_hooks_run_takes_loop_from_the_config_unless_the_context_gives_it(
    tmp_path: Path, run_cli: Any, write_config: Any
) -> None:
    write_config("loop: acme\n")
    done = run_cli("hooks", "run", "work_item_start", "--context", "-", "--json",
                   stdin='{"loop": "other"}')
    assert json.loads(done.stdout)["context"]["loop"] == "other"


def test_policy_check_and_test_without_dir_use_every_policy_entry_of_the_config(
    tmp_path: Path, run_cli: Any, write_config: Any
) -> None:
    policy_folder(tmp_path / "rules-a", "refuse-a", label="a")
    policy_folder(tmp_path / "rules-b", "refuse-b", label="b")
    write_config("""\
        hooks:
          - {name: first, policy: rules-a}
          - {name: second, policy: rules-b}
        """)
    check = run_cli("policy", "check")
    assert check.returncode == 0, check.stderr
    assert "== policy entry 'first'" in check.stdout and "refuse-a" in check.stdout
    assert "== policy entry 'second'" in check.stdout and "refuse-b" in check.stdout
    test = run_cli("policy", "test", "--json")
    assert test.returncode == 0, test.stdout
    data = json.loads(test.stdout)
    assert data["ok"] is True
    assert [(f["entry"], f["passed"]) for f in data["folders"]] == [("first", 1), ("second", 1)]


def test_policy_check_with_no_folder_anywhere_says_what_to_do(run_cli: Any) -> None:
    done = run_cli("policy", "check")
    assert done.returncode == 1
    assert done.stderr == (
        "the-loop: no policy folder: pass DIR, or run where a cli-config.yaml with a policy: "
        "entry is found (`the-loop init` writes one), or pass --config PATH\n"
    )


def test_a_policy_entry_whose_on_leaves_a_rule_nowhere_to_run_fails_the_load(
    tmp_path: Path, run_cli: Any, write_config: Any
) -> None:
    where = policy_folder(tmp_path / "policies", "refuse-x", on="session_spawn")
    write_config("""\
        hooks:
          - {name: house, policy: policies, on: [work_item_start]}
        """)
    rules = where / "rules.yaml"
    says = (f"{rules}: rule 'refuse-x' runs at session_spawn, which this entry's on: "
            "[work_item_start] leaves out, so it would never run; add its point to on:, or "
            "move the rule to another policy folder")
    check = run_cli("policy", "check")
    assert check.returncode == 1
    assert check.stderr == f"the-loop: policy entry 'house': {says}\n"
    dry = run_cli("hooks", "run", "work_item_start")
    assert dry.returncode == 1
    assert dry.stderr == f"the-loop: hooks[0] ('house') → policy: {says}\n"


def test_read_commands_with_no_config_create_nothing(tmp_path: Path, run_cli: Any) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    for args in (("hooks",), ("hooks", "run", "session_spawn"), ("events",),
                 ("items", "list"), ("items", "show", "1"), ("policy", "check"),
                 ("hooks", "points")):
        run_cli(*args, cwd=empty)
    assert list(empty.iterdir()) == []
    assert list((tmp_path / "_home").iterdir()) == []


def test_every_command_module_is_listed_in_the_command_table() -> None:
    listed = {c.module for c in app.COMMANDS} | {m for m, _ in app.POLICY_SUBCOMMANDS}
    for info in pkgutil.iter_modules(cli_pkg.__path__):
        module = __import__(f"the_loop.cli.{info.name}", fromlist=["register"])
        register = getattr(module, "register", None)
        if callable(register) and info.name != "app":
            assert info.name in listed, f"the_loop.cli.{info.name} is not in COMMANDS"


def test_the_command_table_lists_each_command_as_its_module_registers_it() -> None:
    """`the-loop --help` lists commands from the table without importing their modules:
    the table's name and line must be what each module's register() adds."""
    sub = next(a for a in app.build_parser()._actions
               if isinstance(a, argparse._SubParsersAction))
    assert [(c.dest, c.help) for c in sub._choices_actions] == [
        (c.name, c.help) for c in app.COMMANDS]
    assert list(sub.choices) == [c.name for c in app.COMMANDS]
