"""The runtime's part of cli-config.yaml, described once (`SETTINGS`) and checked from that.

Every key, its default and its message live in the description below; `settings_of` checks
the raw file against it and builds `Settings`. Checks that are not about shape are named
functions the description runs after the shape (`then=`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Final

from the_loop.config import Config
from the_loop.configspec import (
    ENV_PATTERN,
    NAME,
    NON_EMPTY_PATTERN,
    DictOf,
    Enum,
    Field,
    Invalid,
    KindOf,
    ListOf,
    Mapping,
    Number,
    Problem,
    Str,
    const,
    did_you_mean,
)
from the_loop.errors import ConfigError
from the_loop.util import url_problem

REPO_PATTERN = "^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$"
LOGIN_PATTERN = "^[A-Za-z0-9][A-Za-z0-9_.-]*$"

class Harness:
    # Plain classes, not dataclasses: the agent's commands read the settings at every start
    # (issue 34; graph.py says what a dataclass costs them).
    __slots__ = ("command", "env", "model", "name")

    def __init__(self, name: str, command: tuple[str, ...], model: str = "",
                 env: tuple[str, ...] = ()) -> None:
        self.name: Final = name
        self.command: Final = command
        self.model: Final = model
        self.env: Final = env  # variable names passed beyond the safe base


class ChannelSpec:
    __slots__ = ("kind", "target", "token_env")

    def __init__(self, kind: str, target: str, token_env: str = "") -> None:
        self.kind: Final = kind  # file | webhook
        self.target: Final = target  # a path (resolved) or a url
        self.token_env: Final = token_env


class Settings:
    """Everything the runtime reads from the config, with defaults for the embedded loop."""

    __slots__ = ("arm_label", "channels", "config", "console_compare", "console_served",
                 "database", "decision_keep_days", "git_repository", "graph", "harness",
                 "harnesses", "heartbeat", "lease_expiry", "loop", "max_sessions",
                 "repository", "secret_names", "serve_agents", "serve_token_env",
                 "serve_tokens", "state_dir")

    def __init__(
        self, *, config: Config, loop: str, state_dir: Path, repository: str, arm_label: str,
        harness: str, harnesses: dict[str, Harness], graph: str,
        channels: list[ChannelSpec] | None = None, git_repository: Path | None = None,
        serve_token_env: str = "", decision_keep_days: float = 30.0,
        serve_tokens: dict[str, str] | None = None, serve_agents: dict[str, str] | None = None,
        database: str = "", max_sessions: int = 8, lease_expiry: float = 30.0,
        heartbeat: float = 5.0, secret_names: frozenset[str] = frozenset(),
        console_compare: list[dict[str, str]] | None = None,
        console_served: list[dict[str, str]] | None = None,
    ) -> None:
        self.config = config
        self.loop = loop
        self.state_dir = state_dir
        self.repository = repository
        self.arm_label = arm_label
        self.harness = harness
        self.harnesses = harnesses
        self.graph = graph  # builtin | absolute path
        self.channels: list[ChannelSpec] = [] if channels is None else channels
        self.git_repository = git_repository
        self.serve_token_env = serve_token_env
        #: decisionLog.keepDays: how long fired points are kept
        self.decision_keep_days = decision_keep_days
        #: login → the environment variable holding that person's control-plane token
        self.serve_tokens: dict[str, str] = {} if serve_tokens is None else serve_tokens
        #: login → a variable: an agent token shared by every session, no longer taken
        #: (`serve` refuses to start with one; each session has its own, runtime/identity.py)
        self.serve_agents: dict[str, str] = {} if serve_agents is None else serve_agents
        self.database = database  # a postgresql:// URL, or '' for SQLite in stateDir
        self.max_sessions = max_sessions  # maxSessions: harness sessions this host runs at once
        #: lease.expirySeconds: a claim not renewed for this long lapses
        self.lease_expiry = lease_expiry
        self.heartbeat = heartbeat  # lease.heartbeatSeconds: how often a daemon renews claims
        #: every variable named by a tokenEnv anywhere (hooks, channels, serve): never in a
        #: harness's environment, its value redacted wherever the loop writes
        self.secret_names = secret_names
        #: serve.console.compare: what the console may replay besides the declaration in
        #: effect ({name, config} or {name, policy, hook}, paths resolved against the
        #: config's folder)
        self.console_compare: list[dict[str, str]] = (
            [] if console_compare is None else console_compare)
        #: serve.console.servedLogs: hook servers' decision logs the console may show
        #: ({name, log, policy}, paths resolved against the config's folder)
        self.console_served: list[dict[str, str]] = (
            [] if console_served is None else console_served)

    @property
    def db_path(self) -> Path:
        return self.state_dir / "loop.db"

    @property
    def db_target(self) -> Path | str:
        """What `open_database` opens: the shared database, else loop.db in stateDir."""
        return self.database or self.db_path

    @property
    def events_path(self) -> Path:
        return self.state_dir / "events.jsonl"


def default_harness() -> Harness:
    return Harness("demo", (sys.executable, "-m", "the_loop.demo.agent"), "demo-1")


# ------------------------------------------------------------------ named checks


def _unique_names(harnesses: list[dict[str, Any]], _ctx: object) -> list[dict[str, Any]]:
    seen: set[str] = set()
    for i, h in enumerate(harnesses):
        if h["name"] in seen:
            raise Problem(f"duplicate harness {h['name']!r}", i, "name")
        seen.add(h["name"])
    return harnesses


def _webhook_url(channel: dict[str, Any], _ctx: object) -> dict[str, Any]:
    problem = url_problem(channel["url"], token=bool(channel["tokenEnv"]), hook=False)
    if problem:
        raise Problem(problem, "url")
    return channel


def _one_token_per_person(serve: dict[str, Any], _ctx: object) -> dict[str, Any]:
    names = (list(serve["tokens"].values()) + list(serve["agents"].values())
             + ([serve["tokenEnv"]] if serve["tokenEnv"] else []))
    if len(set(names)) < len(names):
        raise Problem("each person and each agent needs a token of their own (two logins, or "
                      "a login and tokenEnv, name the same variable)", "tokens")
    both = sorted(set(serve["tokens"]) & set(serve["agents"]))
    if both:
        raise Problem(f"{', '.join(both)} is both a person (tokens) and an agent (agents); "
                      "a login is one or the other: rename one", "agents", both[0])
    return serve


def _one_source(entry: dict[str, Any], _ctx: object) -> dict[str, Any]:
    if bool(entry["config"]) == bool(entry["policy"]):
        raise Problem(f"{entry['name']!r} names {'both' if entry['config'] else 'neither'} of "
                      "config and policy; give one: config: FILE (another cli-config.yaml) "
                      "or policy: DIR (a policy folder to replay in a declared policy hook's "
                      "place)")
    if entry["hook"] and not entry["policy"]:
        raise Problem("hook names the policy hook a policy folder replaces; it goes with "
                      "policy: DIR", "hook")
    return entry


def _whole(value: float, _ctx: object) -> int:
    if value != int(value):
        raise Problem(f"expected a whole number, got {value:g}")
    return int(value)


def _declared_harness(data: dict[str, Any], _ctx: object) -> dict[str, Any]:
    declared = [h["name"] for h in data["harnesses"]]
    data.setdefault("harness", declared[0])
    if data["harness"] not in declared:
        raise Problem(f"{data['harness']!r} is not a declared harness"
                      + did_you_mean(data["harness"], declared)
                      + f"; declared: {', '.join(declared)}", "harness")
    return data


def _no_secret_in_harness_env(data: dict[str, Any], secrets: set[str]) -> dict[str, Any]:
    for i, h in enumerate(data["harnesses"]):
        leaked = sorted(set(h["env"]) & secrets)
        if leaked:
            raise Problem(f"{', '.join(leaked)} is named by a tokenEnv or secretEnv: a secret "
                          "never reaches an agent's environment; remove it from env",
                          "harnesses", i, "env")
    return data


def _database_url(dsn: str, _ctx: object) -> str:
    from the_loop.sqldb import check_dsn

    try:
        return check_dsn(dsn, "a postgresql:// URL")
    except ConfigError as exc:
        raise Problem(str(exc).split(": ", 1)[1]) from None


def _served_log(target: str, ctx: object) -> str:
    """A served log's file as given, or its URL checked as `database:` is (no password)."""
    from the_loop.sqldb import is_postgresql

    return _database_url(target, ctx) if is_postgresql(target) else target


def _heartbeat_below_expiry(lease: dict[str, Any], _ctx: object) -> dict[str, Any]:
    if lease["heartbeatSeconds"] * 2 > lease["expirySeconds"]:
        raise Problem(f"heartbeatSeconds ({lease['heartbeatSeconds']:g}) must be at most half "
                      f"of expirySeconds ({lease['expirySeconds']:g}), so a live host renews "
                      "its claims at least twice before they lapse", "heartbeatSeconds")
    return lease


# ------------------------------------------------------------------ the description

ENV_NAME = Str(pattern=ENV_PATTERN, expected="an environment variable name")
HARNESS = Mapping(expected="a mapping with name and command", fields={
    "name": Field(NAME, required="every harness needs a name"),
    "command": Field(ListOf(item=Str(), min_items=1, split=True,
                            expected="an argv list like [python3, -m, the_loop.demo.agent]"),
                     required="every harness needs a command (an argv list)"),
    "model": Field(Str(), default=""),
    "env": Field(ListOf(item=ENV_NAME, expected="a list of environment variable NAMES to pass "
                        "to the agent, e.g. [GITHUB_USER, EDITOR]"), default=list),
})
FILE_CHANNEL = Mapping(expected="{kind: file, path: P}", fields={
    "kind": Field(const("file"), required="a channel names its kind"),
    "path": Field(Str(pattern=NON_EMPTY_PATTERN, expected="a path (relative to stateDir)"),
                  required="a file channel names its path (relative to stateDir)"),
})
WEBHOOK_CHANNEL = Mapping(expected="{kind: webhook, url: U}", then=(_webhook_url,), fields={
    "kind": Field(const("webhook"), required="a channel names its kind"),
    "url": Field(Str(pattern="^https?://", expected="an http(s):// URL", shown=lambda v: (
        "a URL that is not http(s)://" if isinstance(v, str) else type(v).__name__)),
                 required="a webhook channel names its url (http(s)://…)"),
    "tokenEnv": Field(ENV_NAME, default=""),
})
PATH = Str(pattern=NON_EMPTY_PATTERN, expected="a path (relative to the config's folder)")
COMPARE = Mapping(
    expected="{name: N, config: FILE} or {name: N, policy: DIR, hook: H}",
    then=(_one_source,), fields={
        "name": Field(NAME, required="each entry needs a name (the console lists it)"),
        "config": Field(PATH, default=""),
        "policy": Field(PATH, default=""),
        "hook": Field(Str(expected="the name of a declared policy hook"), default=""),
    })
SERVED_LOG = Mapping(expected="{name: N, log: FILE, policy: DIR}", fields={
    "name": Field(NAME, required="each entry needs a name (the console lists it)"),
    "log": Field(Str(pattern=NON_EMPTY_PATTERN, expected=(
        "the SQLite file or postgresql:// URL a `hooks serve --decision-log` writes"),
        then=(_served_log,),
        shown=lambda v: "a URL" if isinstance(v, str) else type(v).__name__),
        required="each entry names the log: the file or URL its hook server writes"),
    "policy": Field(PATH, default=""),
})
CONSOLE = Mapping(expected="{compare: [{name: N, config: FILE} | {name: N, policy: DIR}], "
                           "servedLogs: [{name: N, log: FILE, policy: DIR}]}",
                  fields={"compare": Field(ListOf(
                      item=COMPARE, expected="a list of {name, config} or {name, policy, hook}"),
                      default=list),
                      "servedLogs": Field(ListOf(
                          item=SERVED_LOG, expected="a list of {name, log, policy}"),
                          default=list)})
SERVE = Mapping(
    expected="{tokens: {LOGIN: VAR, …}, agents: {LOGIN: VAR, …}, tokenEnv: VAR, console: "
             "{compare: […]}} (host and port are command flags)",
    unknown_hint=" (host and port are command flags)", then=(_one_token_per_person,), fields={
        "tokens": Field(DictOf(
            key=Str(pattern=LOGIN_PATTERN, expected="a login"), value=ENV_NAME,
            expected="a mapping of login to the NAME of the variable holding that person's "
                     "token, e.g. {alice: ALICE_TOKEN}"), default=dict),
        "agents": Field(DictOf(
            key=Str(pattern=LOGIN_PATTERN, expected="a login"), value=ENV_NAME,
            expected="a mapping of login to variable name (no longer taken: `serve` "
                     "refuses to start with it; a session brings $THE_LOOP_SESSION_TOKEN)"),
            default=dict),
        "tokenEnv": Field(Str(pattern=f"^({ENV_PATTERN[1:-1]})?$",
                              expected="an environment variable name (the operator's token)"),
                          default=""),
        "console": Field(CONSOLE, default=lambda: {"compare": [], "servedLogs": []}),
    })
LEASE = Mapping(expected="{expirySeconds: 30, heartbeatSeconds: 5}",
                then=(_heartbeat_below_expiry,), fields={
    "expirySeconds": Field(Number(above=0, maximum=86_400, expected="seconds above 0 (e.g. 30)"),
                           default=30),
    "heartbeatSeconds": Field(Number(above=0, maximum=3_600,
                                     expected="seconds above 0 (e.g. 5)"), default=5),
})
#: The runtime keys of cli-config.yaml (`loop`, `stateDir` and `hooks` are read elsewhere).
SETTINGS = Mapping(extra=True, then=(_declared_harness, _no_secret_in_harness_env), fields={
    "tracker": Field(Mapping(expected="{kind: local, repository: owner/repo}", fields={
        "kind": Field(Enum(values=("local",), expected="local (the embedded tracker)"),
                      default="local"),
        "repository": Field(Str(pattern=REPO_PATTERN, expected="owner/repo"),
                            default="acme/app"),
    }), default=lambda: {"kind": "local", "repository": "acme/app"}),
    "armLabel": Field(Str(expected="a label name"), default=""),
    "harness": Field(Str(expected="the name of a declared harness")),
    "harnesses": Field(ListOf(item=HARNESS, min_items=1, then=(_unique_names,),
                              expected="a list of {name, command, model}"),
                       default=lambda: [{"name": "demo", "command": [], "model": "demo-1",
                                         "env": [], "default": True}]),
    "graph": Field(Str(pattern=NON_EMPTY_PATTERN,
                       expected="builtin or a path to a YAML graph"), default="builtin"),
    "channels": Field(ListOf(item=KindOf(variants={"file": FILE_CHANNEL,
                                                   "webhook": WEBHOOK_CHANNEL},
                                         expected="{kind: file, path: P} or {kind: webhook, "
                                                  "url: U, tokenEnv: VAR}"),
                             expected="a list of channels"),
                      default=lambda: [{"kind": "file", "path": "channel.jsonl"}]),
    "repository": Field(Str(expected="a path to a local git repository"), nullable=True),
    "serve": Field(SERVE, default=lambda: {"tokens": {}, "agents": {}, "tokenEnv": "",
                                           "console": {"compare": [], "servedLogs": []}}),
    "decisionLog": Field(Mapping(expected="{keepDays: 30}", fields={
        "keepDays": Field(Number(above=0, maximum=36_500,
                                 expected="a number of days above 0 (e.g. 30)"), default=30),
    }), default=lambda: {"keepDays": 30.0}),
    "database": Field(Str(pattern="^postgres(ql)?://", expected="a postgresql://user@host/dbname "
                          "URL (absent: SQLite in stateDir)", then=(_database_url,),
                          shown=lambda v: "a URL of another scheme" if isinstance(v, str)
                          else type(v).__name__), default=""),
    "maxSessions": Field(Number(above=0, maximum=10_000, expected="a whole number of sessions "
                                "above 0 (e.g. 8)", then=(_whole,)), default=8),
    "lease": Field(LEASE, default=lambda: {"expirySeconds": 30.0, "heartbeatSeconds": 5.0}),
})


def settings_of(config: Config) -> Settings:
    """Check the runtime keys against `SETTINGS`; raises `ConfigError` naming the key."""
    data = config.data
    secrets = secret_names(data)
    try:
        checked = SETTINGS.check(data, (), secrets)
    except Invalid as exc:
        where = str(config.path or "cli-config.yaml")
        raise ConfigError(f"{where} → {exc.where}: {exc.message}") from None
    harnesses = {h["name"]: _harness(h) for h in checked["harnesses"]}
    graph = checked["graph"]
    repository = checked.get("repository")
    serve = checked["serve"]
    return Settings(
        config=config, loop=config.loop or "the-loop", state_dir=config.state_dir,
        repository=checked["tracker"]["repository"], arm_label=checked["armLabel"],
        harness=checked["harness"], harnesses=harnesses,
        graph=graph if graph == "builtin" else str(config.resolve(graph)),
        channels=[_channel(c, config) for c in checked["channels"]],
        git_repository=config.resolve(repository) if repository is not None else None,
        serve_token_env=serve["tokenEnv"], decision_keep_days=checked["decisionLog"]["keepDays"],
        serve_tokens=dict(serve["tokens"]), serve_agents=dict(serve["agents"]),
        secret_names=frozenset(secrets),
        console_compare=[_compare(c, config) for c in serve["console"]["compare"]],
        console_served=[_compare(c, config) for c in serve["console"]["servedLogs"]],
        database=checked["database"], max_sessions=checked["maxSessions"],
        lease_expiry=checked["lease"]["expirySeconds"],
        heartbeat=checked["lease"]["heartbeatSeconds"],
    )


def _compare(entry: dict[str, str], config: Config) -> dict[str, str]:
    out = dict(entry)
    for key in ("config", "policy", "log"):
        if out.get(key) and not (key == "log" and out[key].startswith(("postgresql://",
                                                                         "postgres://"))):
            out[key] = str(config.resolve(out[key]))
    return out


def _harness(h: dict[str, Any]) -> Harness:
    if h.get("default"):
        return default_harness()
    argv = tuple(sys.executable if c in ("python3", "python") and j == 0 else c
                 for j, c in enumerate(h["command"]))
    return Harness(h["name"], argv, h["model"], tuple(h["env"]))


def _channel(c: dict[str, Any], config: Config) -> ChannelSpec:
    if c["kind"] == "webhook":
        return ChannelSpec("webhook", c["url"], c["tokenEnv"])
    p = Path(c["path"]).expanduser()
    return ChannelSpec("file", str(p if p.is_absolute() else config.state_dir / p))


def secret_names(data: dict[str, object]) -> set[str]:
    """Every variable the config names as holding a secret: a hook entry's (the keys its
    kind lists under `secrets`: tokenEnv, secretEnv), a channel's and serve's tokenEnv.

    Read from the raw file, so an entry the hooks loader rejects still counts."""
    names: set[str] = set()
    for section in ("hooks", "channels"):
        entries = data.get(section)
        for entry in entries if isinstance(entries, list) else []:
            if not isinstance(entry, dict):
                continue
            if section == "hooks":  # each kind says which of its keys name secrets
                # imported only for a config with hook entries (issue 34: start-up)
                from the_loop.hooks.executors import registry

                names.update(registry.secret_names(entry))
            elif isinstance(entry.get("tokenEnv"), str):
                names.add(entry["tokenEnv"])
    serve = data.get("serve")
    if isinstance(serve, dict):
        if isinstance(serve.get("tokenEnv"), str):
            names.add(serve["tokenEnv"])
        for key in ("tokens", "agents"):
            tokens = serve.get(key)
            if isinstance(tokens, dict):
                names.update(v for v in tokens.values() if isinstance(v, str))
    names.discard("")
    return names
