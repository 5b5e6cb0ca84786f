"""The runtime's part of cli-config.yaml, validated with errors that name the key and the fix."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from the_loop.config import Config
from the_loop.errors import ConfigError
from the_loop.util import url_may_carry_token

REPO_RE = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
NAME_RE = re.compile(r"^[a-z][a-z0-9-]*$")
ENV_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
LOGIN_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


@dataclass(frozen=True)
class Harness:
    name: str
    command: tuple[str, ...]
    model: str = ""
    env: tuple[str, ...] = ()  # variable names passed beyond the safe base


@dataclass(frozen=True)
class ChannelSpec:
    kind: str  # file | webhook
    target: str  # a path (resolved) or a url
    token_env: str = ""


@dataclass
class Settings:
    """Everything the runtime reads from the config, with defaults for the embedded loop."""

    config: Config
    loop: str
    state_dir: Path
    repository: str
    arm_label: str
    harness: str
    harnesses: dict[str, Harness]
    graph: str  # builtin | absolute path
    channels: list[ChannelSpec] = field(default_factory=list)
    git_repository: Path | None = None
    serve_token_env: str = ""
    decision_keep_days: float = 30.0  # decisionLog.keepDays: how long fired points are kept
    #: login → the environment variable holding that person's control-plane token
    serve_tokens: dict[str, str] = field(default_factory=dict)
    #: every variable named by a tokenEnv anywhere (hooks, channels, serve): never in a
    #: harness's environment, its value redacted wherever the loop writes
    secret_names: frozenset[str] = frozenset()

    @property
    def db_path(self) -> Path:
        return self.state_dir / "loop.db"

    @property
    def events_path(self) -> Path:
        return self.state_dir / "events.jsonl"


def _got(value: object) -> str:
    return f"{value!r} ({type(value).__name__})"


def default_harness() -> Harness:
    return Harness("demo", (sys.executable, "-m", "the_loop.demo.agent"), "demo-1")


def settings_of(config: Config) -> Settings:
    """Validate the runtime keys; raises `ConfigError` naming the key."""
    data = config.data
    where = str(config.path or "cli-config.yaml")

    def fail(key: str, message: str) -> ConfigError:
        return ConfigError(f"{where} → {key}: {message}")

    tracker = data.get("tracker", {"kind": "local", "repository": "acme/app"})
    if not isinstance(tracker, dict):
        raise fail("tracker", f"expected {{kind: local, repository: owner/repo}}, got "
                              f"{_got(tracker)}")
    if tracker.get("kind", "local") != "local":
        raise fail("tracker.kind", f"expected local (the embedded tracker), got "
                                   f"{_got(tracker.get('kind'))}")
    extra = sorted(set(tracker) - {"kind", "repository"})
    if extra:
        raise fail("tracker", f"unknown key(s) {', '.join(extra)}; allowed: kind, repository")
    repository = tracker.get("repository", "acme/app")
    if not isinstance(repository, str) or not REPO_RE.match(repository):
        raise fail("tracker.repository", f"expected owner/repo, got {_got(repository)}")

    arm_label = data.get("armLabel", "")
    if not isinstance(arm_label, str):
        raise fail("armLabel", f"expected a label name, got {_got(arm_label)}")

    secrets = secret_names(data)
    harnesses: dict[str, Harness] = {}
    raw_h = data.get("harnesses")
    if raw_h is None:
        h = default_harness()
        harnesses[h.name] = h
    elif not isinstance(raw_h, list) or not raw_h:
        raise fail("harnesses", f"expected a list of {{name, command, model}}, got "
                                f"{_got(raw_h)}")
    else:
        for i, entry in enumerate(raw_h):
            key = f"harnesses[{i}]"
            if not isinstance(entry, dict):
                raise fail(key, f"expected a mapping with name and command, got {_got(entry)}")
            extra = sorted(map(str, set(entry) - {"name", "command", "model", "env"}))
            if extra:
                raise fail(key, f"unknown key(s) {', '.join(extra)}; allowed: name, "
                                "command, model, env")
            name = entry.get("name")
            if not isinstance(name, str) or not NAME_RE.match(name):
                raise fail(f"{key}.name", f"expected a name like demo or claude, got "
                                          f"{_got(name)}")
            cmd = entry.get("command")
            if isinstance(cmd, str):
                cmd = cmd.split()
            if not isinstance(cmd, list) or not cmd or not all(isinstance(c, str) for c in cmd):
                raise fail(f"{key}.command", f"expected an argv list like [python3, -m, "
                                             f"the_loop.demo.agent], got {_got(cmd)}")
            model = entry.get("model", "")
            if not isinstance(model, str):
                raise fail(f"{key}.model", f"expected a string, got {_got(model)}")
            passed = entry.get("env", [])
            if not isinstance(passed, list) or not all(
                    isinstance(v, str) and ENV_RE.fullmatch(v) for v in passed):
                raise fail(f"{key}.env", "expected a list of environment variable NAMES to "
                                         "pass to the agent, e.g. [GITHUB_USER, EDITOR]")
            leaked = sorted(set(passed) & secrets)
            if leaked:
                raise fail(f"{key}.env", f"{', '.join(leaked)} is named by a tokenEnv: a "
                                         "secret never reaches an agent's environment; remove "
                                         "it from env")
            if name in harnesses:
                raise fail(f"{key}.name", f"duplicate harness {name!r}")
            argv = tuple(sys.executable if c in ("python3", "python") and j == 0 else c
                         for j, c in enumerate(cmd))
            harnesses[name] = Harness(name, argv, model, tuple(passed))
    harness = data.get("harness", next(iter(harnesses)))
    if harness not in harnesses:
        raise fail("harness", f"{harness!r} is not a declared harness; declared: "
                              f"{', '.join(harnesses)}")

    graph = data.get("graph", "builtin")
    if not isinstance(graph, str) or not graph:
        raise fail("graph", f"expected builtin or a path to a YAML graph, got {_got(graph)}")
    if graph != "builtin":
        graph = str(config.resolve(graph))

    channels: list[ChannelSpec] = []
    raw_c = data.get("channels", [{"kind": "file", "path": "channel.jsonl"}])
    if not isinstance(raw_c, list):
        raise fail("channels", f"expected a list, got {_got(raw_c)}")
    for i, ch in enumerate(raw_c):
        key = f"channels[{i}]"
        if not isinstance(ch, dict) or ch.get("kind") not in ("file", "webhook"):
            raise fail(key, "expected {kind: file, path: P} or {kind: webhook, url: U}, got "
                            f"{_got(ch)}")
        if ch["kind"] == "file":
            path = ch.get("path")
            extra = sorted(set(ch) - {"kind", "path"})
            if extra or not isinstance(path, str) or not path:
                raise fail(key, "a file channel takes exactly kind and path (relative to "
                                "stateDir)")
            p = Path(path).expanduser()
            channels.append(ChannelSpec("file", str(p if p.is_absolute() else
                                                    config.state_dir / p)))
        else:
            url = ch.get("url")
            extra = sorted(set(ch) - {"kind", "url", "tokenEnv"})
            if extra or not isinstance(url, str) or not url.startswith(("http://", "https://")):
                raise fail(key, "a webhook channel takes kind, url (http(s)://…) and an "
                                "optional tokenEnv")
            token_env = ch.get("tokenEnv", "")
            if not isinstance(token_env, str):
                raise fail(f"{key}.tokenEnv", "expected an environment variable name")
            parts = urlsplit(url)
            if "@" in parts.netloc:
                raise fail(f"{key}.url", "credentials in the URL are not allowed (URL not "
                                         "shown); name an environment variable with tokenEnv")
            if token_env and not url_may_carry_token(url):
                raise fail(f"{key}.url", f"a bearer token is never sent in clear: use https:// "
                                         f"for {parts.hostname}, or drop tokenEnv")
            channels.append(ChannelSpec("webhook", url, token_env))

    git_repo = data.get("repository")
    git_path: Path | None = None
    if git_repo is not None:
        if not isinstance(git_repo, str):
            raise fail("repository", f"expected a path to a local git repository, got "
                                     f"{_got(git_repo)}")
        git_path = config.resolve(git_repo)

    serve = data.get("serve", {})
    if not isinstance(serve, dict) or set(serve) - {"tokenEnv", "tokens"}:
        raise fail("serve", "expected {tokens: {LOGIN: VAR, …}, tokenEnv: VAR} (host and "
                            "port are command flags)")
    token_env = serve.get("tokenEnv", "")
    if not isinstance(token_env, str) or (token_env and not ENV_RE.fullmatch(token_env)):
        raise fail("serve.tokenEnv", "expected an environment variable name (the operator's "
                                     "token)")
    tokens = serve.get("tokens", {})
    if not isinstance(tokens, dict) or not all(
            isinstance(k, str) and LOGIN_RE.fullmatch(k) and isinstance(v, str)
            and ENV_RE.fullmatch(v) for k, v in tokens.items()):
        raise fail("serve.tokens", "expected a mapping of login to the NAME of the variable "
                                   "holding that person's token, e.g. {alice: ALICE_TOKEN}")
    if len(set(tokens.values()) | ({token_env} - {""})) < len(tokens) + bool(token_env):
        raise fail("serve.tokens", "each person needs a token of their own (two logins, or a "
                                   "login and tokenEnv, name the same variable)")

    keep_days = _keep_days(data.get("decisionLog", {}), fail)

    return Settings(
        config=config, loop=config.loop or "the-loop", state_dir=config.state_dir,
        repository=repository, arm_label=arm_label, harness=harness, harnesses=harnesses,
        graph=graph, channels=channels, git_repository=git_path, serve_token_env=token_env,
        decision_keep_days=keep_days,
        serve_tokens=dict(tokens), secret_names=frozenset(secrets),
    )


def _keep_days(raw: object, fail: Callable[[str, str], ConfigError]) -> float:
    """decisionLog: {keepDays: N}, N > 0 days (a fraction is allowed)."""
    if not isinstance(raw, dict) or set(raw) - {"keepDays"}:
        raise fail("decisionLog", f"expected {{keepDays: 30}}, got {_got(raw)}")
    days = raw.get("keepDays", 30)
    if type(days) not in (int, float) or not 0 < days <= 36_500:
        raise fail("decisionLog.keepDays", f"expected a number of days above 0 (e.g. 30), got "
                                           f"{_got(days)}")
    return float(days)


def secret_names(data: dict[str, object]) -> set[str]:
    """Every variable named by a tokenEnv in the config: hooks, channels, serve.

    Read from the raw file, so an entry the hooks loader rejects still counts."""
    names: set[str] = set()
    for section in ("hooks", "channels"):
        entries = data.get(section)
        for entry in entries if isinstance(entries, list) else []:
            if isinstance(entry, dict) and isinstance(entry.get("tokenEnv"), str):
                names.add(entry["tokenEnv"])
    serve = data.get("serve")
    if isinstance(serve, dict):
        if isinstance(serve.get("tokenEnv"), str):
            names.add(serve["tokenEnv"])
        tokens = serve.get("tokens")
        if isinstance(tokens, dict):
            names.update(v for v in tokens.values() if isinstance(v, str))
    names.discard("")
    return names
