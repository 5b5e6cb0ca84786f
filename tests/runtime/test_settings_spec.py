"""The runtime keys of cli-config.yaml: every key checked from one description, errors naming it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from the_loop.config import read_config
from the_loop.errors import ConfigError
from the_loop.runtime.settings import Settings, settings_of


def settings(tmp_path: Path, text: str) -> Settings:
    path = tmp_path / "cli-config.yaml"
    path.write_text("loop: acme\nstateDir: state\n" + text, encoding="utf-8")
    return settings_of(read_config(path))


def error(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as info:
        settings(tmp_path, text)
    message = str(info.value)
    prefix = f"{tmp_path / 'cli-config.yaml'} → "
    assert message.startswith(prefix), message
    return message[len(prefix):]


def test_a_config_with_no_runtime_keys_gets_every_default(tmp_path: Path) -> None:
    s = settings(tmp_path, "")
    assert (s.repository, s.arm_label, s.harness, s.graph) == ("acme/app", "", "demo", "builtin")
    assert s.harnesses["demo"].command == (sys.executable, "-m", "the_loop.demo.agent")
    assert [(c.kind, c.target) for c in s.channels] == [
        ("file", str(tmp_path / "state" / "channel.jsonl"))]
    assert (s.git_repository, s.serve_token_env, s.serve_tokens) == (None, "", {})
    assert s.decision_keep_days == 30.0


def test_every_runtime_key_is_read_into_settings(tmp_path: Path) -> None:
    s = settings(tmp_path, """
tracker: {kind: local, repository: octo/widgets}
armLabel: loop
harnesses:
  - {name: demo, command: python3 -m the_loop.demo.agent, model: m1}
  - {name: claude, command: [claude, -p], env: [EDITOR]}
harness: claude
graph: flow.yaml
channels:
  - {kind: file, path: /tmp/x.jsonl}
  - {kind: webhook, url: 'https://chat.example/h', tokenEnv: CHAT_TOKEN}
repository: repo
serve: {tokenEnv: OPS_TOKEN, tokens: {alice: ALICE_TOKEN}}
decisionLog: {keepDays: 0.5}
""")
    assert (s.repository, s.arm_label, s.harness) == ("octo/widgets", "loop", "claude")
    assert s.harnesses["demo"].command == (sys.executable, "-m", "the_loop.demo.agent")
    assert s.harnesses["claude"].env == ("EDITOR",)
    assert s.graph == str(tmp_path / "flow.yaml")
    assert [(c.kind, c.target, c.token_env) for c in s.channels] == [
        ("file", "/tmp/x.jsonl", ""), ("webhook", "https://chat.example/h", "CHAT_TOKEN")]
    assert s.git_repository == tmp_path / "repo"
    assert (s.serve_token_env, s.serve_tokens) == ("OPS_TOKEN", {"alice": "ALICE_TOKEN"})
    assert s.decision_keep_days == 0.5
    assert s.secret_names == {"CHAT_TOKEN", "OPS_TOKEN", "ALICE_TOKEN"}


@pytest.mark.parametrize(("text", "says"), [
    ("tracker: github\n", "tracker: expected {kind: local, repository: owner/repo}, got "
                          "'github' (str)"),
    ("tracker: {kind: jira}\n", "tracker.kind: expected local (the embedded tracker), got "
                                "'jira' (str)"),
    ("tracker: {repositry: a/b}\n", "tracker.repositry: unknown key (did you mean 'repository'?). "
                               "Allowed keys: kind, repository"),
    ("tracker: {repository: nope}\n", "tracker.repository: expected owner/repo, got 'nope'"),
    ("armLabel: [a]\n", "armLabel: expected a label name, got ['a'] (list)"),
    ("harnesses: []\n", "harnesses: expected a list of {name, command, model}, got [] (list)"),
    ("harnesses: [{command: [x]}]\n", "harnesses[0].name: missing; every harness needs a name"),
    ("harnesses: [{name: Big, command: [x]}]\n",
     "harnesses[0].name: expected a name matching ^[a-z]"),
    ("harnesses: [{name: a, command: []}]\n", "harnesses[0].command: expected an argv list"),
    ("harnesses: [{name: a, command: [x], modle: m}]\n",
     "harnesses[0].modle: unknown key (did you mean 'model'?)"),
    ("harnesses: [{name: a, command: [x], env: ['$HOME']}]\n",
     "harnesses[0].env[0]: expected an environment variable name, got '$HOME' (str)"),
    ("harnesses: [{name: a, command: [x]}, {name: a, command: [y]}]\n",
     "harnesses[1].name: duplicate harness 'a'"),
    ("harnesses: [{name: claude, command: [x]}]\nharness: claud\n",
     "harness: 'claud' is not a declared harness (did you mean 'claude'?); declared: claude"),
    ("graph: ''\n", "graph: expected builtin or a path to a YAML graph, got '' (str)"),
    ("channels: {kind: file}\n", "channels: expected a list of channels, got"),
    ("channels: [{kind: file}]\n", "channels[0].path: missing; a file channel names its path"),
    ("channels: [{kind: file, path: x, url: y}]\n", "channels[0].url: unknown key"),
    ("channels: [{kind: webhook, url: 'ftp://user:pw@h/x'}]\n",
     "channels[0].url: expected an http(s):// URL, got a URL that is not http(s)://"),
    ("repository: 5\n", "repository: expected a path to a local git repository, got 5 (int)"),
    ("serve: {port: 80}\n", "serve.port: unknown key. Allowed keys: tokens, agents, tokenEnv, "
                            "console (host and port are command flags)"),
    ("serve: {tokenEnv: 'a b'}\n", "serve.tokenEnv: expected an environment variable name"),
    ("serve: {tokens: {alice: 'x y'}}\n", "serve.tokens: alice: expected an environment "
                                          "variable name, got 'x y' (str)"),
    ("serve: {tokens: {alice: T}, tokenEnv: T}\n",
     "serve.tokens: each person and each agent needs a token of their own"),
    ("serve: {console: {compare: [{name: a, config: x.yaml, policy: p}]}}\n",
     "serve.console.compare[0]: 'a' names both of config and policy; give one: config: FILE"),
    ("serve: {console: {compare: [{name: a}]}}\n",
     "serve.console.compare[0]: 'a' names neither of config and policy; give one"),
    ("serve: {console: {compare: [{name: a, config: x.yaml, hook: h}]}}\n",
     "serve.console.compare[0].hook: hook names the policy hook a policy folder replaces; it "
     "goes with policy: DIR"),
    ("serve: {console: {servedLogs: [{name: a, log: 'postgresql://u:pw@h/db'}]}}\n",
     "serve.console.servedLogs[0].log: the PostgreSQL URL carries a password; remove it and "
     "give the password to libpq through PGPASSWORD or ~/.pgpass"),
    ("serve: {console: {servedLogs: [{name: a}]}}\n",
     "serve.console.servedLogs[0].log: missing; each entry names the log"),
    ("serve: {console: {compare: [{config: x.yaml}]}}\n",
     "serve.console.compare[0].name: missing; each entry needs a name"),
    ("channels: [{kind: webhook, url: 'https://h.example/', tokenEnv: T}]\n"
     "harnesses: [{name: a, command: [x], env: [T]}]\n",
     "harnesses[0].env: T is named by a tokenEnv or secretEnv: a secret never reaches an "
     "agent's environment"),
])
def test_a_bad_runtime_key_is_named_with_expected_and_got(tmp_path: Path, text: str,
                                                          says: str) -> None:
    assert error(tmp_path, text).startswith(says)


def test_a_url_with_credentials_is_never_echoed(tmp_path: Path) -> None:
    said = error(tmp_path, "channels: [{kind: webhook, url: 'ftp://user:hunter22@h/x'}]\n")
    assert "hunter22" not in said
