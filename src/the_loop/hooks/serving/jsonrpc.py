"""The JSON-RPC 2.0 half of a hook server: `handle_request(executor, body) -> bytes`, never raising.

It is the whole server logic, for any HTTP framework (`HookServer`, the WSGI app):

- -32700 the body is not JSON (or not Unicode text — not UTF-8, or a lone surrogate:
  `wire.read_json` — or nested too deep to read); -32600 not a valid
  request object (an extra member, a `jsonrpc` other than "2.0", a non-string method, an id
  that is not a string, an integer or null); -32601 a method outside the catalog of points;
  -32602 params that are not an object, or a field we know with a value of the wrong type.
- params are read tolerantly (`dialect.read_params`): unknown keys are ignored (and reported
  to the host through `on_call`), the other the-loop's names map to ours.
- -32000 the hook raised; -32603 the hook answered something the chain would reject (not a
  context of the point's type, a decision of the wrong type). Nothing is coerced.
- A success answers only the decisions that differ from the params, or `null`.
- A catalog point the executor does not handle answers `null`: it is what the same class
  does when declared by `path:`, so a `url:` entry without `on:` (every point) works
  unchanged instead of failing at the points the class leaves alone.
- Notifications (no `id`) run the hook and get no answer (`b""`; HTTP 204). Batches are
  supported as the spec says: answered in order, notifications left out, `b""` when only
  notifications; an empty batch, or one over `MAX_BATCH`, is a single -32600.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple

import orjson

from the_loop import __version__
from the_loop.errors import describe_exception
from the_loop.events import redact
from the_loop.hooks.engine.chain import copy_context, read_answer
from the_loop.hooks.engine.dialect import read_params
from the_loop.hooks.engine.executor import Decisions, Executor, HookError, LifecycleHooks
from the_loop.hooks.engine.location import hook_raise_site
from the_loop.hooks.engine.points import POINTS, Context, unknown_point_message
from the_loop.hooks.executors.registry import default_points, handler_for
from the_loop.hooks.serving.wire import (
    HOOK_RAISED,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    NotUnicode,
    read_json,
)
from the_loop.interrupt import reraise_if_real

MAX_BATCH = 50
_MAX_MESSAGE = 2000
_MEMBERS = frozenset(("jsonrpc", "method", "params", "id"))
_JSON_TYPES = {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
               int: "a number", float: "a number", type(None): "null"}

MAX_LISTED = 20  # ignored keys named per call record
MAX_SEEN = 1000  # distinct (point, key) pairs `first_sighting_log` remembers
_PLAIN = re.compile(r"[A-Za-z0-9_.-]{1,64}")

AnyExecutor = LifecycleHooks | Executor
_CLASS_POINTS: dict[type, tuple[str, ...]] = {}


#: The decisions and detail of a call that has none (read-only: records are shared).
_NONE: Mapping[str, Any] = MappingProxyType({})


class CallRecord(NamedTuple):
    """What a host may log about one request: the point (or, for a request that named none,
    the method as a log may show it, or `(not JSON)` / `(invalid request)`), how it ended,
    its time, keys ignored, whether the answer refused (`proceed: false`), and, when the
    hook raised, the file and line it raised at (for the host's log only: a caller is told
    what was raised, never where in the server's files). A tuple: immutable, and built
    in a third of a frozen dataclass's time (one per served call)."""

    point: str
    status: str  # "ok" or "error <code>"
    ms: float
    ignored: tuple[str, ...] = ()
    raised_at: str = ""
    refused: bool = False
    failure: str = ""  # what the hook's failure told the caller (-32000), for the host's log
    #: For a call whose context was read: the context as received (after the dialect's
    #: mapping; never handed to the hook, so unchanged), the decisions answered, the
    #: answer's detail (a policy's rules and audit, a chain's steps), the executor that
    #: answered it (its revision too), and the caller (the token's name, or the peer).
    context: Context | None = None
    changes: Mapping[str, Any] = _NONE
    detail: Mapping[str, Any] = _NONE
    executor: Any = None
    caller: str = ""
    #: The request's own bytes as received, for a request that was not part of a batch
    #: (`b""` in a batch): what a decision log may keep instead of encoding the context.
    request: bytes = b""


OnCall = Callable[[CallRecord], None]


def _listed(keys: list[str]) -> tuple[str, ...]:
    """Ignored keys as a log may show them: printable, at most `MAX_LISTED` (a caller
    chooses these names, so a newline or a thousand keys must not reach a log line)."""
    if not keys:
        return ()
    shown = tuple(k if _PLAIN.fullmatch(k) else json.dumps(k)[:66] for k in keys[:MAX_LISTED])
    extra = len(keys) - len(shown)
    return (*shown, f"… {extra} more") if extra > 0 else shown


def first_sighting_log(redact: Callable[[str], str] = str) -> OnCall:
    """An `on_call` that writes each ignored key to stderr once per point (not per call),
    for the first `MAX_SEEN` distinct keys; a caller inventing names cannot fill memory."""
    seen: set[tuple[str, str]] = set()
    lock = threading.Lock()

    def record(call: CallRecord) -> None:
        if not call.ignored:
            return
        with lock:
            new = [k for k in call.ignored if (call.point, k) not in seen]
            if len(seen) >= MAX_SEEN:
                return
            seen.update((call.point, k) for k in new)
        if new:
            print(redact(f"the-loop: {call.point}: ignoring field(s) this catalog does not "
                         f"know: {', '.join(new)}"), file=sys.stderr, flush=True)

    return record


def handle_request(executor: AnyExecutor, body: bytes, *, on_call: OnCall | None = None,
                   secrets: Callable[[], Iterable[str]] | None = None,
                   caller: str = "") -> bytes:
    """Answer one JSON-RPC 2.0 request (or batch) for `executor`; never raises.

    `on_call`, when given, hears one `CallRecord` per call to a catalog point (`caller`:
    who sent it, as the host names them). `secrets`
    returns what the server holds (its token, a declared chain's `tokenEnv` values): each
    one (four characters or more) is replaced in every string of every answer, and in what
    `on_call` hears, before an error message is cut to its bound (so no cut leaves a part).
    """
    try:
        known = [s for s in (secrets() if secrets is not None else ()) if len(s) >= 4]
        return _handle(executor, body, on_call, known, caller)
    except BaseException as exc:  # a bug (or a hook's BaseException) still answers JSON-RPC
        reraise_if_real(exc)
        return _dumps(_error(None, INTERNAL_ERROR, f"internal error: {type(exc).__name__}"))


def served_points(executor: AnyExecutor) -> tuple[str, ...]:
    """The points the executor answers with its own code (what /health lists)."""
    if isinstance(executor, LifecycleHooks):  # a class's overrides: looked up once per class
        cls = type(executor)
        found = _CLASS_POINTS.get(cls)
        if found is None:
            found = _CLASS_POINTS[cls] = default_points(executor)
        return found
    return default_points(executor)


def health_body(executor: AnyExecutor) -> bytes:
    """The body of `GET /health`: `ok` as the other the-loop's servers say it, the points
    served, and this server's own fields."""
    return _dumps({"ok": True, "points": list(served_points(executor)), "status": "ok",
                   "server": f"the-loop {__version__}"})




def _handle(executor: AnyExecutor, body: bytes | str, on_call: OnCall | None,
            secrets: list[str], caller: str) -> bytes:
    started = time.perf_counter()
    try:
        body = body if isinstance(body, str) else bytes(body)  # bytes: itself, not a copy
        doc = read_json(body, decoder=_DECODER)
    except (ValueError, RecursionError) as exc:
        why = (str(exc) if isinstance(exc, NotUnicode) else
               "is nested too deep to read" if isinstance(exc, RecursionError) else
               "holds an integer too long to read" if "digits" in str(exc) else "is not JSON")
        answer = _error(None, PARSE_ERROR, f"parse error: the body {why}")
        _report(on_call, _Seen("(not JSON)", caller=caller), answer, started)
        return _dumps(answer)
    if isinstance(doc, list):
        if not doc or len(doc) > MAX_BATCH:
            answer = _error(None, INVALID_REQUEST, (
                "invalid request: an empty batch" if not doc else
                f"invalid request: a batch of {len(doc)} requests; at most {MAX_BATCH}"))
            _report(on_call, _Seen(caller=caller), answer, started)
            return _dumps(answer)
        answers = [a for a in (_one(executor, item, on_call, secrets, caller) for item in doc)
                   if a is not None]
        return _dumps(answers) if answers else b""
    single = _one(executor, doc, on_call, secrets, caller,
                  body if isinstance(body, bytes) else b"")
    return b"" if single is None else _dumps(single)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_DECODER = json.JSONDecoder(parse_constant=_no_constant)
_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


@dataclass
class _Seen:
    """What reading one request found out, for its `CallRecord`."""

    point: str = "(invalid request)"
    called: bool = False  # a method was read: a notification (no id) gets no answer
    ignored: list[str] = field(default_factory=list)
    raised_at: str = ""
    caller: str = ""
    context: Context | None = None
    changes: dict[str, Any] = field(default_factory=dict)
    detail: dict[str, Any] = field(default_factory=dict)
    executor: Any = None
    request: bytes = b""


def _report(
    on_call: OnCall | None, seen: _Seen, answer: dict[str, Any], started: float
) -> None:
    if on_call is None:
        return
    error = answer.get("error")
    result = answer.get("result")
    with contextlib.suppress(Exception):  # a log that cannot be written costs its line only
        on_call(CallRecord(
            seen.point, f"error {error['code']}" if error else "ok",
            (time.perf_counter() - started) * 1000.0, _listed(seen.ignored),
            seen.raised_at,
            refused=isinstance(result, dict) and result.get("proceed") is False,
            failure=str(error.get("message", "")) if error and error.get("code") == HOOK_RAISED
            else "",
            context=seen.context, changes=seen.changes, detail=seen.detail,
            executor=seen.executor, caller=seen.caller, request=seen.request,
        ))


def _one(executor: AnyExecutor, req: Any, on_call: OnCall | None,
         secrets: list[str], caller: str, body: bytes = b"") -> dict[str, Any] | None:
    """The answer to one request object (reported to `on_call`), or None for a notification;
    `body`: its bytes as received, when it was the whole request."""
    started = time.perf_counter()
    seen = _Seen(caller=caller, request=body)
    answer = _answer(executor, req, seen)
    if secrets:  # before the message is cut: a cut never leaves part of a secret
        answer = redact(answer, secrets)
    answer = _cut(answer)
    _report(on_call, seen, answer, started)
    if not seen.called:  # a request that could not be read is always answered
        return answer
    return answer if "id" in req else None


def _answer(executor: AnyExecutor, req: Any, seen: _Seen) -> dict[str, Any]:
    if not isinstance(req, dict):
        return _error(None, INVALID_REQUEST,
                      f"invalid request: expected an object, got {_json_type(req)}")
    rid = req.get("id")
    if not (rid is None or type(rid) in (int, str)):
        return _error(None, INVALID_REQUEST,
                      f"invalid request: id must be a string, an integer or null, got "
                      f"{_json_type(rid)}")
    if not req.keys() <= _MEMBERS:
        extra = sorted(str(k) for k in req.keys() - _MEMBERS)
        return _error(rid, INVALID_REQUEST,
                      f"invalid request: unexpected member(s) {', '.join(extra)}; a request "
                      "has jsonrpc, method, params and id")
    if req.get("jsonrpc") != "2.0":
        return _error(rid, INVALID_REQUEST,
                      f'invalid request: "jsonrpc" must be "2.0", got {_short(req.get("jsonrpc"))}')
    method = req.get("method")
    if not isinstance(method, str):
        return _error(rid, INVALID_REQUEST,
                      f"invalid request: method must be a string, got {_json_type(method)}")
    seen.point = method if method in POINTS else _listed([method])[0]
    seen.called = True
    return _call(executor, method, req.get("params", {}), rid, seen)


def _call(
    executor: AnyExecutor, point: str, params: Any, rid: Any, seen: _Seen
) -> dict[str, Any]:
    if point not in POINTS:
        return _error(rid, METHOD_NOT_FOUND, f"method not found: {unknown_point_message(point)}")
    if isinstance(params, list):
        return _error(rid, INVALID_PARAMS,
                      "invalid params: send an object of context fields by name, not an array")
    try:
        ctx, skipped = read_params(point, params)
    except (ValueError, TypeError, RecursionError) as exc:
        return _error(rid, INVALID_PARAMS, f"invalid params: {exc}")
    seen.ignored.extend(skipped)
    if point not in served_points(executor):
        return _result(rid, None)
    seen.context, seen.executor = ctx, executor
    # A class by its name; an executor (a served policy folder) by the name it was given.
    name = type(executor).__name__ if isinstance(executor, LifecycleHooks) else str(
        getattr(executor, "name", type(executor).__name__))
    handler = handler_for(executor, point)
    try:
        answer = handler(copy_context(ctx))
    except HookError as exc:
        seen.raised_at = hook_raise_site(exc, handler)
        return _error(rid, HOOK_RAISED, f"hook {name} failed at {point}: {exc}")
    except BaseException as exc:  # anything the hook raises is its failure (issue 11 rule 3)
        reraise_if_real(exc)
        seen.raised_at = hook_raise_site(exc, handler)
        return _error(rid, HOOK_RAISED, f"hook {name} raised at {point}: {describe_exception(exc)}")
    # Read the answer back exactly as the chain does: decisions only, typed, never coerced.
    changes, _dropped, error = read_answer(ctx, answer)
    if error:
        return _error(rid, INTERNAL_ERROR, f"hook {name} answered wrongly at {point}: {error}")
    seen.changes = changes
    if isinstance(answer, Decisions) and answer.detail:
        seen.detail = answer.detail
    return _result(rid, changes or None)


def _result(rid: Any, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "result": result, "id": rid}


def _error(rid: Any, code: int, message: str) -> dict[str, Any]:
    """An error answer; its message is cut to `_MAX_MESSAGE` by `_cut`, after redaction."""
    return _cut({"jsonrpc": "2.0", "error": {"code": code, "message": message}, "id": rid},
                _MAX_MESSAGE * 8)


def _cut(answer: dict[str, Any], limit: int = _MAX_MESSAGE) -> dict[str, Any]:
    """`answer` with an error message longer than `limit` cut, saying so."""
    error = answer.get("error")
    if isinstance(error, dict) and len(message := str(error.get("message", ""))) > limit:
        error["message"] = message[:limit] + "…"
    return answer


def _dumps(doc: Any) -> bytes:
    """An answer's bytes: orjson's UTF-8, or the stdlib's for what orjson does not write
    (an integer past 64 bits; a float that is not finite, which no answer may carry)."""
    try:
        return orjson.dumps(doc)
    except TypeError:
        return _ENCODER.encode(doc).encode("ascii")


def _json_type(value: Any) -> str:
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:80] + "…"
