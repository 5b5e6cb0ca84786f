"""Console sessions: a signed, expiring cookie for a person who gave their control-plane token.

The cookie holds the login and its expiry, signed (HMAC-SHA256) with a key made at random when
the server starts and a digest of the person's current token: a cookie from another server
(or an earlier run of this one) is refused, and so is one whose person's token was changed or
removed. The token itself never reaches the cookie or a page.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import time
from collections.abc import Callable

COOKIE = "the_loop_console"
#: How long a sign-in lasts (seconds).
LIFETIME = 8 * 3600


class Sessions:
    """Makes and checks session cookies for one server process."""

    def __init__(self, token_var: Callable[[str], str | None]) -> None:
        self._key = secrets.token_bytes(32)
        self._token_var = token_var  # login → the variable holding its token (None: none)

    def _sign(self, login: str, expires: int) -> str | None:
        var = self._token_var(login)
        token = os.environ.get(var, "") if var else ""
        if not token:
            return None
        digest = hashlib.sha256(token.encode()).hexdigest()
        return hmac.new(self._key, f"{login}\n{expires}\n{digest}".encode(),
                        hashlib.sha256).hexdigest()

    def make(self, login: str, now: float | None = None) -> str:
        """A cookie value for `login`, valid for LIFETIME seconds."""
        expires = int((time.time() if now is None else now) + LIFETIME)
        sig = self._sign(login, expires)
        if sig is None:
            raise ValueError(f"{login} has no token set")
        return f"{login}.{expires}.{sig}"

    def login_of(self, value: str, now: float | None = None) -> str | None:
        """The login a cookie value stands for, or None: unsigned, expired, or foreign."""
        parts = value.split(".")
        if len(parts) < 3:
            return None
        login, expires_text, sig = ".".join(parts[:-2]), parts[-2], parts[-1]
        if not (expires_text.isascii() and expires_text.isdigit()) or len(expires_text) > 12:
            return None
        expires = int(expires_text)
        if expires <= (time.time() if now is None else now):
            return None
        want = self._sign(login, expires)
        if want is None or not hmac.compare_digest(want.encode(), sig.encode("utf-8", "replace")):
            return None
        return login


def cookie_of(header: str) -> str:
    """The console cookie's value in a Cookie header ('' when absent)."""
    for part in header.split(";"):
        name, _, value = part.strip().partition("=")
        if name == COOKIE:
            return value.strip()
    return ""


def set_cookie(value: str, *, secure: bool, max_age: int = LIFETIME) -> str:
    """The Set-Cookie header value: HttpOnly, SameSite=Strict, scoped to /console."""
    flags = f"; Max-Age={max_age}; Path=/console; HttpOnly; SameSite=Strict"
    return f"{COOKIE}={value}{flags}{'; Secure' if secure else ''}"
