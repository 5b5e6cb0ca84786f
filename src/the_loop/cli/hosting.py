"""Running `the-loop hooks serve` (its options are in `cli.serve_hooks`): load what is served,
open its operations, serve until SIGTERM or Ctrl-C, reload on SIGHUP or a watched change."""


from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from the_loop.cli._common import CLI_NAMES, config_of, require_path, with_arg
from the_loop.errors import LoopError, UsageError, one_line
from the_loop.events import EventLog
from the_loop.hooks.declaring.declaration import ENV_RE
from the_loop.hooks.declaring.loading import load_executor
from the_loop.hooks.executors.policy import PolicyExecutor
from the_loop.hooks.serving.hosted import (
    ChainExecutor,
    declared_executor,
    policy_executor,
    redactor,
    served_log,
)
from the_loop.hooks.serving.jsonrpc import (
    AnyExecutor,
    CallRecord,
    OnCall,
    first_sighting_log,
    served_points,
)
from the_loop.hooks.serving.operated import (
    check_masks,
    default_log,
    operations,
    parse_keep_days,
    reloader,
)
from the_loop.hooks.serving.reload import Reloader
from the_loop.hooks.serving.server import HookServer
from the_loop.runtime.narrate import line_of
from the_loop.util import is_loopback, say
from the_loop.wakeup import Wakeup


def serve(args: argparse.Namespace) -> int:
    """Run `the-loop hooks serve`; returns the exit code."""
    token_env: str = args.token_env or ""
    _check_listen(args.host, args.port, token_env)
    log = served_log(args.events, token_env, declared=args.declared)
    executor = _executor(args, log)
    _say_lints(executor)
    shown = executor.chain.log if isinstance(executor, ChainExecutor) else log
    redact = redactor(token_env)
    if shown is not None and not args.quiet:
        shown.on_emit = lambda record: _finding_log(record, redact)
    on_call = first_sighting_log(redact) if args.quiet else _per_call_log(redact)
    secrets_in = (executor.chain.log if isinstance(executor, ChainExecutor)
                  else log or EventLog()).secrets_in
    check_masks(args.mask, "--mask")
    if args.watch is not None and not 0.05 <= args.watch <= 3600:
        raise UsageError(f"--watch: expected 0.05 to 3600 seconds, got {args.watch}")
    target = args.decision_log or default_log(config_of(args) if args.declared else None)
    keep = parse_keep_days(args.decision_log_keep_days, "--decision-log-keep-days")
    ops = operations(executor, log=target, masks=args.mask, secrets_in=secrets_in,
                     metrics_public=args.metrics_public, keep_days=keep)
    try:
        server = HookServer(executor, host=args.host, port=args.port, token_env=token_env,
                            on_call=on_call, ops=ops)
    except OSError as exc:
        ops.close()
        raise LoopError(f"cannot listen on {args.host}:{args.port}: "
                        f"{exc.strerror or exc}") from None
    def rebuild() -> AnyExecutor:
        built = _executor(args, log)
        if _revision(built) != _revision(server.core.executor):  # a storm of SIGHUPs
            _say_lints(built)                                   # repeats nothing
        return built

    reload_ = (reloader([server.core], ops, rebuild, masks=args.mask, secrets_in=secrets_in)
               if args.policy or args.declared else None)
    points = served_points(executor)

    def announce() -> None:  # once SIGTERM is handled: a caller may stop it on reading this
        print(server.url, flush=True)
        print(
            f"the-loop: serving {_what(args, executor)} at {server.url} (points: "
            f"{', '.join(points) or 'none'}; GET {server.url}health); "
            f"{'bearer token required; ' if token_env else ''}Ctrl-C or SIGTERM stops it",
            file=sys.stderr, flush=True,
        )
        watching = reload_ and args.watch
        print(f"the-loop: revision {ops.revision or '(none)'}; decision log: "
              f"{ops.log_target or 'off'}; GET {server.url}metrics, {server.url}ready"
              f"{'; SIGHUP reloads' if reload_ else ''}"
              f"{f', and every {args.watch:g}s when a file changed' if watching else ''}",
              file=sys.stderr, flush=True)

    try:
        _run(server, reload_, args.watch if reload_ else None, announce)
    finally:
        ops.close()
    print("the-loop: hook server stopped", file=sys.stderr, flush=True)
    return 0


def _check_listen(host: str, port: int, token_env: str) -> None:
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
    if not 0 <= port <= 65535:
        raise UsageError(f"--port: expected 0..65535, got {port}")


def _executor(args: argparse.Namespace, log: EventLog | None) -> AnyExecutor:
    if (args.policy or args.declared) and (args.executor or args.with_json not in ("", "{}")):
        raise UsageError("--executor and --with name and build a hook class: they go with "
                         "--path or --module, not with --policy or --declared")
    for option, value in (("--path", args.path), ("--policy", args.policy)):
        if value:
            require_path(args, value, f"{option} ", or_else="serve the whole declared chain "
                                                            "with --declared")
    if args.policy:
        return policy_executor(args.policy, log=log)
    if args.declared:
        return declared_executor(config_of(args), log=log, token_env=args.token_env or "")
    return load_executor(path=args.path, module=args.module, executor=args.executor or "",
                         with_=with_arg(args.with_json), names=CLI_NAMES)


def _revision(executor: AnyExecutor) -> str:
    return str(getattr(executor, "revision", ""))


def _say_lints(executor: AnyExecutor) -> None:
    """What `policy check` warns about the policies served (a reversed `regex_match`, a rule
    that can never match…), on stderr, at start and for each new revision a reload loads
    (issue 30, item 14)."""
    from the_loop.hooks.policy.lints import lint

    if isinstance(executor, PolicyExecutor):
        found = lint(executor.policy)
    elif isinstance(executor, ChainExecutor):
        found = [f"policy entry {link.name!r}: {warning}" for link in executor.chain.links
                 if isinstance(link.executor, PolicyExecutor)
                 for warning in lint(link.executor.policy)]
    else:
        found = []
    for warning in found:
        say(f"the-loop: warning: {warning}")


def _what(args: argparse.Namespace, executor: AnyExecutor) -> str:
    if args.policy:
        return f"the policy folder {args.policy}"
    if args.declared:
        return "the declared chain"
    return type(executor).__name__


def _finding_log(record: dict[str, Any], redact: Callable[[str], str]) -> None:
    """A served policy's audit finding (or a declared chain's failure) as one stderr line."""
    if record["event"] in ("hooks.audit", "hooks.failed"):
        print(redact(f"the-loop: {line_of(record)}"), file=sys.stderr, flush=True)


def _per_call_log(redact: Callable[[str], str]) -> OnCall:
    def record(call: CallRecord) -> None:
        line = f"the-loop: {call.point} {call.status} {call.ms:.2f} ms"
        if call.refused:
            line += " (refused)"
        if call.failure:
            line += f": {one_line(call.failure, 300)}"
        if call.raised_at:
            line += f" (raised at {call.raised_at})"
        if call.ignored:
            line += f" (ignored: {', '.join(call.ignored)})"
        print(redact(line), file=sys.stderr, flush=True)

    return record


def _run(server: HookServer, reload_: Reloader | None, watch: float | None,
         announce: Callable[[], None]) -> None:
    """Serve until SIGTERM or Ctrl-C; reload on SIGHUP (and, with `watch`, on a change).
    `announce` prints the URL once the signals are handled. The handlers only set flags
    (`wakeup.Wakeup`); this loop, in the main thread, stops and reloads."""
    signals = (signal.SIGTERM, signal.SIGHUP) if reload_ is not None else (signal.SIGTERM,)
    # A SIGTERM after the one that stopped it (a storm) is ignored while it closes its
    # decision log and exits, not its death by the signal (exit -15, the log not closed).
    with Wakeup(signals, ignore_after=(signal.SIGHUP, signal.SIGTERM)) as wakeup:
        try:
            # Inside the try: a Ctrl-C the moment the first call is answered still stops.
            announce()
            server.serve_in_thread()
            _wait(wakeup, reload_, watch)
        except KeyboardInterrupt:
            pass
        finally:
            server.shutdown()


def _wait(wakeup: Wakeup, reload_: Reloader | None, watch: float | None) -> None:
    """Wake on SIGTERM, SIGHUP or the watch's tick until stopped. Nothing a reload or a
    look raises ends the server: it is a refused reload, said on stderr (issue 31, item 1)."""
    tick = min(0.25, watch) if watch else 0.25
    next_look = time.monotonic() + (watch or 0)
    while True:
        came = wakeup.wait(tick)
        if signal.SIGTERM in came:
            return
        if reload_ is None:
            continue
        try:
            if signal.SIGHUP in came:
                reload_.reload("SIGHUP")
            elif watch and time.monotonic() >= next_look:
                next_look = time.monotonic() + watch
                if reload_.changed():
                    reload_.reload("a file changed")
        except Exception as exc:  # Reloader refuses what it knows; this is the last guard
            say(f"the-loop: reload refused: {type(exc).__name__}: {exc}; the last good "
                "revision keeps serving")
