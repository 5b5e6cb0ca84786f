"""The `remote` kind: a `url:` entry's keys, checked without contacting anything, and how it is
built (`remote.RemoteExecutor`, imported only when a chain is built); replay answers it from
the decision log instead of calling it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from the_loop.configspec import ENV_PATTERN, NON_EMPTY_PATTERN, DictOf, Field, Number, Problem, Str
from the_loop.hooks.declaring.entry import DEFAULT_TIMEOUT, HookEntry
from the_loop.hooks.executors.kind import RECORDED, KeyDoc, Kind, protocol_handler, protocol_points
from the_loop.util import TOKEN_URL_PATTERN, url_problem

HEADER_PATTERN = "^[!#$%&'*+.^_`|~0-9A-Za-z-]+$"
#: Headers the client owns, or that would carry a secret in the operator's file.
FORBIDDEN_HEADERS = {
    "authorization": "put the secret in an environment variable and name it with tokenEnv",
    "proxy-authorization": "secrets do not belong in cli-config.yaml",
    "cookie": "secrets do not belong in cli-config.yaml",
    "content-type": "the client always sends application/json",
    "content-length": "the client sets it",
    "host": "the client sets it from url",
    "transfer-encoding": "the client sets it",
    "connection": "the client manages connections",
}
MAX_TIMEOUT = 300.0


def _allowed_header(name: str, _ctx: object) -> str:
    why = FORBIDDEN_HEADERS.get(name.lower())
    if why:
        raise Problem(f"{name!r} is not allowed here: {why}")
    return name


def _endpoint(entry: dict[str, Any]) -> dict[str, Any]:
    """A url entry's address: no credentials, and plain http:// to a loopback host only."""
    problem = url_problem(entry["url"], token=bool(entry["tokenEnv"]), hook=True)
    if problem:
        raise Problem(problem, "url")
    return entry


def _secret_shown(value: object) -> str:
    # The value is not echoed: an operator who got this wrong may have pasted the token.
    if not isinstance(value, str):
        return f"a value of type {type(value).__name__}"
    if not value:
        return "an empty string (leave tokenEnv out to send no token)"
    return "a string that is not a variable name (value not shown in case it is the token)"


def _any_case(word: str) -> str:
    """A regex matching `word` in any letter case (JSON Schema regexes have no flags)."""
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else c for c in word)


_HEADERS = DictOf(
    key=Str(pattern=HEADER_PATTERN, expected="an HTTP header name", then=(_allowed_header,),
            mismatch=lambda k: f"{k!r} is not a valid HTTP header name",
            schema={"not": {"pattern": "^(" + "|".join(
                _any_case(h) for h in sorted(FORBIDDEN_HEADERS)) + ")$"}}),
    value=Str(pattern="^[^\r\n]*$", expected="a one-line string value"),
    nullable=True, expected="a mapping of header name to value",
    description="non-secret request headers",
)
KEYS = {
    "url": Field(Str(pattern=NON_EMPTY_PATTERN, expected="a non-empty string",
                     schema={"pattern": TOKEN_URL_PATTERN},
                     description="https://…, or http:// to a loopback host")),
    "tokenEnv": Field(Str(
        pattern=ENV_PATTERN, shown=_secret_shown,
        hint="; never put the token itself here",
        description="NAME of the environment variable holding the bearer token",
        expected="the NAME of an environment variable (letters, digits and _, "
                 "e.g. COMPLIANCE_TOKEN)"), default=""),
    "headers": Field(_HEADERS, default=dict),
    "timeoutSeconds": Field(Number(
        above=0, maximum=MAX_TIMEOUT,
        expected=f"a number of seconds > 0 and ≤ {MAX_TIMEOUT:g}"),
        default=DEFAULT_TIMEOUT),
}


def build(entry: HookEntry, _names: Mapping[str, str]) -> Any:
    """The JSON-RPC client for the entry (no connection is made before the first call)."""
    from the_loop.hooks.executors.remote import RemoteExecutor

    return RemoteExecutor(
        name=entry.name, url=entry.target, token_env=entry.token_env,
        headers=entry.headers, timeout=entry.timeout,
    )


KIND = Kind(
    name="remote",
    keys={"url": KEYS},
    check=_endpoint,
    build=build,
    classes=("the_loop.hooks.executors.remote.RemoteExecutor",),
    default_points=protocol_points,
    handler=protocol_handler,
    replay=RECORDED,
    logged_as="remote",
    about="a JSON-RPC hook server, one bounded POST per point",
    runs_at="every point (the server answers what it handles)",
    secrets=("tokenEnv",),
    docs={
        "url": KeyDoc("URL", "—", "`https://…`, or `http://` to a loopback host (`127.0.0.0/8`, "
                      "`::1`, or the name `localhost` itself; `x.localhost` is not loopback)"),
        "tokenEnv": KeyDoc("environment variable name", "none", "the variable whose value is "
                           "sent as `Authorization: Bearer …`, e.g. `COMPLIANCE_TOKEN`; read at "
                           "call time, never logged"),
        "headers": KeyDoc("mapping of string to one-line string", "`{}`", "extra, non-secret "
                          "request headers, e.g. `{X-Team: platform}`"),
        "timeoutSeconds": KeyDoc(f"number, > 0 and ≤ {MAX_TIMEOUT:g}", f"`{DEFAULT_TIMEOUT:g}`",
                                 "how long one call may take before it counts as that hook's "
                                 "failure"),
    },
)

__all__ = ["FORBIDDEN_HEADERS", "HEADER_PATTERN", "KIND", "MAX_TIMEOUT"]
