"""The console's routes under /console/ on `the-loop serve`: sign-in, then read-only pages.

    GET  /console/signin            the sign-in form (a person's control-plane token)
    POST /console/signin            checks the token, sets the session cookie
    POST /console/signout           clears it
    GET  /console/items             work items (filters: state, label, q, refused; page)
    GET  /console/items/<ref>       one item's timeline (page, ipage)
    GET  /console/points/<id>       one recorded point
    GET  /console/rules             each declared policy rule's matches (since)
    GET  /console/whatif            replay a listed declaration over a period (target, period)
    GET  /console/served[/<n>[/points/<id>]]  a listed hook server's decision log
    GET  /console/static/<file>     the stylesheet

Every page but the sign-in form and the stylesheet needs a valid session cookie; without one
a request is sent to the sign-in page and is shown nothing. No route changes a work item. A
POST that a browser marks cross-site, or whose Origin is not this server, is refused.
Every response carries a Content-Security-Policy allowing no script and no inline style.
"""

from __future__ import annotations

import sqlite3
import ssl
import urllib.parse
from contextlib import AbstractContextManager
from importlib import resources
from typing import Any, Protocol

from jinja2 import Environment, PackageLoader, StrictUndefined

from the_loop.config import Config
from the_loop.console import served, views, whatif
from the_loop.console.auth import Sessions, cookie_of, set_cookie
from the_loop.errors import LoopError
from the_loop.runtime.identity import AGENT_PREFIX
from the_loop.runtime.service import Loop

CSP = ("default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
       "frame-ancestors 'none'; base-uri 'none'")
HEADERS = (("Content-Security-Policy", CSP), ("X-Content-Type-Options", "nosniff"),
           ("Referrer-Policy", "same-origin"), ("X-Frame-Options", "DENY"),
           ("Cache-Control", "no-store"))
MAX_FORM = 4096
STATIC = {"console.css": "text/css; charset=utf-8"}


class Handler(Protocol):
    """What the console needs of the control plane's request handler."""

    path: str
    headers: Any
    rfile: Any
    wfile: Any
    connection: Any
    close_connection: bool


class Server(Protocol):
    """What the console needs of the control plane (runtime.control.ControlServer)."""

    loop: Loop
    config: Config
    token_env: str
    tokens: dict[str, str]

    def borrow(self) -> AbstractContextManager[Loop]: ...

    def who(self, header: str) -> tuple[str, bool] | None: ...


class Console:
    """The console of one control-plane server (its own session key)."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.sessions = Sessions(self._token_var)
        loop = server.loop
        self.env = Environment(loader=PackageLoader("the_loop.console", "templates"),
                               autoescape=True, undefined=StrictUndefined,
                               finalize=lambda v: loop.redact(v) if isinstance(v, str) else v)
        self.env.filters["item_link"] = views.item_link

    def _token_var(self, login: str) -> str | None:
        if login == "operator" and self.server.token_env:
            return self.server.token_env
        return self.server.tokens.get(login)

    # ------------------------------------------------------------------ responses

    def _send(self, h: Handler, status: int, body: bytes, ctype: str,
              extra: tuple[tuple[str, str], ...] = ()) -> None:
        lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'OK')}",
                 f"Content-Type: {ctype}", f"Content-Length: {len(body)}",
                 *(f"{k}: {v}" for k, v in (*HEADERS, *extra))]
        h.wfile.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        h.wfile.flush()

    def _page(self, h: Handler, template: str, status: int = 200, **values: Any) -> None:
        body = self.env.get_template(template).render(**values).encode("utf-8")
        self._send(h, status, body, "text/html; charset=utf-8")

    def _redirect(self, h: Handler, to: str, cookie: str = "") -> None:
        extra = (("Location", to),) + ((("Set-Cookie", cookie),) if cookie else ())
        self._send(h, 303, b"", "text/plain; charset=utf-8", extra)

    def _secure(self, h: Handler) -> bool:
        return isinstance(h.connection, ssl.SSLSocket) or \
            h.headers.get("X-Forwarded-Proto", "") == "https"

    # ------------------------------------------------------------------ routing

    def handle(self, h: Handler, method: str) -> None:
        path, _, raw_query = h.path.partition("?")
        path = path.rstrip("/")
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(raw_query).items()}
        if method == "POST":
            self._post(h, path)
            return
        if path == "/console/signin":
            self._page(h, "signin.html", error="")
            return
        if path.startswith("/console/static/"):
            self._static(h, path[len("/console/static/"):])
            return
        login = self.sessions.login_of(cookie_of(h.headers.get("Cookie", "")))
        if login is None:
            self._redirect(h, "/console/signin")
            return
        try:
            self._get(h, path, query, login)
        except whatif.Busy as exc:
            self._page(h, "error.html", 503, login=login, message=str(exc))
        except LoopError as exc:
            self._page(h, "error.html", 404, login=login, message=str(exc))
        except (OSError, ValueError, sqlite3.Error) as exc:  # a log unreadable, say
            self._page(h, "error.html", 500, login=login, message=(
                f"this page could not be drawn ({type(exc).__name__}); the control plane "
                "goes on"))

    def _get(self, h: Handler, path: str, query: dict[str, str], login: str) -> None:
        if path in ("/console", "/console/items"):
            with self.server.borrow() as loop:
                self._page(h, "items.html", login=login, **views.items(loop, query))
        elif path.startswith("/console/items/"):
            raw = urllib.parse.unquote(path[len("/console/items/"):])
            with self.server.borrow() as loop:
                values = views.timeline(loop, loop.tracker.resolve(raw), query)
                self._page(h, "timeline.html", login=login, **values)
        elif path.startswith("/console/points/") and path[16:].isdigit() and len(path) < 30:
            values = views.one_point(self.server.loop.settings.db_target, int(path[16:]))
            self._page(h, "point.html", login=login, **values)
        elif path == "/console/rules":
            loop = self.server.loop
            values = views.rules(loop.settings.db_target, loop.chain.links, query)
            self._page(h, "rules.html", login=login, **values)
        elif path == "/console/whatif":
            self._whatif(h, query, login)
        elif path == "/console/served" or path.startswith("/console/served/"):
            self._served(h, path[len("/console/served/"):], query, login)
        else:
            self._page(h, "error.html", 404, login=login, message="no such console page")

    def _whatif(self, h: Handler, query: dict[str, str], login: str) -> None:
        settings = self.server.loop.settings
        options = whatif.choices(settings)
        target = query.get("target", "")
        period = query.get("period", "7d") if query.get("period") in whatif.PERIODS else "7d"
        report, error, chosen = None, "", None
        if target:
            if not (target.isdigit() and int(target) < len(options)):
                error = "pick one of the listed declarations"
            else:
                chosen = options[int(target)]
                try:
                    report = whatif.run(chosen, self.server.config, settings.db_target, period)
                except whatif.Busy:
                    raise
                except LoopError as exc:
                    error = str(exc)
        self._page(h, "whatif.html", login=login, options=list(enumerate(options)),
                   target=target, period=period, periods=list(whatif.PERIODS),
                   report=report, error=error, chosen=chosen)

    def _served(self, h: Handler, rest: str, query: dict[str, str], login: str) -> None:
        """/console/served, /console/served/<n>, /console/served/<n>/points/<id>."""
        logs = self.server.loop.settings.console_served
        number, _, tail = rest.partition("/points/")
        if not rest:
            self._page(h, "served_index.html", login=login,
                       logs=[(i, e["name"]) for i, e in enumerate(logs)])
        elif not tail and "/" not in number:
            self._page(h, "served.html", login=login, **served.log_page(logs, number, query))
        elif tail.isascii() and tail.isdigit() and len(tail) < 15:
            self._page(h, "point.html", login=login,
                       **served.point_page(logs, number, int(tail)))
        else:
            self._page(h, "error.html", 404, login=login, message="no such console page")

    def _static(self, h: Handler, name: str) -> None:
        if name not in STATIC:
            self._send(h, 404, b"not found", "text/plain; charset=utf-8")
            return
        body = (resources.files("the_loop.console") / "static" / name).read_bytes()
        self._send(h, 200, body, STATIC[name])

    # ------------------------------------------------------------------ sign-in

    def _cross_site(self, h: Handler) -> bool:
        site = str(h.headers.get("Sec-Fetch-Site", ""))
        if site and site not in ("same-origin", "none"):
            return True
        origin = str(h.headers.get("Origin", ""))
        if origin and origin != "null":
            host = str(h.headers.get("Host", ""))
            return urllib.parse.urlsplit(origin).netloc != host
        return origin == "null"

    def _post(self, h: Handler, path: str) -> None:
        if self._cross_site(h):
            h.close_connection = True
            self._send(h, 403, b"cross-site request refused", "text/plain; charset=utf-8")
            return
        if path == "/console/signout":
            h.close_connection = True  # its body, if any, is not read
            self._redirect(h, "/console/signin", set_cookie("", secure=self._secure(h),
                                                           max_age=0))
            return
        if path != "/console/signin":
            h.close_connection = True
            self._send(h, 404, b"the console changes nothing", "text/plain; charset=utf-8")
            return
        form = self._form(h)
        token = form.get("token", "") if form is not None else ""
        who = self.server.who(f"Bearer {token}") if token else None
        if who is None:
            self._page(h, "signin.html", 401, error="that token is not one this server knows")
            return
        if who[0].startswith(AGENT_PREFIX):
            self._page(h, "signin.html", 403, error="an agent's token does not open the "
                                                     "console; sign in with a person's token")
            return
        value = self.sessions.make(who[0])
        self._redirect(h, "/console/items", set_cookie(value, secure=self._secure(h)))

    def _form(self, h: Handler) -> dict[str, str] | None:
        raw = h.headers.get("Content-Length") or "0"
        if not (raw.isascii() and raw.isdigit()) or int(raw) > MAX_FORM:
            h.close_connection = True
            return None
        body = h.rfile.read(int(raw)) if int(raw) else b""
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            return None
        return {k: v[-1] for k, v in urllib.parse.parse_qs(text).items()}


_REASONS = {200: "OK", 303: "See Other", 401: "Unauthorized", 403: "Forbidden",
            404: "Not Found", 500: "Internal Server Error", 503: "Service Unavailable"}
