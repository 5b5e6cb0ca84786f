"""`the-loop policy replay`: what the declaration in effect would decide on recorded work.

Registered under the `policy` group by `register(policy_subparsers)` (app.py's table). Reads
the decision log in `<stateDir>/loop.db` (see decisions/looplog.py), replays it with
runtime/replay.py, prints the report (or `--json`), and with `--write-cases DIR` writes
`policy test` cases.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from the_loop.cli._common import (
    add_json,
    completes_points,
    config_of,
    print_json,
    require_path,
)
from the_loop.errors import UsageError
from the_loop.hooks.engine.points import POINTS, unknown_point_message
from the_loop.util import shown_path

_SINCE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}
_WIDTH = 70


def register(ps: Any) -> None:
    """Add `replay` to the `policy` command group's subparsers."""
    pr = ps.add_parser(
        "replay", help="run a changed policy or declaration over recorded points; show what "
                       "changes",
        description="Replay recorded points — the loop's own (the decision log in stateDir), "
                    "or a hook server's with --log — through the hooks declared in the config "
                    "in effect (--config new.yaml) or through one policy folder (--policy "
                    "DIR), and report every decision that would be different, by rule.",
    )
    pr.add_argument("--since", metavar="AGE", default="",
                    help="only points recorded in the last AGE (e.g. 7d, 12h, 30m, 2w); "
                         "default: everything the log holds")
    completes_points(pr.add_argument("--point", metavar="P", default="",
                                     help="only this lifecycle point"))
    pr.add_argument("--work-item", metavar="REF", default="", help="only this work item")
    pr.add_argument("--log", metavar="FILE|URL", default="",
                    help="replay a hook server's decision log (its SQLite file, or the "
                         "postgresql:// URL it writes) instead of the loop's own")
    pr.add_argument("--policy", metavar="DIR", default="",
                    help="replay through this policy folder (as `hooks serve --policy` "
                         "serves it) instead of the hooks the config declares")
    pr.add_argument("--name", metavar="NAME", default="",
                    help="the hook name the --policy folder replays under (default: the "
                         "declared policy entry it replaces, so its rules are compared with "
                         "that entry's; `policy` with --log, as `hooks serve --policy` names "
                         "it)")
    pr.add_argument("--baseline", choices=("recorded", "current"), default="recorded",
                    help="what the replay is compared with: the decisions as recorded when "
                         "each point fired (default), or what the hooks the config declares "
                         "today decide on the same points (with --policy: the change alone)")
    pr.add_argument("--fail-on-change", action="store_true",
                    help="exit 1 when any decision would change (for CI)")
    pr.add_argument("--call-all", "--call-remote", dest="call_all", action="store_true",
                    help="call every hook, the url: and command: ones too (default: their "
                         "recorded answers stand in; --call-remote is the old spelling)")
    pr.add_argument("--write-cases", metavar="DIR", default="",
                    help="write the replayed points as `policy test` cases into "
                         "DIR/tests, expecting today's decisions (DIR: a declared policy "
                         "folder)")
    add_json(pr)
    pr.set_defaults(func=cmd_replay)


def parse_since(text: str, now: float) -> float | None:
    """The epoch time AGE ago, or None for no bound; `UsageError` on a bad AGE."""
    if not text:
        return None
    m = _SINCE.match(text)
    if m is None:
        raise UsageError(f"--since: expected an age like 7d, 12h, 30m or 2w, got {text!r}")
    return now - float(m.group(1)) * _UNIT[m.group(2)]


def cmd_replay(args: argparse.Namespace) -> int:
    from the_loop.decisions.reads import read_points
    from the_loop.runtime.cases import CaseWriter
    from the_loop.runtime.replay import Replayer

    since = parse_since(args.since, time.time())
    if args.point and args.point not in POINTS:
        raise UsageError(f"--point: {unknown_point_message(args.point)}")
    chain, stand_ins, through = _chain(args)
    source = _source(args)
    replayer = Replayer(chain, stand_ins)
    writer = CaseWriter(chain, Path(args.write_cases)) if args.write_cases else None
    if writer is not None:
        replayer.on_outcome = writer.add
    baseline = Baseline(args)
    report = replayer.run(baseline.points(read_points(
        source, since=since, point=args.point, work_item=args.work_item,
        problems=replayer.report.unreadable)))
    written = writer.write() if writer is not None else None
    if not report.replayed:  # on stderr: stdout stays the report (or the JSON)
        print(f"the-loop: {_why_none(args, source)}", file=sys.stderr)
    if args.json:
        data = report.to_json()
        data["baseline"] = baseline.to_json()
        if writer is not None:
            data["cases"] = {"file": str(written) if written else None,
                             "written": len(writer.cases), "skipped": writer.skipped}
        print_json(data)
    else:
        _print_report(report.to_json(), config_name=through, baseline=baseline.words())
        if writer is not None:
            _print_cases(writer.cases, writer.skipped, written, writer.folder)
    return 1 if args.fail_on_change and report.changed else 0


def _chain(args: argparse.Namespace) -> tuple[Any, dict[str, Any], str]:
    """The chain to replay through, its stand-ins, and how the report names it."""
    from the_loop.runtime.replay import replay_chain

    if args.policy:
        require_path(args, args.policy, "--policy ", or_else="leave --policy out to replay "
                                                             "through the declared hooks")
        folder = Path(args.policy).expanduser().absolute()
        if not folder.is_dir():
            raise UsageError(f"--policy {args.policy}: no policy folder there (expected a "
                             "folder of rule files)")
        name, required, _ = _replaced_entry(args, folder)
        return (_policy_as(folder, name, required), {},
                f"the policy folder {args.policy} (as hook {name!r})")
    config = config_of(args)
    chain, stand_ins = replay_chain(config, call_all=args.call_all)
    return chain, stand_ins, f"the hooks of {config.path or '(no config)'}"


def _policy_as(folder: Path, name: str, required: bool) -> Any:
    """The policy folder as a one-hook chain named `name` (`required` as the entry it
    replaces: a rule failing at run time then refuses)."""
    from the_loop.hooks.engine.chain import Chain, Link
    from the_loop.runtime.replay import policy_chain

    chain = policy_chain(folder, name=name)
    if not required:
        return chain
    return Chain([Link(link.name, link.executor, link.points, True) for link in chain.links],
                 log=chain.log)


def _replaced_entry(args: argparse.Namespace, folder: Path) -> tuple[str, bool, Path | None]:
    """The hook name the --policy folder replays under, `required`, and the folder of the
    declared entry it replaces (None: none). The entry: the declared policy entry named
    --name, or whose folder it is, or the only one declared. The name: --name; with --log,
    `policy` (what `hooks serve --policy` records); else the entry's; else `policy`.
    Replayed under another name than the log's, each rule of the entry showed twice: "would
    no longer set" under its old hook and "would have set" under the new."""
    from the_loop.hooks.declaring.declaration import parse_hooks

    config = config_of(args)
    entries = [e for e in parse_hooks(config.hooks, config.folder) if e.kind == "policy"]
    chosen = ([e for e in entries if e.name == args.name] if args.name else
              [e for e in entries if Path(e.resolved).resolve() == folder.resolve()]
              or (entries if len(entries) == 1 else []))
    entry = chosen[0] if chosen else None
    name = args.name or ("policy" if args.log or entry is None else entry.name)
    return name, entry.required if entry else False, Path(entry.resolved) if entry else None


class Baseline:
    """What the replay compares with (`--baseline`), and what it saw of it.

    `recorded`: each point's decisions as the log holds them, by whatever answered then (a
    hook server's log names that revision; the loop's own log does not). `current` (with
    --policy DIR): the declared policy entry DIR replaces, as its folder is today, run on
    each point first; the point goes on with its decisions and steps as its record, so a
    difference is the change from that folder to DIR alone.
    """

    def __init__(self, args: argparse.Namespace) -> None:
        self.choice = args.baseline
        self.revisions: dict[str, int] = {}
        self.through = ""
        self._replayer: Any = None
        if self.choice != "current":
            return
        from the_loop.runtime.replay import Replayer

        if not args.policy:
            raise UsageError("--baseline current compares a --policy DIR with the policy "
                             "entry the config declares; without --policy both sides would "
                             "be the declared hooks")
        name, required, declared = _replaced_entry(args, Path(args.policy).expanduser())
        if declared is None:
            raise UsageError(f"--baseline current: the config declares no policy entry that "
                             f"--policy {args.policy} replaces; name one with --name, or "
                             "compare with the recorded decisions (--baseline recorded)")
        self._replayer = Replayer(_policy_as(declared, name, required), {})
        self.through = f"the declared entry {name!r} ({shown_path(declared)})"

    def points(self, recorded: Any) -> Any:
        """The recorded points, as the baseline has them."""
        for rec in recorded:
            if self._replayer is None:
                key = rec.revision or "(not recorded)"
                self.revisions[key] = self.revisions.get(key, 0) + 1
                yield rec
                continue
            outcome = self._replayer.one(rec)
            if outcome is not None:
                yield _as_baseline(rec, outcome)

    def words(self) -> str:
        if self.choice == "current":
            return (f"baseline: what {self.through} decides today on the same points "
                    "(--baseline current)")
        shown = ", ".join(f"{rev} ({n})" for rev, n in self.revisions.items())
        return ("baseline: the decisions as recorded when each point fired"
                + (f", by revision {shown}" if shown else ""))

    def to_json(self) -> dict[str, Any]:
        if self.choice == "current":
            return {"choice": "current", "through": self.through}
        return {"choice": "recorded", "revisions": dict(self.revisions)}


def _as_baseline(rec: Any, outcome: Any) -> Any:
    """`rec` with the baseline's decisions and steps as its record (masked where the log
    masked the recorded ones, as the replayed side is)."""
    import dataclasses

    from the_loop.decisions.masking import mask_value
    from the_loop.hooks.engine.points import SPECS

    paths = {m.partition(".")[2] for m in rec.masked if m.startswith(f"{rec.point}.")}
    final = outcome.context.__dict__
    decisions = {d.name: mask_value(final[d.name]) if d.name in paths else final[d.name]
                 for d in SPECS[rec.point].decisions}
    steps = [{"hook": s.hook, "status": s.status, "changed": dict(s.changed),
              "rules": list(s.detail.get("rules", [])), "error": s.error}
             for s in outcome.steps]
    return dataclasses.replace(rec, decisions=decisions, steps=steps,
                               refused_by=outcome.refused_by or "")


def _source(args: argparse.Namespace) -> Path | str:
    """The decision log to read: --log (a file or a URL), else the loop's loop.db."""
    from the_loop.decisions.stores import is_url
    from the_loop.runtime.settings import settings_of

    if not args.log:  # the loop's own: on its shared database, else in this host's stateDir
        settings = settings_of(config_of(args))
        return settings.database or settings.db_path
    if is_url(args.log):
        return str(args.log)
    path = Path(args.log).expanduser()
    if not path.is_file():
        raise UsageError(f"--log {args.log}: no such file; name the SQLite file a hook server "
                         "writes (it names it when it starts) or a postgresql:// URL")
    return path


def _why_none(args: argparse.Namespace, source: Path | str) -> str:
    """Why nothing was replayed: the filters given matched no point, or none is recorded
    (a URL shown as host/dbname: never its user or parameters)."""
    from the_loop.decisions.stores import shown

    db_path = shown(source) if isinstance(source, str) else source
    given = [f"{flag} {value}" for flag, value in (
        ("--since", args.since), ("--point", args.point), ("--work-item", args.work_item))
        if value]
    if given:
        return (f"no recorded point matches {' and '.join(given)} in the decision log of "
                f"{db_path}; widen or drop the filter")
    return (f"the decision log of {db_path} holds no recorded point yet: the daemons record "
            "one per point they fire")


def _show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= _WIDTH else text[: _WIDTH - 1] + "…" + f" ({len(text)} chars)"


def _side(by: dict[str, Any] | None) -> str:
    if by is None:
        return "no hook (the incoming value)"
    out = str(by["hook"])
    if by["rules"]:
        out += " rule " + ", ".join(by["rules"])
    if by["error"]:
        out += f" (failed: {by['error']})"
    return out


def _print_report(data: dict[str, Any], *, config_name: str, baseline: str) -> None:
    stand_ins = data["stand_ins"]
    print(f"replayed {data['replayed']} recorded point(s) through {config_name}; "
          f"{data['changed']} would decide differently")
    print(baseline)
    for what, n in data.get("masked", {}).items():
        print(f"masked in the log, not seen by the replay: {what} at {n} point(s)")
    hooks = ", ".join(stand_ins.get("hooks", ()))
    if hooks and stand_ins.get("called"):
        print(f"called for real (--call-all): {hooks}")
    elif hooks:
        print(f"not called: the recorded answers of {hooks} stand in for them (--call-all "
              "calls them)")
        for name, n in stand_ins.get("unrecorded", {}).items():
            print(f"  {name}: no recorded answer at {n} point(s); it passed through there")
    for line in data["unreadable"]:
        print(f"skipped: {line}")
    for rule, entry in data.get("lacking", {}).items():
        print(f"not decided: rule {rule} ({entry['hook']}) reads {', '.join(entry['facts'])}, "
              f"which {entry['points']} recorded point(s) lack (recorded before the fact "
              "existed, or not sent by their caller): it fails there, never guesses")
    for diff in data["differences"]:
        print(f"\n{diff['time']}  {diff['point']}  {diff['work_item']}  (#{diff['id']})")
        for change in diff["changes"]:
            print(f"  {change['decision']}: {_show(change['before'])} → {_show(change['after'])}")
            print(f"    before: {_side(change['before_by'])}")
            print(f"    after:  {_side(change['after_by'])}")
    if data["by_rule"]:
        print("\nby rule:")
        for entry in data["by_rule"].values():
            for effect in entry["effects"]:
                if "summary" in effect:
                    print(f"  {effect['summary']}")


def _print_cases(cases: list[dict[str, Any]], skipped: list[str], written: Path | None,
                 folder: Path) -> None:
    if written is None:
        print(f"\nno case written: the policy in {folder} runs at none of the replayed points")
    else:
        shown = shlex.quote(shown_path(folder))  # the file relative to its policy folder
        print(f"\nwrote {len(cases)} case(s) to {written.relative_to(folder)} in the policy "
              f"folder {shown}; run `the-loop policy test {shown}`")
    for line in skipped:
        print(f"  skipped {line}")
