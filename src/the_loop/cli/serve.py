"""`the-loop serve`: the control plane daemon."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from typing import Any

from the_loop.errors import LoopError, UsageError


def register(sub: Any) -> None:
    from the_loop.cli.loop import add_host_id

    s = sub.add_parser(
        "serve", help="the control plane: a JSON API, a tracker webhook and a read-only "
                      "console in a browser (/console/)",
        description="The control plane: the JSON API (/items, /items/REF/input), the "
                    "tracker webhook (/webhook) and a read-only console in a browser at "
                    "/console/ (docs/console.md). Every caller brings a token: the "
                    "operator's (--token-env or serve.tokenEnv), a person's (serve.tokens; "
                    "it also signs in to the console) or a session's own "
                    "($THE_LOOP_SESSION_TOKEN, handed to each session: its own item only, "
                    "never the console). GET /health is open.")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8700)
    s.add_argument("--token-env", default="", metavar="VAR",
                   help="the operator's token variable (default: serve.tokenEnv); people "
                        "get their own tokens under serve.tokens")
    s.add_argument("--quiet", action="store_true", help="no line per thing the loop does")
    add_host_id(s)
    s.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    from the_loop.cli.loop import daemon
    from the_loop.runtime.control import ControlServer

    loop = daemon(args, "serve")
    token_env = args.token_env or loop.settings.serve_token_env
    if token_env:  # a token named on the command line is a secret like any other
        loop.settings.secret_names = loop.settings.secret_names | {token_env}
    if loop.settings.serve_agents:
        loop.db.close()
        logins = ", ".join(sorted(loop.settings.serve_agents))
        raise UsageError(f"refusing to start: serve.agents ({logins}) is a token every "
                         "session would share, which cannot be bound to one session; remove "
                         "it: each session is handed a token of its own "
                         "($THE_LOOP_SESSION_TOKEN), its bearer here (docs/security.md)")
    if not token_env and not loop.settings.serve_tokens:
        loop.db.close()
        raise UsageError("refusing to start: the control plane authenticates every caller "
                         "(on loopback too); give people tokens under serve.tokens "
                         "({alice: ALICE_TOKEN}) and/or the operator one with --token-env VAR "
                         "or serve.tokenEnv")
    missing = sorted(v for v in [token_env, *loop.settings.serve_tokens.values()]
                     if v and not os.environ.get(v))
    if missing:
        loop.db.close()
        raise UsageError(f"refusing to start: {', '.join('$' + v for v in missing)} is not set "
                         "(export each token variable the config names)")
    if not args.quiet:
        from the_loop.runtime.narrate import narrator

        loop.log.on_emit = narrator(sys.stdout)
    try:
        server = ControlServer(loop, args.host, args.port, token_env)
    except OSError as exc:
        loop.db.close()
        raise UsageError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") \
            from None
    try:  # refused while another instance holds this host id
        loop.start_heartbeat(
            on_clash=lambda: threading.Thread(target=server.shutdown, daemon=True).start())
    except LoopError:
        server.server_close()
        loop.db.close()
        raise
    loop.log.emit("serve.started", url=server.url)
    print(f"the-loop control plane on {server.url}\nthe-loop console on {server.url}/console/ "
          "(sign in with a token from serve.tokens, or the operator's)", flush=True)
    stopping: list[int] = []

    def on_signal(signum: int, frame: object) -> None:
        # The first signal starts the shutdown; the rest (a storm, a nested one landing
        # in here) return at once: each used to start a thread of its own and set an
        # Event (a lock a handler landing inside it deadlocks on), and a storm of them
        # ended the server with RecursionError.
        if stopping:
            return
        stopping.append(signum)
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        server.serve_forever()
    finally:
        # Stopping: more SIGTERMs (a storm) are ignored, not its death by the signal in the
        # clean-up or at exit, where Python puts the default back in place of `on_signal`.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        server.server_close()
        clash = loop.heartbeat is not None and bool(loop.heartbeat.clash)
        loop.stop_heartbeat()
        loop.log.emit("serve.stopped")
        server.close_loops()
    return 1 if clash else 0
