"""Small helpers several layers borrow: a did-you-mean hint, who may carry a token where, a
long value cut for a person to read, and a line on stderr that may fail.

Kept free of imports from the rest of the package, so the engine, the runtime, the config
reader and the CLI can all use them without importing each other.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from urllib.parse import urlsplit


def shown_path(path: str | os.PathLike[str]) -> str:
    """A path as a person at this terminal would type it: relative to the working directory
    when it lies under it (symbolic links resolved), else as given."""
    text = os.fspath(path)
    try:
        cwd = os.path.realpath(os.getcwd())
    except OSError:  # the working directory was removed
        return text
    real = os.path.realpath(text)
    if real == cwd:
        return "."
    return real[len(cwd) + 1:] if real.startswith(cwd + os.sep) else text


def made_afresh(path: str | os.PathLike[str], mode: int, tries: int = 5) -> int:
    """A file made now at `path`, mode 0600, open with `mode` (os.O_* flags): whatever was
    at its name is removed first, so a link put there is not followed and a FIFO does not
    block. FileExistsError when another process put a file in its place `tries` times in a
    row; OSError when it cannot be made (a folder at its name, a folder not writable)."""
    for attempt in range(tries):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        try:
            return os.open(path, mode | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            if attempt == tries - 1:
                raise
    raise FileExistsError(f"{os.fspath(path)}: no tries left")  # tries < 1


def closest(name: str, valid: list[str] | tuple[str, ...]) -> str | None:
    """The valid name a typo most likely meant, or None."""
    import difflib

    found = difflib.get_close_matches(name, list(valid), n=1, cutoff=0.6)
    return found[0] if found else None


#: Longer JSON than this is cut for a person: its first `HEAD` and last `TAIL` characters.
SHOWN_LIMIT, HEAD, TAIL = 120, 60, 30


def shown_value(value: object, *, full: bool = False) -> str:
    """`value` as JSON for a person; when longer than `SHOWN_LIMIT` (and not `full`), its first
    and last characters around `…`, then its length: characters for a string, else items."""
    text = json.dumps(value, ensure_ascii=False)
    if full or len(text) <= SHOWN_LIMIT:
        return text
    if isinstance(value, str):
        size = f"{len(value):,} characters"
    elif isinstance(value, (list, dict)):
        size = f"{len(value):,} items, {len(text):,} characters of JSON"
    else:
        size = f"{len(text):,} characters"
    return f"{text[:HEAD]}…{text[-TAIL:]} ({size}; --full shows all)"


def is_loopback(host: str) -> bool:
    """True for a literal loopback address (127.0.0.0/8, ::1) or the name `localhost` itself.

    Any other name, `anything.localhost` included, is resolved through DNS by the client,
    so it is not trusted to stay on this machine.
    """
    name = host.strip("[]").lower()
    if name == "localhost":
        return True
    try:
        import ipaddress

        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


#: `url_may_carry_token` as a JSON Schema regex, for editors: https:// to any host, or http://
#: to 127.0.0.0/8, [::1] or localhost; never credentials before the host.
TOKEN_URL_PATTERN = (r"^(https://[^/?#@\s]+|http://(localhost|127(\.[0-9]{1,3}){3}|\[::1\])"
                     r"(:[0-9]+)?)([/?#]\S*)?$")


def url_may_carry_token(url: str) -> bool:
    """Whether a bearer token may be sent to `url`: https://, or http:// to a loopback host.

    The one rule for every place that sends a token: hooks `url:` entries, webhook
    channels, and the clients pointed at `the-loop hooks serve`.
    """
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
    except ValueError:
        return False
    if parts.scheme == "https":
        return bool(host)
    return parts.scheme == "http" and is_loopback(host)


def url_problem(url: str, *, token: bool, hook: bool) -> str | None:
    """What is wrong with an endpoint `url` from cli-config.yaml, or None; never echoes a
    credential. `hook`: a hook's answer changes what the loop does, so plain http:// goes to a
    loopback host only, token or not; a channel may post plain http:// when it sends no token.
    """
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        return f"not a valid URL ({exc})"
    # Before any message that repeats the URL: credentials in it must never be echoed.
    if "@" in parts.netloc:
        return ("credentials in the URL are not allowed (URL not shown); put the token in an "
                "environment variable and name it with tokenEnv")
    try:
        _ = parts.port
    except ValueError as exc:
        return f"not a valid URL ({exc}): {url!r}"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"expected https://host/path (or http:// to a loopback host), got {url!r}"
    if url_may_carry_token(url) or not (hook or token):
        return None
    if not hook:
        return (f"a bearer token is never sent in clear: use https:// for {parts.hostname}, or "
                "drop tokenEnv")
    why = " and a bearer token must never cross a network in clear" if token else ""
    return (f"plain http:// is only allowed to a loopback host (127.0.0.0/8, ::1, localhost){why}; "
            f"use https://{parts.netloc}{parts.path}")


def say(line: str) -> None:
    """One line on stderr, if stderr can still be written: a closed pipe (a `| head` that
    exited, a restarted journal) must not end the thread that says it (a decision log's
    writer, a policy watch), which would then never do its work again."""
    with contextlib.suppress(OSError, ValueError):  # EPIPE, a full disk, a closed file
        print(line, file=sys.stderr, flush=True)
