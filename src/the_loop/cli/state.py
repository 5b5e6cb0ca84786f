"""`the-loop state migrate | check`: the loop's database (SQLite in stateDir, or PostgreSQL)."""

from __future__ import annotations

import argparse
from typing import Any

from the_loop.cli._common import add_json, config_of, print_json, seconds


def register(sub: Any) -> None:
    p = sub.add_parser("state", help="the loop's database: migrate its schema, check it")
    s = p.add_subparsers(dest="state_command", metavar="SUBCOMMAND", required=True)
    m = s.add_parser("migrate", help="create or upgrade the schema (every daemon also does "
                                     "at start)")
    m.set_defaults(func=cmd_migrate)
    c = s.add_parser("check", help="connectivity, schema version, clock skew, leases held "
                                   "by hosts not seen lately, and this host id held by "
                                   "another machine; exit 1 on a problem")
    c.add_argument("--max-skew", type=seconds, default=2.0, metavar="S",
                   help="the clock difference from the database that counts as a problem "
                        "(default: %(default)s)")
    from the_loop.cli.loop import add_host_id

    add_host_id(c)
    add_json(c)
    c.set_defaults(func=cmd_check)


def cmd_migrate(args: argparse.Namespace) -> int:
    from the_loop.runtime.db import SCHEMA_VERSION, open_database
    from the_loop.runtime.settings import settings_of

    settings = settings_of(config_of(args))
    db = open_database(settings.db_target, migrate=False)
    try:
        before = db.migrate()
        where = f"{db.dialect.name} at {db.where}"
    finally:
        db.close()
    if before == SCHEMA_VERSION:
        print(f"{where}: schema version {SCHEMA_VERSION}, already current")
    else:
        print(f"{where}: schema version {before} → {SCHEMA_VERSION}")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from the_loop.runtime.lease import set_host_id
    from the_loop.runtime.settings import settings_of
    from the_loop.runtime.statecheck import check_state

    if args.host_id:
        set_host_id(args.host_id)

    findings = check_state(settings_of(config_of(args)), max_skew=args.max_skew)
    if args.json:
        print_json([f.to_json() for f in findings])
    else:
        for f in findings:
            print(f"{'ok' if f.ok else 'PROBLEM':8}{f.check}: {f.detail}")
    return 0 if all(f.ok for f in findings) else 1
