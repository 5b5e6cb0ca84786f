"""`the-loop serve`: the control plane (a small JSON API) and the tracker webhook receiver.

    GET  /health                        open; {"ok": true, "loop": …}
    GET  /metrics                       the points this process fired, in the Prometheus
                                        text format (runtime/pointmetrics.py)
    GET  /items                         the work items with their loop state
    GET  /items/<ref>                   one item (ref URL-encoded, or just its number)
    POST /items                         {"title", "kind", "body", "for", "labels", and for a
                                        pull request "base", "head", "head_repository",
                                        "draft"} → a new item filed by the caller (`author`
                                        only with the operator's token); its ref
    POST /items/<ref>/input             {"text": "/approve"} → written as the caller, delivered
    POST /webhook                       a tracker event: {"event": "comment", "ref", "author",
                                        "body"} | {"event": "closed", "ref", "actor"} |
                                        {"event": "opened", and the keys of POST /items}
    /console/…                          the read-only console in a browser (console/app.py):
                                        its own sign-in with the same tokens, a session cookie

Every request but /health is authenticated: `serve.tokens` maps each person's login to the
variable holding their token, and the login comes from the token, never from the body. The
operator's token (`serve.tokenEnv` / `--token-env`) may act for a named person, as the CLI
does, and is the only one a tracker's webhook may use. An agent's token is the one the loop
handed its session (`$THE_LOOP_SESSION_TOKEN`, runtime/identity.py), bound to that session:
it gives exactly that in-session agent's rights — input to its own item only, while the
session is the item's current one at an agent node, written as its `agent_login`, never
answering a gate — and reads no item; anything else from it is a 403.
Requests run concurrently: each takes a loop (its own database connection) from a pool; a
work item's steps are serialised by its claim, not by a lock around the server. A body that
is not Unicode text (not UTF-8, or a lone surrogate: `wire.read_json`) is a 400 naming why,
before anything is stored; one input longer than runtime/input_bound.py allows is a 413.
"""

from __future__ import annotations

import hmac
import json
import os
import queue
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from the_loop.config import Config
from the_loop.console.app import Console
from the_loop.errors import InputTooLong, LoopError
from the_loop.jsonread import NotUnicode, read_json
from the_loop.metrics import CONTENT_TYPE as METRICS_TYPE
from the_loop.runtime.identity import AGENT_PREFIX, agent_login, token_digest
from the_loop.runtime.pointmetrics import metrics
from the_loop.runtime.poller import classify, deliver, reply
from the_loop.runtime.service import Loop
from the_loop.runtime.stepactions import StepAction
from the_loop.runtime.tracker.pulls import new_item

MAX_BODY = 1 << 20
OPERATOR = "operator"


class ControlServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(self, loop: Loop, host: str, port: int, token_env: str) -> None:
        metrics(loop.chain)  # this process counts its points from now on (GET /metrics)
        self.loop = loop
        self.config: Config = loop.config
        self.token_env = token_env
        self.tokens = dict(loop.settings.serve_tokens)
        self._pool: queue.SimpleQueue[Loop] = queue.SimpleQueue()
        self._all: list[Loop] = [loop]
        self._pool.put(loop)
        self._made = threading.Lock()
        self.console = Console(self)
        super().__init__((host, port), _Handler)

    @contextmanager
    def borrow(self) -> Iterator[Loop]:
        """A loop for one request: its own database connection, the process's one chain."""
        try:
            loop = self._pool.get_nowait()
        except queue.Empty:
            loop = Loop(self.config, strict_hooks=True, source="serve")
            loop.settings.secret_names = self.loop.settings.secret_names
            with self._made:
                self._all.append(loop)
        try:
            yield loop
        finally:
            self._pool.put(loop)

    def service_actions(self) -> None:
        """Between requests: collect the harness processes this server launched that ended
        (a resume or a gate's next node), so none lingers as a zombie while serve runs."""
        with self._made:
            loops = list(self._all)
        for loop in loops:
            for sid, proc in list(loop.procs.items()):
                if proc.poll() is not None:
                    loop.procs.pop(sid, None)

    def who(self, header: str) -> tuple[str, bool] | None:
        """(login, may act for others) for a bearer header; None when it matches no token.
        A session's token gives that session's `agent:` login. Every configured token is
        compared, in constant time."""
        found: tuple[str, bool] | None = None
        given = header.encode()
        for login, var in sorted(self.tokens.items()):
            token = os.environ.get(var, "")
            if token and hmac.compare_digest(given, f"Bearer {token}".encode()):
                found = (login, False)
        if self.token_env:
            token = os.environ.get(self.token_env, "")
            if token and hmac.compare_digest(given, f"Bearer {token}".encode()):
                found = (OPERATOR, True)
        if found is None and (bound := self.session_of(header)) is not None:
            found = (agent_login(bound[1]), False)
        return found

    def session_of(self, header: str) -> tuple[str, str] | None:
        """(work item, session) when the bearer is the token of an item's current session
        (looked up by its digest: the loop keeps no token), else None."""
        scheme, _, token = header.partition(" ")
        if scheme != "Bearer" or not 32 <= len(token) <= 64:
            return None
        with self.borrow() as loop:
            return loop.store.keyed_session(token_digest(token))

    def close_loops(self) -> None:
        for loop in self._all:
            loop.close()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"


class _Handler(BaseHTTPRequestHandler):
    server: ControlServer
    protocol_version = "HTTP/1.1"
    timeout = 30

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def parse_request(self) -> bool:
        """The stdlib's parse, then refuse a head whose body length is ambiguous: two
        Content-Lengths, or any Transfer-Encoding (this server reads Content-Length only,
        so the rest of such a body would be read as a second request). Answered 400 and the
        connection closed, as `hooks serve`, uvicorn (h11) and gunicorn do."""
        if not super().parse_request():
            return False
        why = framing_refusal(self.headers.get_all("Content-Length") or [],
                              self.headers.get_all("Transfer-Encoding") or [])
        if why:
            self.close_connection = True
            self._send(400, {"error": why})
            return False
        return True

    def _send(self, status: int, data: Any) -> None:
        body = json.dumps(data, ensure_ascii=False).encode("utf-8")
        head = (f"HTTP/1.1 {status} {self.responses.get(status, ('',))[0]}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
        self.wfile.write(head.encode("latin-1") + body)
        self.wfile.flush()

    def _send_text(self, status: int, body: bytes, content_type: str) -> None:
        head = (f"HTTP/1.1 {status} {self.responses.get(status, ('',))[0]}\r\n"
                f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n")
        self.wfile.write(head.encode("latin-1") + body)
        self.wfile.flush()

    def _path(self) -> str:
        return self.path.split("?", 1)[0].rstrip("/")

    def _console(self, method: str) -> bool:
        """Hand a /console request to the console (its own sign-in; no bearer token)."""
        path = self._path()
        if path != "/console" and not path.startswith("/console/"):
            return False
        self.server.console.handle(self, method)
        return True

    def do_GET(self) -> None:
        if self._console("GET"):
            return
        path = self._path()
        if path == "/health":
            self._send(200, {"ok": True, "loop": self.server.loop.settings.loop})
            return
        who = self.server.who(self.headers.get("Authorization", ""))
        if who is None:
            self._send(401, {"error": "missing or wrong bearer token"})
            return
        if who[0].startswith(AGENT_PREFIX):  # an item's loop state names its session
            self._send(403, {"error": f"you are {who[0]} (from your token), an agent: an "
                                      "agent's token reads no work item (each names its "
                                      "session, an agent's key to act on it); its prompt "
                                      "carries its own"})
            return
        if path == "/metrics":
            self._send_text(200, metrics().text(), METRICS_TYPE)
            return
        with self.server.borrow() as loop:
            try:
                # Every string is redacted as the console shows it (loop.redact): a token
                # someone pasted into a comment or a title is not handed on.
                if path == "/items":
                    out = [dict(i.to_json(), loop=_state(loop, i.ref))
                           for i in loop.tracker.items()]
                    self._send(200, redacted(out, loop.redact))
                elif path.startswith("/items/"):
                    ref = loop.tracker.resolve(urllib.parse.unquote(path[len("/items/"):]))
                    self._send(200, redacted(dict(loop.tracker.get(ref).to_json(),
                                                  loop=_state(loop, ref)), loop.redact))
                else:
                    self._send(404, {"error": f"no route GET {path}"})
            except LoopError as exc:
                self._send(404, {"error": str(exc)})

    def _body(self) -> dict[str, Any] | None:
        """The JSON object a POST carries, or None after answering why it is not one."""
        raw_length = self.headers.get("Content-Length") or "0"
        if not (raw_length.isascii() and raw_length.isdigit()) or len(raw_length) > 12:
            self._send(400, {"error": f"bad Content-Length {raw_length[:20]!r}: expected a "
                                      "byte count"})
            self.close_connection = True
            return None
        length = int(raw_length)
        if length > MAX_BODY:
            self._send(413, {"error": f"body larger than {MAX_BODY} bytes"})
            self.close_connection = True
            return None
        raw = self.rfile.read(length) if length else b""
        try:
            data = read_json(raw or b"{}")
        except RecursionError:
            self._send(400, {"error": "body is not JSON: nested too deeply"})
            return None
        except NotUnicode as exc:
            self._send(400, {"error": f"the body {exc}"})
            return None
        except ValueError as exc:
            why = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)[:120]
            self._send(400, {"error": f"body is not JSON: {why}"})
            return None
        if not isinstance(data, dict):
            self._send(400, {"error": "body must be a JSON object"})
            return None
        return data

    def do_POST(self) -> None:
        if self._console("POST"):
            return
        path = self._path()
        who = self.server.who(self.headers.get("Authorization", ""))
        if who is None:  # before the body is read: a stranger gets nothing parsed
            self._send(401, {"error": "missing or wrong bearer token"})
            self.close_connection = True
            return
        data = self._body()
        if data is None:
            return
        with self.server.borrow() as loop:
            try:
                if path == "/items":
                    self._add(loop, data, who)
                elif path.startswith("/items/") and path.endswith("/input"):
                    raw_ref = urllib.parse.unquote(path[len("/items/"):-len("/input")])
                    self._input(loop, loop.tracker.resolve(raw_ref), data, who)
                elif path == "/webhook":
                    if not who[1]:
                        self._send(403, {"error": f"{who[0]}'s token cannot post tracker "
                                                  "events; the webhook takes the operator's "
                                                  "token (serve.tokenEnv)"})
                        return
                    self._send(200, self._webhook(loop, data))
                else:
                    self._send(404, {"error": f"no route POST {path}"})
            except InputTooLong as exc:
                self._send(413, {"error": str(exc)})
            except LoopError as exc:
                self._send(400, {"error": str(exc)})

    def _input(self, loop: Loop, ref: str, data: dict[str, Any],
               who: tuple[str, bool]) -> None:
        login, may_act = who
        text, named = data.get("text"), data.get("actor")
        if not isinstance(text, str) or (named is not None and not isinstance(named, str)):
            self._send(400, {"error": "expected {\"text\": str}"})
            return
        if named and named != login and not may_act:
            self._send(403, {"error": f"you are {login} (from your token); input cannot be "
                                      f"given as {named} — leave actor out"})
            return
        actor = named or login
        if login.startswith(AGENT_PREFIX):
            header = self.headers.get("Authorization", "")
            bound = self.server.session_of(header)
            why = _agent_refusal(loop, ref, text, login, bound, data.get("session"))
            if why:
                self._send(403, {"error": why})
                return
            # Its own token is never posted, even when the agent pastes it itself.
            text = text.replace(header.partition(" ")[2], "[redacted]")
        self._send(200, {"ref": ref, "actor": actor,
                         "done": reply(loop, ref, text, actor=actor, source="api")})

    def _add(self, loop: Loop, data: dict[str, Any], who: tuple[str, bool]) -> None:
        login, may_act = who
        if login.startswith(AGENT_PREFIX):
            self._send(403, {"error": f"you are {login} (from your token), an agent: an agent "
                                      "files no work items; ask a person (`the-loop ask`)"})
            return
        if "author" in data and not may_act:
            self._send(403, {"error": f"you are {login} (from your token); the item is filed "
                                      "as you — leave author out"})
            return
        fields = new_item(data, loop.tracker.repository)
        fields["author"] = fields["author"] or login
        self._send(200, {"ref": loop.tracker.add(**fields), "author": fields["author"]})

    def _webhook(self, loop: Loop, data: dict[str, Any]) -> dict[str, Any]:
        event = data.get("event")
        if event == "opened":  # a tracker telling of a new item: its author is the body's
            fields = new_item({k: v for k, v in data.items() if k != "event"},
                              loop.tracker.repository)
            return {"ref": loop.tracker.add(**fields), "done": "opened"}
        ref = data.get("ref")
        if not isinstance(ref, str):
            raise LoopError("a tracker event needs a ref")
        ref = loop.tracker.resolve(ref)
        if event == "comment":
            author, body = data.get("author"), data.get("body")
            if not isinstance(author, str) or not author or not isinstance(body, str):
                raise LoopError("a comment event needs author and body (strings)")
            return {"ref": ref, "done": reply(loop, ref, body, actor=author, source="comment")}
        if event == "closed":
            actor = data.get("actor") if isinstance(data.get("actor"), str) else "someone"
            loop.tracker.close(ref, actor=str(actor))
            w = loop.work(ref)
            if w and w["state"] in ("running", "waiting", "gate"):
                loop.store.queue(StepAction.COMPLETE.key(ref, w["arm_seq"]), ref,
                                 StepAction.COMPLETE,
                                 {"source": "tracker", "actor": str(actor)})
                deliver(loop, ref)
            return {"ref": ref, "done": "closed"}
        raise LoopError(f"unknown tracker event {event!r}; expected comment, closed or opened")


def _state(loop: Loop, ref: str) -> dict[str, Any] | None:
    """An item's loop state as the API shows it (not its session token's digest)."""
    w = loop.work(ref)
    if w is not None:
        w.pop("session_key", None)
    return w


def redacted(value: Any, redact: Callable[[str], str]) -> Any:
    """`value` (JSON) with `redact` applied to every string in it, keys too."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact(str(k)): redacted(v, redact) for k, v in value.items()}
    if isinstance(value, list):
        return [redacted(v, redact) for v in value]
    return value


def framing_refusal(lengths: list[str], encodings: list[str]) -> str:
    """Why a request head cannot be framed safely ('' when it can)."""
    if encodings:
        return ("Transfer-Encoding is not supported here; send the body with one "
                "Content-Length header")
    if len(lengths) > 1:
        return "two Content-Length headers; send exactly one"
    return ""


def _agent_refusal(loop: Loop, ref: str, text: str, login: str,
                   bound: tuple[str, str] | None, named: object) -> str:
    """Why a session's token may not give this input ('' when it may): it acts only on
    its own item, as its own session, while that session is the item's current one at an
    agent node, and never answers a gate -- the rights of an agent inside that session
    (runtime/identity.py)."""
    me = f"you are {login} (from your token), an agent"
    if classify(text) in ("approve", "reject"):
        return f"{me}: an agent cannot answer a gate (/{classify(text)}); a person does"
    if bound is None:  # its session moved on between who() and now
        return f"{me}: your session is no longer its work item's current one"
    mine, sid = bound
    if named is not None and named != sid:
        return (f"{me}: your token belongs to one session and acts as no other (you named "
                f"{str(named)[:40]!r}); leave session out")
    if ref != mine:
        return (f"{me}: your token belongs to the session of {mine}; an agent acts only on "
                "its own work item")
    try:
        loop.agent_turn(ref, sid)
    except LoopError as exc:
        return f"{me}: {exc}"
    return ""
