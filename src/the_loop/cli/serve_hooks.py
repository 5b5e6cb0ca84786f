"""`the-loop hooks serve`: host a hook class, a policy folder or the declared chain over JSON-RPC.

What is served is loaded exactly as the loop loads it (`hooks.serving.hosted`,
`hooks.declaring.loading`): a class as a `path:`/`module:` entry, a folder as a `policy:`
entry (any error refuses to start, every error listed), `--declared` as the whole chain of
the config in effect. The URL is printed on stdout, one flushed line, so a script can read
it; everything else goes to stderr: one line per call (point, status, milliseconds, fields
ignored, where a hook raised) and one per audit finding unless `--quiet`, and under
`--quiet` each ignored field still once. `--events FILE` also appends the findings
(`hooks.audit`, and for `--declared` the chain's `hooks.failed`, `hooks.refused`, …) to FILE
as JSON lines. A non-loopback host needs `--token-env` (exit 2); SIGTERM and Ctrl-C stop the
server cleanly (exit 0).
"""

from __future__ import annotations

import argparse
from typing import Any

from the_loop.decisions.stores import KEEP_DAYS


def register_serve(hooks_sub: Any) -> None:
    """Add `serve` under `the-loop hooks`."""
    pv = hooks_sub.add_parser(
        "serve", help="host a hook class, a policy folder or the declared chain over JSON-RPC",
        description="Answer one JSON-RPC 2.0 POST per point with a hook class, a policy "
                    "folder or the declared chain (docs/policy-service.md). Besides the calls: "
                    "GET /health (open; the revision served and a refused reload's error "
                    "count, its errors with the token), "
                    "GET /ready (503 while the decision log cannot be written), GET /metrics "
                    "(Prometheus; the token guards it unless --metrics-public). Every "
                    "answered call is a record in --decision-log, which `the-loop policy "
                    "replay --log` reads. SIGHUP (and --watch) reloads; a change that does "
                    "not load is refused and the last good one keeps serving.",
    )
    src = pv.add_mutually_exclusive_group(required=True)
    src.add_argument("--path", metavar="FILE", help="a .py file defining the class")
    src.add_argument("--module", metavar="MOD", help="an installed dotted module")
    src.add_argument("--policy", metavar="DIR", help="a folder of policy rule files")
    src.add_argument("--declared", action="store_true",
                     help="the whole chain declared in the config in effect")
    pv.add_argument("--executor", metavar="NAME", help="the class, if the module has several")
    pv.add_argument("--with", dest="with_json", metavar="JSON", default="{}",
                    help="constructor keyword arguments as a JSON object")
    pv.add_argument("--host", default="127.0.0.1",
                    help="default 127.0.0.1; any other host needs --token-env")
    pv.add_argument("--port", type=int, default=8765,
                    help="default 8765; 0 picks a free port (the URL is printed)")
    pv.add_argument("--token-env", metavar="VAR", default="",
                    help="require Authorization: Bearer $VAR on every call")
    pv.add_argument("--events", metavar="FILE",
                    help="append what the served policy or chain found (hooks.audit, "
                         "hooks.failed, …) to FILE as JSON lines; default: stderr lines "
                         "only (--declared: the config's event log)")
    pv.add_argument("--quiet", action="store_true",
                    help="no line per call or audit finding on stderr")
    pv.add_argument("--decision-log", metavar="PATH|URL", default="",
                    help="record every answered call in this SQLite file or postgresql:// "
                         "database; 'off' records nothing (default: served-decisions.db "
                         "here, or in stateDir with --declared)")
    pv.add_argument("--decision-log-keep-days", metavar="DAYS", default=f"{KEEP_DAYS:g}",
                    help="delete records older than DAYS from the decision log (checked at "
                         "start, then hourly; 0 keeps every record; as the loop's "
                         "decisionLog.keepDays) (default: %(default)s)")
    pv.add_argument("--mask", metavar="PATH", action="append", default=[],
                    help="a value the decision log must not keep, e.g. input_received.text "
                         "or *.prompt (repeatable; a policy folder's mask: adds more)")
    pv.add_argument("--watch", metavar="SECONDS", nargs="?", type=float, const=1.0,
                    default=None, help="reload when a file of the policy or declaration "
                                       "changes, looking every SECONDS (default 1); SIGHUP "
                                       "always reloads")
    pv.add_argument("--metrics-public", action="store_true",
                    help="serve GET /metrics without the bearer token")
    pv.set_defaults(func=serve)


def serve(args: argparse.Namespace) -> int:
    """Run `the-loop hooks serve` (`cli.hosting`, imported only now: every other command,
    `poll` above all, starts without the serving stack)."""
    from the_loop.cli.hosting import serve as run

    return run(args)
