"""Issue 11 rule 6: unbounded input at load and at run time, driven through the real CLI.

YAML aliases past a budget, values quoted only in part, a load linear in the rules, regular
expressions that cannot backtrack, and policy folders holding links and special files.
"""

from __future__ import annotations

import json
import os
import socket
import textwrap
from pathlib import Path

import pytest

from conftest import CliRun
from the_loop import yamlsafe

#: 9 levels of 9 aliases: about 3.9e8 "lol" strings once expanded, in 342 bytes.
LAUGHS = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{chr(c)}: &{chr(c)} [{','.join(['*' + chr(c - 1)] * 9)}]\n"
    for c in range(ord("b"), ord("j"))
)


def _policy(tmp_path: Path, rules: str, name: str = "rules.yaml") -> Path:
    folder = tmp_path / "policies"
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(textwrap.dedent(rules), encoding="utf-8")
    return folder


def _one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


# ------------------------------------------------------------------------- YAML aliases

def test_rule6_billion_laughs_in_cli_config_is_refused_with_one_line(
        tmp_path: Path, run_cli: CliRun) -> None:
    config = tmp_path / "cli-config.yaml"
    config.write_text("loop: acme\n" + LAUGHS, encoding="utf-8")
    done = run_cli("--config", str(config), "hooks")
    assert done.returncode == 1
    line = _one_line(done.stderr)
    assert line.startswith(f"the-loop: {config}: not valid YAML at line ")
    assert f"aliases expand this document past {yamlsafe.ALIAS_BUDGET} extra nodes" in line


def test_rule6_billion_laughs_in_a_policy_file_is_a_load_error(
        tmp_path: Path, run_cli: CliRun) -> None:
    folder = _policy(tmp_path, LAUGHS + "rules: *i\n")
    done = run_cli("policy", "check", str(folder))
    assert done.returncode == 1
    line = _one_line(done.stderr)
    assert line.startswith(f"the-loop: {folder / 'rules.yaml'}: not valid YAML at line ")
    assert "aliases expand this document past" in line


def test_rule6_ordinary_anchors_and_merges_still_load(tmp_path: Path, run_cli: CliRun) -> None:
    folder = _policy(tmp_path, """\
        rules:
          - &base {name: one, on: session_spawn, set: {prompt_prefix: "House rules. "}}
          - {<<: *base, name: two}
    """)
    done = run_cli("policy", "check", str(folder), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["folders"][0]["rules"] == 2


def test_rule6_the_alias_check_counts_each_node_once() -> None:
    """Many aliases to one small anchor are fine while their expansion stays in budget."""
    text = "x: &x [1, 2]\ny: [" + ", ".join(["*x"] * 1000) + "]\n"
    assert len(yamlsafe.load(text)["y"]) == 1000
    with pytest.raises(yamlsafe.TooLargeError):
        yamlsafe.load("x: &x [" + ", ".join(["1"] * 100) + "]\ny: ["
                      + ", ".join(["*x"] * 200) + "]\n")


# ----------------------------------------------------------------- bounded error messages

def test_rule6_error_messages_quote_only_a_prefix_of_a_huge_value(
        tmp_path: Path, run_cli: CliRun) -> None:
    config = tmp_path / "cli-config.yaml"
    config.write_text("loop: [" + ", ".join(["abcdefgh"] * 200_000) + "]\n", encoding="utf-8")
    done = run_cli("--config", str(config), "hooks")
    assert done.returncode == 1
    line = _one_line(done.stderr)
    assert line.startswith(f"the-loop: {config}: loop must be a string (got ['abcdefgh', ")
    assert len(line) < len(str(config)) + 200


def test_rule6_a_huge_rule_name_is_quoted_only_in_part(tmp_path: Path, run_cli: CliRun) -> None:
    folder = _policy(tmp_path, f"rules:\n  - {{name: {'X' * 100_000}, on: nowhere}}\n")
    done = run_cli("policy", "check", str(folder))
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert len(done.stderr) < 3000
    assert "(100000 characters)" in done.stderr


# ------------------------------------------------------------------ linear policy load

def test_rule6_a_16kb_dotted_path_fails_the_load_with_a_bounded_message(
        tmp_path: Path, run_cli: CliRun) -> None:
    """The quadratic field check is gone; the error names the first fields, not 16 KB."""
    path = ".".join(["work_item"] * 1600)
    folder = _policy(tmp_path, f'rules:\n  - {{name: deep, on: session_spawn, when: "{path}", '
                               "set: {proceed: false}}\n")
    done = run_cli("policy", "check", str(folder))
    assert done.returncode == 1
    line = _one_line(done.stderr)
    assert "reads 'work_item.work_item.work_item.work_item' at column 1, but the context at " \
           "session_spawn has no field 'work_item.work_item'" in line
    assert len(line) < 1000


def test_rule6_a_yaml_slip_on_a_huge_line_is_reported_without_the_hint_scan_hanging(
        tmp_path: Path, run_cli: CliRun) -> None:
    """A tag followed by a megabyte of blanks: the YAML error names the file, line and
    column at once (the hint patterns once took hours here: `run_cli` stops at 60 s)."""
    folder = _policy(tmp_path, "rules:\n  - name: r\n    on: session_spawn\n    when: !b"
                               + " " * 1_000_000 + "c: d\n")
    done = run_cli("policy", "check", str(folder))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "rules.yaml" in done.stderr and "line 4" in done.stderr


# ------------------------------------------------------------------- regular expressions

REDOS = """\
rules:
  - name: words-only
    on: input_received
    when: "regex_match('^([A-Za-z0-9]+ ?)+$', text)"
    set: {proceed: false, reason: "plain words only"}
"""


def test_rule6_a_backtracking_pattern_runs_in_linear_time_on_re2(
        tmp_path: Path, run_cli: CliRun) -> None:
    """The pattern that stalled the poller on 41 characters answers at once on RE2."""
    folder = _policy(tmp_path, REDOS)
    config = tmp_path / "cli-config.yaml"
    config.write_text(f"loop: acme\nstateDir: state\nhooks:\n  - {{name: house, policy: "
                      f"{folder}, required: true}}\n", encoding="utf-8")
    hostile = "a" * 40 + "!"
    for text, refused in ((hostile, False), ("just words", True)):
        done = run_cli("--config", str(config), "hooks", "run", "input_received", "--context",
                       "-", "--json", stdin=json.dumps({"text": text}))
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["context"]["proceed"] is (not refused)


@pytest.mark.parametrize(("pattern", "why"), [
    ("(a)\\\\1", "invalid escape sequence"),
    ("(?=a)b", "invalid perl operator"),
])
def test_rule6_a_literal_pattern_re2_cannot_run_is_a_load_error(
        tmp_path: Path, run_cli: CliRun, pattern: str, why: str) -> None:
    folder = _policy(tmp_path, f"""\
        rules:
          - name: backref
            on: input_received
            when: "regex_match('{pattern}', text)"
            set: {{proceed: false}}
    """)
    done = run_cli("policy", "check", str(folder))
    assert done.returncode == 1
    line = _one_line(done.stderr)
    assert "rule 'backref' → when: " in line and "at column 1: invalid regular expression" in line
    assert why in line and "RE2 syntax: no backreferences or lookaround" in line


# ------------------------------------------------------------------- the policy folder

def test_rule6_dangling_symlinks_fifos_sockets_and_outside_links_are_load_errors(
        tmp_path: Path, run_cli: CliRun) -> None:
    folder = _policy(tmp_path, "rules:\n  - {name: a, on: session_spawn, set: {prompt: x}}\n")
    outside = tmp_path / "elsewhere.yaml"
    outside.write_text("rules:\n  - {name: b, on: session_spawn, set: {prompt: y}}\n",
                       encoding="utf-8")
    (folder / "20-gone.yaml").symlink_to(tmp_path / "missing.yaml")
    (folder / "30-outside.yaml").symlink_to(outside)
    os.mkfifo(folder / "40-pipe.yaml")
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(folder / "50-sock"))
        done = run_cli("policy", "check", str(folder), "--json")
    finally:
        sock.close()
    assert done.returncode == 1
    errors = json.loads(done.stdout)["folders"][0]["errors"]
    assert errors == [
        f"{folder / '20-gone.yaml'}: a dangling symlink (its target does not exist); remove "
        "it or point it at a rule file in this folder",
        f"{folder / '30-outside.yaml'}: resolves to {outside}, outside the policy folder; "
        "copy the rule file into the folder instead of linking to it",
        f"{folder / '40-pipe.yaml'}: not a regular file (a FIFO, socket or device); a policy "
        "folder holds only rule files; remove it",
        f"{folder / '50-sock'}: not a regular file (a FIFO, socket or device); a policy "
        "folder holds only rule files; remove it",
    ]


def test_rule6_a_link_to_a_rule_file_inside_the_folder_is_fine(
        tmp_path: Path, run_cli: CliRun) -> None:
    folder = _policy(tmp_path, "rules:\n  - {name: a, on: session_spawn, set: {prompt: x}}\n",
                     name="source.yml.txt")
    (folder / "10-a.yaml").symlink_to(folder / "source.yml.txt")
    done = run_cli("policy", "check", str(folder), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["folders"][0]["rules"] == 1


# ------------------------------------------------------------- what an evaluation builds

BLOWUP = "to_string(labels" + " | [@, @]" * 30 + ")"


def test_rule6_an_expression_that_doubles_its_input_30_times_fails_the_load(
        tmp_path: Path, run_cli: CliRun) -> None:
    """`to_string(labels | [@, @] …)` ran 30 s and took 1.3 GB on one point; now `policy
    check` refuses it, naming the rule, and a daemon would refuse to start on it."""
    folder = _policy(tmp_path, f"""\
        rules:
          - name: blowup
            on: session_spawn
            set: {{reason: "{{{{ {BLOWUP} }}}}"}}
    """)
    done = run_cli("policy", "check", str(folder))
    assert done.returncode == 1
    line = _one_line(done.stderr)
    assert "rule 'blowup' → set.reason: the placeholder {{ to_string(labels | [@, @]" in line
    assert ("is refused: it can build values over 262144 times the size of what it reads (at "
            "most 256): each `[@, @]` in a pipe doubles it") in line


@pytest.mark.parametrize(("text", "factor"), [
    ("work_item.kind == 'issue'", 1),
    ("labels[*].[@, @][]", 2),
    ("to_string({a: labels, b: labels, c: [labels, labels]})", 4),
    ("map(&[@, @, @], labels)", 3),
    ("labels" + " | [@, @]" * 8, 256),
    ("length(labels" + " | [@, @]" * 9 + ")", 512),
    ("labels[?to_string([@, @] | [@, @] | [@, @]) == 'x']", 8),
    (".".join(["work_item"] * 5000), 1),
])
def test_rule6_growth_bounds_what_an_expression_can_build(text: str, factor: int) -> None:
    from jmespath.parser import Parser

    from the_loop.hooks.policy.growth import worst

    assert worst(Parser().parse(text).parsed) == factor


def test_rule6_expressions_within_the_growth_bound_still_load_and_run(
        tmp_path: Path, run_cli: CliRun) -> None:
    folder = _policy(tmp_path, """\
        rules:
          - name: pairs
            on: session_spawn
            when: "length(labels[*].[@, @][]) > `2`"
            set: {reason: "{{ to_string(labels | [@, @]) }}"}
    """)
    config = tmp_path / "cli-config.yaml"
    config.write_text(f"loop: acme\nstateDir: state\nhooks:\n  - {{name: house, policy: "
                      f"{folder}}}\n", encoding="utf-8")
    done = run_cli("--config", str(config), "hooks", "run", "session_spawn", "--context", "-",
                   "--json", stdin=json.dumps({"labels": ["a", "b"], "prompt": "p"}))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["context"]["reason"] == '[["a","b"],["a","b"]]'


@pytest.mark.parametrize("required", [True, False])
def test_rule6_a_policy_output_past_its_bound_is_that_hooks_failure(
        tmp_path: Path, run_cli: CliRun, required: bool) -> None:
    """A template that quotes a large fact twice would add 300,001 characters to it: the
    policy fails instead, and a required one refuses."""
    folder = _policy(tmp_path, """\
        rules:
          - name: echo
            on: input_received
            set: {text: "{{ text }} {{ text }}"}
    """)
    config = tmp_path / "cli-config.yaml"
    config.write_text(f"loop: acme\nstateDir: state\nhooks:\n  - {{name: house, policy: "
                      f"{folder}, required: {str(required).lower()}}}\n", encoding="utf-8")
    done = run_cli("--config", str(config), "hooks", "run", "input_received", "--context", "-",
                   "--json", stdin=json.dumps({"text": "x" * 300_000}))
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    [step] = out["trace"]
    assert step["status"] == "failed"
    assert step["error"] == (
        "policy 'house' would set text to 600001 characters, 300001 more than it held (rules "
        "echo); at most 262144 more: quote less of the context in the rule's template")
    assert out["context"]["text"] == "x" * 300_000
    assert out["context"]["proceed"] is (not required)
