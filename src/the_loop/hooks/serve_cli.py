"""`the-loop hooks serve`: host a local hook class over JSON-RPC with HookServer, unchanged.

The class is loaded exactly as the declaration loader loads a `path:` or `module:` entry
(same import, same class choice, same `with` construction). The URL is printed on stdout,
one flushed line, so a script can read it; everything else goes to stderr. A non-loopback
host needs `--token-env` (exit 2); SIGTERM and Ctrl-C stop the server cleanly (exit 0).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from the_loop.errors import HooksConfigError, LoopError, UsageError
from the_loop.hooks.executor import LifecycleHooks

CLI_NAMES = {"path": "--path", "module": "--module", "executor": "--executor", "with": "--with"}


def load_executor(
    *,
    path: str | None,
    module: str | None,
    executor: str = "",
    with_: dict[str, Any] | None = None,
    names: dict[str, str] | None = None,
) -> LifecycleHooks:
    """Import and construct a hook class as a `path:`/`module:` entry would be.

    Errors are `HooksConfigError`s whose message names the option (`names` maps the
    declaration keys path/module/executor/with to what the person typed).
    """
    from the_loop.hooks.declaration import HookEntry
    from the_loop.hooks.loading import _construct

    names = names or CLI_NAMES
    kind = "path" if path else "module"
    target = path or module or ""
    resolved = target
    if path:
        file = Path(path).expanduser().absolute()
        if not file.is_file():
            raise HooksConfigError(f"{names['path']}: no file at {file}", key="path")
        resolved = str(file)
    elif not all(part.isidentifier() for part in target.split(".")):
        raise HooksConfigError(
            f"{names['module']}: expected a dotted module name like acme.hooks, got {target!r}",
            key="module",
        )
    if executor and not executor.isidentifier():
        raise HooksConfigError(
            f"{names['executor']}: expected a class name, got {executor!r}", key="executor",
        )
    entry = HookEntry(index=0, name="served", kind=kind, target=target, resolved=resolved,
                      executor=executor, with_=dict(with_ or {}))
    try:
        built = _construct(entry)
    except HooksConfigError as exc:
        raise HooksConfigError(_relabel(str(exc), entry.label, names), key=exc.key) from None
    if not isinstance(built, LifecycleHooks):  # pragma: no cover - path/module entries
        raise HooksConfigError(f"{target!r} did not give a LifecycleHooks executor")
    return built


def _relabel(text: str, label: str, names: dict[str, str]) -> str:
    """Turn the loader's `hooks[0] ('served') → key: …` into `--key: …`."""
    if text.startswith(f"{label} → "):
        key, _, rest = text[len(label) + 3:].partition(": ")
        rest = rest.replace("name one with executor:", f"name one with {names['executor']}")
        return f"{names.get(key, key)}: {rest}"
    if text.startswith(f"{label}: "):
        return f"{names['with']}: {text[len(label) + 2:]}"
    return text


def serve(args: argparse.Namespace) -> int:
    """Run `the-loop hooks serve`; returns the exit code."""
    from the_loop.hooks.declaration import ENV_RE, is_loopback
    from the_loop.hooks.server import HookServer, served_points

    token_env: str = args.token_env or ""
    host: str = args.host
    if token_env:
        if not ENV_RE.match(token_env):
            raise UsageError(
                f"--token-env: expected the NAME of an environment variable (e.g. "
                f"HOOK_TOKEN), got {token_env!r}; never put the token itself on the command line"
            )
        if not os.environ.get(token_env):
            raise UsageError(
                f"--token-env {token_env}: the variable is unset or empty; export it before "
                "starting (the server would otherwise refuse every call)"
            )
    elif not is_loopback(host):
        raise UsageError(
            f"--host {host}: refusing to listen beyond loopback without --token-env: anyone "
            "who reaches the port could change your decisions. Pass --token-env VAR (and put "
            "TLS in front: the loop sends tokens only over https to other hosts), or use "
            "--host 127.0.0.1"
        )
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port: expected 0..65535, got {args.port}")
    try:
        with_ = json.loads(args.with_json or "{}")
    except ValueError as exc:
        raise UsageError(f"--with: not JSON ({exc}); pass an object like '{{\"team\": \"a\"}}'")
    if not isinstance(with_, dict) or not all(
        isinstance(k, str) and k.isidentifier() for k in with_
    ):
        raise UsageError(
            f"--with: expected a JSON object of constructor keyword arguments, got "
            f"{args.with_json!r}"
        )
    executor = load_executor(path=args.path, module=args.module,
                             executor=args.executor or "", with_=with_)
    try:
        server = HookServer(executor, host=host, port=args.port, token_env=token_env)
    except OSError as exc:
        raise LoopError(f"cannot listen on {host}:{args.port}: {exc.strerror or exc}") from None
    points = served_points(executor)
    print(server.url, flush=True)
    print(
        f"the-loop: serving {type(executor).__name__} at {server.url} (points: "
        f"{', '.join(points) or 'none'}; GET {server.url}health); "
        f"{'bearer token required; ' if token_env else ''}Ctrl-C or SIGTERM stops it",
        file=sys.stderr, flush=True,
    )
    previous: Any = None
    in_main = threading.current_thread() is threading.main_thread()
    stop = threading.Event()

    def on_term(signum: int, frame: FrameType | None) -> None:
        # Only set a flag: an exception raised here could land inside a request being
        # handled on this thread and be swallowed by socketserver's error handler.
        stop.set()

    if in_main:
        previous = signal.signal(signal.SIGTERM, on_term)
    server.serve_in_thread()
    try:
        while not stop.wait(0.25):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
        if in_main:
            signal.signal(signal.SIGTERM, previous)
    print("the-loop: hook server stopped", file=sys.stderr, flush=True)
    return 0
