"""`the-loop serve`: the control plane daemon."""

from __future__ import annotations

import argparse
import signal
import threading
from typing import Any

from the_loop.errors import UsageError
from the_loop.hooks.declaration import is_loopback


def register(sub: Any) -> None:
    s = sub.add_parser("serve", help="the control plane: a JSON API and a tracker webhook")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8700)
    s.add_argument("--token-env", default="", metavar="VAR",
                   help="require Authorization: Bearer $VAR (default: serve.tokenEnv)")
    s.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    from the_loop.cli.loop import daemon
    from the_loop.runtime.control import ControlServer

    loop = daemon(args, "serve")
    token_env = args.token_env or loop.settings.serve_token_env
    if not is_loopback(args.host) and not token_env:
        loop.db.close()
        raise UsageError(f"refusing to listen on {args.host} without a token: pass "
                         "--token-env VAR or set serve.tokenEnv")
    server = ControlServer(loop, args.host, args.port, token_env)
    loop.log.emit("serve.started", url=server.url)
    print(f"the-loop control plane on {server.url}", flush=True)
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        server.serve_forever()
    finally:
        server.server_close()
        loop.log.emit("serve.stopped")
        loop.db.close()
    return 0
