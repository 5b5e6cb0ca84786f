"""`the-loop items …`: the local tracker for a person at a terminal."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from the_loop.cli._common import add_json, config_of, print_json

if TYPE_CHECKING:
    from the_loop.runtime.db import Database
    from the_loop.runtime.tracker import LocalTracker
    from the_loop.runtime.tracker.base import PullRequest


def register(sub: Any) -> None:
    p = sub.add_parser("items", help="tickets and pull requests in the local tracker")
    s = p.add_subparsers(dest="items_command", metavar="SUBCOMMAND", required=True)

    a = s.add_parser("add", help="add a ticket or pull request; prints its ref")
    a.add_argument("title", help="its title, one line")
    a.add_argument("--body", default="", help="its description (default: empty)")
    a.add_argument("--kind", choices=("issue", "pull-request"), default="issue")
    a.add_argument("--for", dest="parent", default="", metavar="REF",
                   help="the ticket a pull request belongs to")
    a.add_argument("--label", action="append", default=[], metavar="L",
                   help="a label to add; repeat for several (default: none)")
    a.add_argument("--author", default="", metavar="LOGIN",
                   help="the person who filed it (default: nobody named)")
    a.add_argument("--base", default=None, metavar="BRANCH",
                   help="a pull request's base branch, e.g. main (default: none recorded)")
    a.add_argument("--head", default=None, metavar="BRANCH",
                   help="a pull request's head branch (default: none recorded)")
    a.add_argument("--head-repository", default=None, metavar="OWNER/REPO",
                   help="where the head branch lives; another repository makes the pull "
                        "request a fork's (default: this repository)")
    a.add_argument("--draft", action="store_true", default=None,
                   help="a draft pull request")
    a.set_defaults(func=cmd_add)

    ls = s.add_parser("list", help="list work items")
    ls.add_argument("--state", choices=("open", "closed"), help="only these (default: all)")
    add_json(ls)
    ls.set_defaults(func=cmd_list)

    sh = s.add_parser("show", help="one work item with its comments")
    sh.add_argument("ref", help="the work item: local:acme/app#1, or just its number")
    add_json(sh)
    sh.set_defaults(func=cmd_show)

    c = s.add_parser("comment", help="comment as a person")
    c.add_argument("ref", help="the work item: local:acme/app#1, or just its number")
    c.add_argument("text", help="the comment; a slash command (/approve) is just text here")
    c.add_argument("--author", default=None, metavar="LOGIN",
                   help="the person you write for (default: someone)")
    c.set_defaults(func=cmd_comment)

    lb = s.add_parser("label", help="add (or --remove) a label")
    lb.add_argument("ref", help="the work item: local:acme/app#1, or just its number")
    lb.add_argument("label", help="the label, e.g. loop or quiet")
    lb.add_argument("--remove", action="store_true", help="remove it instead of adding it")
    lb.set_defaults(func=cmd_label)

    cl = s.add_parser("close", help="close a work item as a person")
    cl.add_argument("ref", help="the work item: local:acme/app#1, or just its number")
    cl.add_argument("--actor", default=None, metavar="LOGIN",
                   help="the person who closes it (default: someone)")
    cl.set_defaults(func=cmd_close)


def tracker_of(
    args: argparse.Namespace, *, read: bool = False
) -> tuple[LocalTracker, Database]:
    """The local tracker of the config in effect. `read`: a command that only reads, which
    creates no state folder or database (it reads an empty one when none exists yet)."""
    from the_loop.runtime.db import open_database
    from the_loop.runtime.settings import settings_of
    from the_loop.runtime.tracker import LocalTracker

    settings = settings_of(config_of(args))
    path = settings.db_path
    fresh = read and not settings.database and not path.exists()
    db = open_database(Path(":memory:") if fresh else settings.db_target)
    return LocalTracker(db, settings.repository), db


def _person(tracker: LocalTracker, named: str | None,
            flag: str, default: str = "someone") -> str:
    """Whom the operator acts for; inside an agent session, always the agent."""
    from the_loop.runtime.identity import acting_as

    state_dir = tracker.db.path.parent  # loop.db lives in stateDir
    return acting_as(tracker.db, state_dir, named, default, flag)


def _person_only(tracker: LocalTracker, what: str) -> None:
    """Labels and closing are a person's: refused inside an agent session (labels are facts
    policies read; closing an item ends it without review)."""
    from the_loop.errors import UsageError
    from the_loop.runtime.identity import agent_session

    sid = agent_session(tracker.db, tracker.db.path.parent / "sessions")
    if sid:
        raise UsageError(f"this command runs inside agent session {sid}: an agent cannot "
                         f"{what}; ask a person (`the-loop ask`)")


def cmd_add(args: argparse.Namespace) -> int:
    tracker, db = tracker_of(args)
    try:
        author = _person(tracker, args.author or None, "--author", default="")
        if args.label:
            _person_only(tracker, "label work items")
        print(tracker.add(args.title, body=args.body, kind=args.kind, parent=args.parent,
                          labels=args.label, author=author, pull=_pull_of(args, tracker)))
    finally:
        db.close()
    return 0


def _pull_of(args: argparse.Namespace, tracker: LocalTracker) -> PullRequest | None:
    """The pull-request flags given, checked (None when none is given)."""
    from the_loop.errors import UsageError
    from the_loop.runtime.tracker.pulls import PULL_KEYS, pull_request

    given = {k: getattr(args, k) for k in PULL_KEYS if getattr(args, k) is not None}
    if not given:
        return None
    if args.kind != "pull-request":
        flags = ", ".join("--" + k.replace("_", "-") for k in given)
        raise UsageError(f"{flags}: only a pull request has them; add --kind pull-request")
    return pull_request(tracker.repository, **given)


def cmd_list(args: argparse.Namespace) -> int:
    tracker, db = tracker_of(args, read=True)
    try:
        items = tracker.items(state=args.state)
    finally:
        db.close()
    if args.json:
        print_json([i.to_json() for i in items])
        return 0
    for i in items:
        labels = f"  [{', '.join(i.labels)}]" if i.labels else ""
        print(f"{i.ref:<24} {i.kind:<12} {i.state:<6} {i.title}{labels}")
    if not items:
        print("no work items; add one with `the-loop items add TITLE`")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    tracker, db = tracker_of(args, read=True)
    try:
        item = tracker.get(args.ref)
        row = db.conn.execute("SELECT state, node FROM work WHERE ref=?",
                              (item.ref,)).fetchone()
    finally:
        db.close()
    work, node = (str(row[0]), str(row[1])) if row else ("", "")
    if args.json:
        # `work_state`, `node`, `at_gate`: where the loop has the item (null: never armed)
        print_json({**item.to_json(), "work_state": work or None, "node": node or None,
                    "at_gate": work == "gate"})
        return 0
    print(f"{item.ref}  {item.kind}  {item.state}")
    print(f"title:  {item.title}")
    if item.parent:
        print(f"for:    {item.parent}")
    if item.author:
        print(f"author: {item.author}")
    if item.pull is not None:
        p = item.pull
        print(f"branch: {p.head_repository}:{p.head or '-'} → {p.base or '-'}"
              + ("  (fork)" if p.fork else "") + ("  (draft)" if p.draft else ""))
    print(f"labels: {', '.join(item.labels) or '-'}")
    if work:
        gate = " (a human gate: it waits for /approve or /reject)" if work == "gate" else ""
        print(f"loop:   {work}{f' at {node}' if node else ''}{gate}")
    if item.body:
        print(f"\n{item.body}")
    for c in item.comments:
        print(f"\n--- #{c.id} @{c.author}\n{c.body}")
    return 0


def cmd_comment(args: argparse.Namespace) -> int:
    tracker, db = tracker_of(args)
    try:
        author = _person(tracker, args.author, "--author")
        cid = tracker.comment(args.ref, args.text, author=author)
    finally:
        db.close()
    print(f"comment #{cid} on {tracker.resolve(args.ref)}")
    return 0


def cmd_label(args: argparse.Namespace) -> int:
    tracker, db = tracker_of(args)
    try:
        _person_only(tracker, "label work items")
        tracker.label(args.ref, args.label, remove=args.remove)
    finally:
        db.close()
    return 0


def cmd_close(args: argparse.Namespace) -> int:
    tracker, db = tracker_of(args)
    try:
        _person_only(tracker, "close work items")
        closed = tracker.close(args.ref, actor=_person(tracker, args.actor, "--actor"))
    finally:
        db.close()
    print(f"{tracker.resolve(args.ref)} {'closed' if closed else 'was already closed'}")
    return 0
