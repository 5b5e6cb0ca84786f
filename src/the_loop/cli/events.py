"""`the-loop events`: read the event log as a person would (or as JSON lines)."""

from __future__ import annotations

import argparse
import fnmatch
import json
import sys
import time
from pathlib import Path
from typing import Any

from the_loop.cli._common import add_json, config_of
from the_loop.errors import UsageError, one_line

_SKIP = ("ts", "event", "source", "pid", "work_item")


def register(sub: Any) -> None:
    e = sub.add_parser("events", help="the event log, readable (--json for machines)")
    e.add_argument("--follow", "-f", action="store_true", help="keep printing new events")
    e.add_argument("--event", default="*", metavar="GLOB", help="e.g. 'hooks.*'")
    e.add_argument("--work-item", default="", metavar="REF",
                   help="only this work item's events: local:acme/app#1, or just 1 "
                        "(default: all)")
    add_json(e)
    e.set_defaults(func=cmd_events)


def line_of(record: dict[str, Any]) -> str:
    """One event as one line: every value printable and cut (a ref, a reason or a hook's
    error may come from a caller, an agent or a hook: none may forge or colour a line)."""
    ts = record.get("ts", 0)
    try:
        when = time.strftime("%H:%M:%S", time.localtime(float(ts)))
    except (TypeError, ValueError, OverflowError, OSError):  # a line someone else wrote
        when = "--:--:--"
    rest = " ".join(
        f"{one_line(str(k), 80)}="
        f"{one_line(v if isinstance(v, str) else json.dumps(v, ensure_ascii=False), 300)}"
        for k, v in record.items() if k not in _SKIP
    )
    ref = one_line(str(record.get("work_item") or ""), 300)
    event = one_line(str(record.get("event", "?")), 80)
    return f"{when} {event:<18} {ref:<20} {rest}".rstrip()


def cmd_events(args: argparse.Namespace) -> int:
    from the_loop.events import EventTail
    from the_loop.runtime.settings import settings_of

    _check_event_glob(args.event)
    config = config_of(args)
    path = settings_of(config).events_path
    want_ref = args.work_item

    def keep(r: dict[str, Any]) -> bool:
        if not fnmatch.fnmatchcase(str(r.get("event", "")), args.event):
            return False
        if want_ref:
            ref = str(r.get("work_item", ""))
            return ref == want_ref or ref.endswith(want_ref if "#" in want_ref
                                                   else f"#{want_ref.lstrip('#')}")
        return True

    tail = EventTail(path)
    shown = read = 0
    while True:
        for r in tail.new():
            read += 1
            if keep(r):
                shown += 1
                print(json.dumps(r, ensure_ascii=False) if args.json else line_of(r),
                      flush=True)
        if not args.follow:
            if not shown:  # say why there is nothing, on stderr (stdout stays the records)
                why = _why_nothing(config.path, path, read, tail.unreadable, _filters(args))
                print(f"the-loop: {why}", file=sys.stderr)
            return 0
        time.sleep(0.5)


def _check_event_glob(pattern: str) -> None:
    """Refuse an --event that can match no event type, with the type it most likely meant."""
    from the_loop.events import EVENT_TYPES
    from the_loop.util import closest

    if any(fnmatch.fnmatchcase(t, pattern) for t in EVENT_TYPES):
        return
    near = closest(pattern, tuple(EVENT_TYPES))
    families = ", ".join(sorted({t.split(".", 1)[0] + ".*" for t in EVENT_TYPES}))
    hint = f"did you mean {near!r}? " if near else ""
    raise UsageError(f"--event {pattern!r} matches no event type; {hint}the types are "
                     f"{families}")


def _filters(args: argparse.Namespace) -> str:
    """The filters given, as typed (`--event 'hooks.*'`, `--work-item 3`)."""
    given = [f"--event {args.event!r}"] if args.event != "*" else []
    given += [f"--work-item {args.work_item}"] if args.work_item else []
    return " and ".join(given) or "the filters"


def _why_nothing(config: Path | None, path: Path, read: int, unreadable: int,
                 filters: str) -> str:
    if unreadable and not read:
        return (f"{unreadable} line(s) of {path} are not events (not JSON objects); is it "
                "the-loop's event log?")
    if read:
        return f"none of the {read} event(s) in {path} match {filters}"
    if config is None:
        return ("no cli-config.yaml found, so no event log to read: pass --config PATH, set "
                "$THE_LOOP_CLI_CONFIG, or run `the-loop init`")
    return (f"no events yet in {path}: the loop writes them as it works (`the-loop poll`, "
            "`the-loop serve`); a dry run (`hooks run`) writes none")
