"""`the-loop serve`: the control plane (a small JSON API) and the tracker webhook receiver.

    GET  /health                        open; {"ok": true, "loop": …}
    GET  /items                         the work items with their loop state
    GET  /items/<ref>                   one item (ref URL-encoded, or just its number)
    POST /items/<ref>/input             {"text": "/approve", "actor": "alice"} → input_received
    POST /webhook                       a tracker event: {"event": "comment", "ref", "author",
                                        "body"} | {"event": "closed", "ref", "actor"}

Every request but /health needs `Authorization: Bearer $TOKEN` when a token variable is set.
"""

from __future__ import annotations

import hmac
import json
import os
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from the_loop.errors import LoopError
from the_loop.runtime.poller import _advance_cursor, handle_input, input_target, reply
from the_loop.runtime.service import Loop

MAX_BODY = 1 << 20


class ControlServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, loop: Loop, host: str, port: int, token_env: str) -> None:
        self.loop = loop
        self.token_env = token_env
        self.lock = threading.Lock()
        super().__init__((host, port), _Handler)

    def service_actions(self) -> None:
        """Between requests: collect the harness processes this server launched that ended
        (a resume or a gate's next node), so none lingers as a zombie while serve runs."""
        with self.lock:
            for sid, proc in list(self.loop.procs.items()):
                if proc.poll() is not None:
                    del self.loop.procs[sid]

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

    def _send(self, status: int, data: Any) -> None:
        body = json.dumps(data, ensure_ascii=False).encode("utf-8")
        head = (f"HTTP/1.1 {status} {self.responses.get(status, ('',))[0]}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
        self.wfile.write(head.encode("latin-1") + body)
        self.wfile.flush()

    def _authorized(self) -> bool:
        if not self.server.token_env:
            return True
        token = os.environ.get(self.server.token_env, "")
        given = self.headers.get("Authorization", "")
        return bool(token) and hmac.compare_digest(given.encode(), f"Bearer {token}".encode())

    def _ref(self, raw: str) -> str:
        return self.server.loop.tracker.resolve(urllib.parse.unquote(raw))

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        if path == "/health":
            self._send(200, {"ok": True, "loop": self.server.loop.settings.loop})
            return
        if not self._authorized():
            self._send(401, {"error": "missing or wrong bearer token"})
            return
        loop = self.server.loop
        try:
            with self.server.lock:
                if path == "/items":
                    out = [dict(i.to_json(), loop=loop.work(i.ref)) for i in loop.tracker.items()]
                    self._send(200, out)
                elif path.startswith("/items/"):
                    ref = self._ref(path[len("/items/"):])
                    self._send(200, dict(loop.tracker.get(ref).to_json(), loop=loop.work(ref)))
                else:
                    self._send(404, {"error": f"no route GET {path}"})
        except LoopError as exc:
            self._send(404, {"error": str(exc)})

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        raw_length = self.headers.get("Content-Length") or "0"
        length = int(raw_length) if raw_length.isdigit() else -1
        if length < 0:
            self._send(400, {"error": f"bad Content-Length {raw_length[:20]!r}"})
            self.close_connection = True
            return
        if length > MAX_BODY:
            self._send(413, {"error": f"body larger than {MAX_BODY} bytes"})
            self.close_connection = True
            return
        raw = self.rfile.read(length) if length else b""
        if not self._authorized():
            self._send(401, {"error": "missing or wrong bearer token"})
            return
        try:
            data = json.loads(raw or b"{}")
        except json.JSONDecodeError as exc:
            self._send(400, {"error": f"body is not JSON: {exc.msg}"})
            return
        if not isinstance(data, dict):
            self._send(400, {"error": "body must be a JSON object"})
            return
        loop = self.server.loop
        try:
            with self.server.lock:
                if path.startswith("/items/") and path.endswith("/input"):
                    ref = self._ref(path[len("/items/"):-len("/input")])
                    text, actor = data.get("text"), data.get("actor")
                    if not isinstance(text, str) or not isinstance(actor, str) or not actor:
                        self._send(400, {"error": "expected {\"text\": str, \"actor\": login}"})
                        return
                    self._send(200, {"ref": ref, "done": reply(loop, ref, text, actor=actor,
                                                               source="api")})
                elif path == "/webhook":
                    self._send(200, self._webhook(data))
                else:
                    self._send(404, {"error": f"no route POST {path}"})
        except LoopError as exc:
            self._send(400, {"error": str(exc)})

    def _webhook(self, data: dict[str, Any]) -> dict[str, Any]:
        loop = self.server.loop
        event, ref = data.get("event"), data.get("ref")
        if not isinstance(ref, str):
            raise LoopError("a tracker event needs a ref")
        ref = loop.tracker.resolve(ref)
        if event == "comment":
            author, body = data.get("author"), data.get("body")
            if not isinstance(author, str) or not author or not isinstance(body, str):
                raise LoopError("a comment event needs author and body (strings)")
            cid = loop.tracker.comment(ref, body, author=author)
            _advance_cursor(loop, ref, cid)
            target, endpoint = input_target(loop, ref)  # a review goes to its ticket
            done = handle_input(loop, target, body, actor=author, source="comment",
                                endpoint=endpoint, key=f"input:{ref}:{cid}")
            return {"ref": ref, "done": done}
        if event == "closed":
            actor = data.get("actor") if isinstance(data.get("actor"), str) else "someone"
            loop.tracker.close(ref, actor=str(actor))
            w = loop.work(ref)
            if w and w["state"] in ("running", "waiting", "gate"):
                loop.complete(ref, source="tracker", actor=str(actor))
            return {"ref": ref, "done": "closed"}
        raise LoopError(f"unknown tracker event {event!r}; expected comment or closed")
