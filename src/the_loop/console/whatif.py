"""What a change would do: replay the served loop's decision log through a declaration the
operator listed (`serve.console.compare`) or the one in effect, grouped by rule.

A page names a choice by its position in that list, never by a path, so the console reads
only what the operator allowed. One replay runs at a time; a period holding more than
`MAX_POINTS` recorded points is refused with the advice to pick a shorter one.
"""

from __future__ import annotations

import copy
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from the_loop.config import Config, read_config
from the_loop.decisions.reads import read_points
from the_loop.errors import ConfigError, HooksConfigError, LoopError
from the_loop.runtime.replay import Replayer, replay_chain
from the_loop.runtime.settings import Settings

MAX_POINTS = 20_000
SHOWN = 200  # differences listed per rule
PERIODS = {"1h": 3600, "1d": 86_400, "7d": 7 * 86_400, "30d": 30 * 86_400, "all": 0}
_RUNNING = threading.Lock()


@dataclass(frozen=True)
class Choice:
    name: str
    what: str  # how the page describes it (no path of the server's beyond the name given)
    config: str = ""
    policy: str = ""
    hook: str = ""


class Busy(LoopError):
    """Another replay is running."""


def choices(settings: Settings) -> list[Choice]:
    """The declaration in effect, then each `serve.console.compare` entry, in order."""
    out = [Choice("in effect", "the hooks declared in the config this server runs")]
    for c in settings.console_compare:
        if c["config"]:
            out.append(Choice(c["name"], f"the hooks of another config ({Path(c['config']).name})",
                              config=c["config"]))
        else:
            hook = c["hook"] or "its policy hook"
            out.append(Choice(c["name"], f"the policy folder {Path(c['policy']).name}/ in "
                              f"place of {hook}'s", policy=c["policy"], hook=c["hook"]))
    return out


def config_for(choice: Choice, config: Config) -> Config:
    """The config whose hooks a replay runs for `choice`."""
    if choice.config:
        return read_config(Path(choice.config))
    if not choice.policy:
        return config
    if not Path(choice.policy).is_dir():
        raise LoopError(f"{choice.name}: its policy folder is not there (serve.console."
                        "compare in the config); mend the entry or create the folder")
    data = copy.deepcopy(config.data)
    raw = data.get("hooks")
    hooks: list[Any] = raw if isinstance(raw, list) else []
    policy_hooks = [h for h in hooks if isinstance(h, dict) and "policy" in h]
    named = [h for h in policy_hooks if h.get("name") == choice.hook] if choice.hook \
        else policy_hooks
    if len(named) != 1:
        declared = ", ".join(str(h.get("name")) for h in policy_hooks) or "none"
        raise LoopError(f"{choice.name}: name the policy hook its folder replaces (hook: in "
                        f"serve.console.compare); the declared policy hooks are {declared}")
    named[0]["policy"] = choice.policy
    return Config(config.path, data)


def run(choice: Choice, config: Config, db_path: Path | str, period: str) -> dict[str, Any]:
    """Replay the period through `choice`; the report with differences grouped by rule."""
    from the_loop.decisions.reads import count_since

    seconds = PERIODS.get(period, 0)
    since = time.time() - seconds if seconds else None
    n = count_since(db_path, since)
    if n > MAX_POINTS:
        raise LoopError(f"the period holds {n} recorded points; the console replays at most "
                        f"{MAX_POINTS} at a time: pick a shorter period (or run `the-loop "
                        "policy replay` in a terminal)")
    if not _RUNNING.acquire(blocking=False):
        raise Busy("another replay is running on this server; try again in a moment")
    try:
        try:
            chain, stand_ins = replay_chain(config_for(choice, config))
        except (ConfigError, HooksConfigError) as exc:
            raise LoopError(f"{choice.name}: its hooks do not load: {exc}") from None
        replayer = Replayer(chain, stand_ins)
        report = replayer.run(read_points(db_path, since=since,
                                          problems=replayer.report.unreadable)
                              if n else iter(()))
    finally:
        _RUNNING.release()
    data = report.to_json()
    data["rules"] = by_rule(data)
    return data


def by_rule(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Each rule (or rule-less hook) behind a difference: its summary lines and the changed
    points, each with the decision's before and after."""
    rules: dict[str, dict[str, Any]] = {}
    for name, entry in data["by_rule"].items():
        rules[name] = {"name": name, "hook": entry["hook"], "points": [],
                       "summaries": [e["summary"] for e in entry["effects"] if "summary" in e],
                       "more": 0}
    for diff in data["differences"]:
        for change in diff["changes"]:
            for side in ("after_by", "before_by"):
                who = change[side]
                if who is None:
                    continue
                for name in who["rules"] or [f"(hook {who['hook']})"]:
                    rule = rules.get(name)
                    if rule is None:
                        continue
                    if any(p["id"] == diff["id"] and p["decision"] == change["decision"]
                           for p in rule["points"]):
                        continue
                    if len(rule["points"]) >= SHOWN:
                        rule["more"] += 1
                        continue
                    rule["points"].append({
                        "id": diff["id"], "point": diff["point"], "work_item": diff["work_item"],
                        "time": diff["time"], "decision": change["decision"],
                        "before": change["before"], "after": change["after"]})
    return list(rules.values())
