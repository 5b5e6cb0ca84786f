"""The WSGI app for gunicorn and friends: the protocol, auth, health and limits of `HookServer`.

`make_wsgi_app(executor, token_env="")` decides every request through `core.Core`, as
`hooks serve` and the ASGI app do. Slow clients are the WSGI server's business
(gunicorn's `--timeout`, a proxy in front of sync workers, or `--worker-class gthread`).

gunicorn loads what to serve from environment variables through `app_from_env()`:

    THE_LOOP_HOOK_POLICY=/srv/policies \\
    THE_LOOP_HOOK_TOKEN_ENV=COMPLIANCE_TOKEN \\
    gunicorn -w 2 -k gthread -b 127.0.0.1:8765 'the_loop.hooks.serving.wsgi:app_from_env()'

- exactly one of: `THE_LOOP_HOOK_PATH` (a .py file) or `THE_LOOP_HOOK_MODULE` (a dotted
  module) naming a hook class; `THE_LOOP_HOOK_POLICY` (a policy folder);
  `THE_LOOP_HOOK_CONFIG` (a cli-config.yaml whose declared chain is served whole).
- `THE_LOOP_HOOK_EXECUTOR`: the class, when the module defines several.
- `THE_LOOP_HOOK_WITH`: constructor keyword arguments, a JSON object.
- `THE_LOOP_HOOK_TOKEN_ENV`: the NAME of the variable holding the bearer token.
- `THE_LOOP_HOOK_EVENTS`: a file to append the served policy's or chain's findings to
  (`hooks.audit`, `hooks.failed`, …), one JSON line each; several workers may share it.
- `THE_LOOP_HOOK_DECISION_LOG`: the decision log (a SQLite file or a postgresql:// URL;
  `off` for none; default as `hooks serve`); `THE_LOOP_HOOK_MASK`: mask paths, comma
  separated; `THE_LOOP_HOOK_WATCH`: reload every worker when a file changes, looking
  every that many seconds; `THE_LOOP_HOOK_METRICS_PUBLIC=1`: /metrics without the token.

Keys a caller sends that this catalog does not know are ignored; each is written once to
stderr (gunicorn's error log) the first time it is seen at a point.
"""

from __future__ import annotations

import atexit
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from the_loop.config import read_config
from the_loop.errors import HooksConfigError, LoopError
from the_loop.events import EventLog
from the_loop.hooks.declaring.loading import load_executor
from the_loop.hooks.executors.policy import PolicyExecutor
from the_loop.hooks.serving.core import Core
from the_loop.hooks.serving.hosted import (
    ChainExecutor,
    declared_executor,
    policy_executor,
    redactor,
    served_log,
    token_of,
)
from the_loop.hooks.serving.jsonrpc import AnyExecutor, OnCall, first_sighting_log
from the_loop.hooks.serving.operated import (
    KEEP_DAYS,
    check_masks,
    default_log,
    operations,
    parse_keep_days,
    reloader,
)
from the_loop.hooks.serving.wire import MAX_REQUEST, REVISION_HEADER, Reply, reason_of

if TYPE_CHECKING:
    from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

ENV_PREFIX = "THE_LOOP_HOOK_"
_SOURCES = ("PATH", "MODULE", "POLICY", "CONFIG")


def make_wsgi_app(executor: AnyExecutor, token_env: str = "", *,
                  on_call: OnCall | None = None) -> WSGIApplication:
    """A WSGI application serving `executor` (same protocol, auth, health and limits);
    it warns once on stderr when it listens beyond loopback with no `token_env`."""
    return wsgi_app(Core(executor, token_env, on_call=on_call, warn_open=True))


def wsgi_app(core: Core) -> WSGIApplication:
    """The WSGI application deciding through `core`."""

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        method = str(environ.get("REQUEST_METHOD", "GET"))
        length = environ.get("CONTENT_LENGTH") or ""
        decided = core.head(method, str(environ.get("PATH_INFO", "/")),
                            environ.get("HTTP_AUTHORIZATION"), [length] if length else [],
                            chunked=not length, unsized=True)
        if isinstance(decided, Reply):
            reply = decided
        else:
            body = environ["wsgi.input"].read(MAX_REQUEST + 1 if decided < 0 else decided)
            reply = core.refuse(400, "the body is shorter than its Content-Length") if (
                decided >= 0 and len(body) < decided) else core.call(
                    body, str(environ.get("REMOTE_ADDR", "")))
        headers = list(reply.headers)
        if reply.revision:
            headers.append((REVISION_HEADER, reply.revision))
        if reply.status != 204:
            headers += [("Content-Type", reply.content_type),
                        ("Content-Length", str(len(reply.body)))]
        start_response(f"{reply.status} {reason_of(reply.status)}", headers)
        return [b""] if environ.get("REQUEST_METHOD") == "HEAD" else [reply.body]

    return app


def app_from_env(environ: Mapping[str, str] | None = None) -> WSGIApplication:
    """The WSGI app for what the THE_LOOP_HOOK_* variables name (see above)."""
    return wsgi_app(core_from_env(environ))


def core_from_env(environ: Mapping[str, str] | None = None) -> Core:
    """The core for what the THE_LOOP_HOOK_* variables name, with its decision log,
    metrics and (for a policy folder or a config) its reload: THE_LOOP_HOOK_WATCH=SECONDS
    polls the files in a thread of this worker (for the WSGI and the ASGI app alike)."""
    env = os.environ if environ is None else environ
    executor, token_env, on_call = hosted_from_env(env)
    masks = [m.strip() for m in env.get(f"{ENV_PREFIX}MASK", "").split(",") if m.strip()]
    config_file = env.get(f"{ENV_PREFIX}CONFIG", "")
    target = env.get(f"{ENV_PREFIX}DECISION_LOG", "") or default_log(
        read_config(Path(config_file).expanduser().absolute()) if config_file else None)
    secrets_in = (executor.chain.log if isinstance(executor, ChainExecutor) else
                  EventLog(secrets=token_of(token_env))).secrets_in
    try:
        check_masks(masks, f"{ENV_PREFIX}MASK")
        watch = float(env.get(f"{ENV_PREFIX}WATCH", "") or 0)
        keep = parse_keep_days(env.get(f"{ENV_PREFIX}DECISION_LOG_KEEP_DAYS", "") or
                               str(KEEP_DAYS), f"{ENV_PREFIX}DECISION_LOG_KEEP_DAYS")
        ops = operations(executor, log=target, masks=masks, secrets_in=secrets_in,
                         metrics_public=env.get(f"{ENV_PREFIX}METRICS_PUBLIC", "") == "1",
                         keep_days=keep)
    except ValueError:
        raise HooksConfigError(f"{ENV_PREFIX}WATCH: expected a number of seconds, got "
                               f"{env.get(f'{ENV_PREFIX}WATCH', '')[:40]!r}") from None
    except LoopError as exc:
        raise HooksConfigError(str(exc)) from None
    if ops.writer is not None:  # a WSGI server says nothing when a worker stops (nor an
        atexit.register(ops.close)  # ASGI one without lifespan): what is queued is written
    core = Core(executor, token_env, on_call=on_call, warn_open=True, ops=ops)
    if watch > 0 and isinstance(executor, PolicyExecutor | ChainExecutor):
        def build() -> AnyExecutor:
            return hosted_from_env(env)[0]

        reloader([core], ops, build, masks=masks, secrets_in=secrets_in).watch_in_thread(
            max(0.05, watch))
    return core


def hosted_from_env(environ: Mapping[str, str] | None = None
                    ) -> tuple[AnyExecutor, str, OnCall]:
    """What the THE_LOOP_HOOK_* variables name: the executor, the token's variable, and
    the log of first sightings (for the WSGI and the ASGI app alike)."""
    env = os.environ if environ is None else environ
    given = [name for name in _SOURCES if env.get(f"{ENV_PREFIX}{name}", "")]
    if len(given) != 1:
        raise HooksConfigError(
            f"set exactly one of {ENV_PREFIX}PATH (a .py file), {ENV_PREFIX}MODULE (a dotted "
            f"module), {ENV_PREFIX}POLICY (a policy folder) and {ENV_PREFIX}CONFIG (a "
            f"cli-config.yaml whose declared chain is served) to say what to serve; got "
            f"{' and '.join(ENV_PREFIX + g for g in given) if given else 'none'}"
        )
    token_env = env.get(f"{ENV_PREFIX}TOKEN_ENV", "")
    if token_env and not os.environ.get(token_env):
        raise HooksConfigError(
            f"{ENV_PREFIX}TOKEN_ENV names {token_env}, which is unset or empty; export the "
            "token (the server refuses to start rather than accept every caller)"
        )
    source = given[0]
    value = env[f"{ENV_PREFIX}{source}"]
    events = env.get(f"{ENV_PREFIX}EVENTS", "") or None
    try:
        log = served_log(events, token_env, declared=source == "CONFIG")
    except LoopError as exc:
        raise HooksConfigError(f"{ENV_PREFIX}EVENTS: {exc}") from None
    executor: AnyExecutor
    if source == "POLICY":
        try:
            executor = policy_executor(value, log=log)
        except LoopError as exc:
            raise HooksConfigError(f"{ENV_PREFIX}POLICY: {exc}") from None
    elif source == "CONFIG":
        try:
            executor = declared_executor(read_config(Path(value).expanduser().absolute()),
                                         log=log, token_env=token_env)
        except LoopError as exc:
            raise HooksConfigError(f"{ENV_PREFIX}CONFIG: {exc}") from None
    else:
        executor = load_executor(
            path=value if source == "PATH" else None,
            module=value if source == "MODULE" else None,
            executor=env.get(f"{ENV_PREFIX}EXECUTOR", ""), with_=_with(env),
            names={"path": f"{ENV_PREFIX}PATH", "module": f"{ENV_PREFIX}MODULE",
                   "executor": f"{ENV_PREFIX}EXECUTOR", "with": f"{ENV_PREFIX}WITH"},
        )
    return executor, token_env, first_sighting_log(redactor(token_env))


def _with(env: Mapping[str, str]) -> dict[str, Any]:
    raw_with = env.get(f"{ENV_PREFIX}WITH", "") or "{}"
    try:
        with_: Any = json.loads(raw_with)
    except ValueError:
        with_ = None
    if not isinstance(with_, dict):
        raise HooksConfigError(
            f"{ENV_PREFIX}WITH: expected a JSON object of constructor keyword arguments, "
            f"got {raw_with[:80]!r}"
        )
    return with_
