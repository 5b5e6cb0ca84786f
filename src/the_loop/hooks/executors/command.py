"""The `command` kind: a `command:` entry runs a program once per point, bounded, with the JSON
a `url:` hook gets on its stdin; replay answers it from the decision log (it may have side
effects).

Contract, each rule tested in tests/hooks/test_command_hooks.py:
- The program is resolved when the chain is built: a path with a `/` against the config's
  folder (never a checkout or the working directory), a bare name on the loop's `PATH`
  (absolute folders only); missing or not executable fails the load, naming the entry.
- stdin is exactly the JSON-RPC request a `url:` hook gets (`remote.request_body`), then
  closed; cwd is the config's folder; the environment is the entry's `env`, plus the
  variables `passEnv` and `secretEnv` name, taken from the loop's — nothing else.
- stdout is a JSON-RPC response or its bare result (`null`, or an object of decisions),
  read as a remote answer is (`remote.read_answer`); nothing printed is `null`.
- Exit 0: stdout is the answer. Exit 2: a refusal, stderr (trimmed, capped) its reason, at a
  point with `proceed`; anywhere else that hook's failure. Any other exit, a signal, running
  past `timeoutSeconds`, more than `MAX_OUTPUT` bytes on stdout or stderr, an answer that is
  not JSON: that hook's failure, which the chain records and turns into a refusal when the
  entry is `required`.
- The program runs in a session and process group of its own (`process.run`); at the
  deadline, or when it exits, that whole group is killed, so a hung grandchild never holds
  the loop. The values `secretEnv` names are replaced by `[redacted]` in everything read
  back, before it is quoted anywhere; the loop counts them among its secrets (redacted
  wherever it writes, never in a harness's environment).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from the_loop.configspec import ENV_PATTERN, NON_EMPTY_PATTERN, DictOf, Field, ListOf, Problem, Str
from the_loop.errors import HookError
from the_loop.hooks.declaring.entry import HookEntry, entry_error
from the_loop.hooks.engine.executor import CalledAtEveryPoint, Decisions
from the_loop.hooks.engine.points import SPECS, Context
from the_loop.hooks.executors.kind import RECORDED, KeyDoc, Kind, protocol_handler, protocol_points
from the_loop.hooks.executors.process import MAX_OUTPUT, Ran, run
from the_loop.hooks.executors.remote_entry import KEYS as URL_KEYS
from the_loop.hooks.executors.remote_entry import MAX_TIMEOUT

__all__ = ["KIND", "MAX_OUTPUT", "MAX_REASON", "CommandExecutor"]

MAX_REASON = 500  # characters of stderr a refusal's reason keeps
MAX_LINE = 300  # characters of the last stderr line a failure quotes
_REDACTED = "[redacted]"
_PROCEED = {point: any(d.name == "proceed" for d in spec.decisions)
            for point, spec in SPECS.items()}


class CommandExecutor(CalledAtEveryPoint):
    """Runs one program per invocation; one instance per `command:` entry."""

    reads_only = True  # it only serialises the context it is handed
    served_inline = False  # a call blocks on a process: a server runs it on its pool

    def __init__(self, *, name: str, argv: list[str], where: str, cwd: str,
                 timeout: float = 10.0, env: Mapping[str, str] | None = None,
                 pass_env: tuple[str, ...] = (), secret_env: tuple[str, ...] = ()) -> None:
        self.name = name
        self.argv = list(argv)
        self.where = where  # the program as written, for messages
        self.cwd = cwd
        self.timeout = float(timeout)
        self.env = dict(env or {})
        self.pass_env = tuple(pass_env)
        self.secret_env = tuple(secret_env)
        self._ids = itertools.count(1)

    def environment(self) -> tuple[dict[str, str], list[str]]:
        """(the program's whole environment, the secret values in it); `HookError` when a
        `secretEnv` variable is unset, before anything runs."""
        env = dict(self.env)
        env.update({n: os.environ[n] for n in self.pass_env if n in os.environ})
        secrets: list[str] = []
        for name in self.secret_env:
            value = os.environ.get(name, "")
            if not value:
                raise HookError(f"secretEnv {name} is unset or empty, so {self.where} was not "
                                f"run; export {name} in the loop's environment")
            env[name] = value
            secrets.append(value)
        return env, secrets

    def call(self, point: str, ctx: Context) -> Decisions | None:
        """Run the program at `point` on `ctx`; the decisions it answers, or None."""
        from the_loop.hooks.executors.remote import request_body  # the url: client: lazily

        env, secrets = self.environment()
        req_id = next(self._ids)
        try:
            ran = run(self.argv, request_body(point, ctx, req_id), cwd=self.cwd, env=env,
                      timeout=self.timeout)
        except OSError as exc:  # the program went away (or lost its mode) since the load
            raise HookError(f"cannot run {self.where}: {exc.strerror or exc}") from None
        out, err = _scrub(ran.stdout, secrets), _scrub(ran.stderr, secrets)
        self._check_exit(point, ran, err)
        if ran.code == 2:
            reason = _trimmed(err) or f"{self.where} refused (exit 2, nothing on stderr)"
            return Decisions(values={"proceed": False, "reason": reason})
        return self._answer(point, req_id, out, secrets)

    def _check_exit(self, point: str, ran: Ran, err: bytes) -> None:
        """`HookError` for every way the run failed (all but exit 0, and 2 where it refuses)."""
        last = _last_line(err)
        if ran.timed_out:
            raise HookError(f"{self.where} ran past timeoutSeconds ({self.timeout:g} s) and "
                            f"was killed with its process group{last}")
        if ran.over:
            raise HookError(f"{self.where} printed more than {MAX_OUTPUT} bytes on {ran.over} "
                            "and was killed with its process group")
        if ran.code < 0:
            raise HookError(f"{self.where} was killed by {_signal_name(-ran.code)}{last}")
        if ran.code == 2 and not _PROCEED[point]:
            raise HookError(f"{self.where} exited 2 (a refusal) at {point}, which has no "
                            f"proceed decision to refuse with{last}")
        if ran.code not in (0, 2):
            raise HookError(f"{self.where} exited {ran.code}{last}")

    def _answer(self, point: str, req_id: int, out: bytes, secrets: list[str]
                ) -> Decisions | None:
        from the_loop.hooks.executors.remote import read_answer
        from the_loop.hooks.serving.wire import NotUnicode, read_json

        if not out.strip():
            return None  # it printed nothing: it has nothing to change
        try:
            doc = read_json(out)
        except NotUnicode as exc:
            raise HookError(f"the answer from {self.where} {exc}") from None
        except (ValueError, RecursionError):
            start = out[:60].decode("utf-8", "replace")
            raise HookError(f"the answer from {self.where} is not JSON (it starts with "
                            f"{_quoted(start)})") from None
        doc = _scrub_doc(doc, secrets)
        if not (isinstance(doc, dict) and "jsonrpc" in doc):  # a bare result
            doc = {"jsonrpc": "2.0", "id": req_id, "result": doc}
        return read_answer(self.where, point, req_id, doc)


# ----------------------------------------------------------------------------- reading


def _scrub(data: bytes, secrets: list[str]) -> bytes:
    """`data` without the secrets, raw or as JSON would escape them."""
    for secret in secrets:
        for form in {secret, _json_escaped(secret)}:
            data = data.replace(form.encode("utf-8"), _REDACTED.encode())
    return data


def _json_escaped(text: str) -> str:
    return json.dumps(text)[1:-1]


def _scrub_doc(doc: Any, secrets: list[str]) -> Any:
    """A decoded answer with the secrets removed from every string (JSON can spell one in
    many escaped forms, its decoded text in one)."""
    if not secrets:
        return doc
    if isinstance(doc, str):
        for secret in secrets:
            doc = doc.replace(secret, _REDACTED)
        return doc
    if isinstance(doc, dict):
        return {_scrub_doc(k, secrets): _scrub_doc(v, secrets) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_scrub_doc(v, secrets) for v in doc]
    return doc


def _trimmed(err: bytes) -> str:
    text = err.decode("utf-8", "replace").strip()
    return text if len(text) <= MAX_REASON else text[:MAX_REASON] + "…"


def _last_line(err: bytes) -> str:
    """`; its last stderr line: "…"`, or nothing when it printed none."""
    lines = [line for line in err.decode("utf-8", "replace").splitlines() if line.strip()]
    return f"; its last stderr line: {_quoted(lines[-1].strip())}" if lines else ""


def _quoted(text: str) -> str:
    return json.dumps(text if len(text) <= MAX_LINE else text[:MAX_LINE] + "…",
                      ensure_ascii=False)


def _signal_name(number: int) -> str:
    try:
        return f"{signal.Signals(number).name} (signal {number})"
    except ValueError:
        return f"signal {number}"


# ----------------------------------------------------------------------------- the entry


def resolve_program(program: str, folder: Path) -> Path:
    """Where `program` is: a path with a `/` (or `~/`) against `folder` unless absolute, a
    bare name on the loop's PATH (absolute folders only: never the working directory).
    Raises `ValueError` saying what is wrong and the fix."""
    if "/" in program or program.startswith("~"):
        path = Path(program).expanduser()
        path = path if path.is_absolute() else folder / path
        if not path.is_file():
            raise ValueError(f"no file at {path} (a relative program resolves against the "
                             "folder of cli-config.yaml, never the working directory)")
    else:
        folders = [d for d in os.environ.get("PATH", "").split(os.pathsep) if os.path.isabs(d)]
        found = [Path(d) / program for d in folders if (Path(d) / program).is_file()]
        if not found:
            raise ValueError(f"no program {program!r} on PATH; write its path (./{program} is "
                             "the file beside cli-config.yaml)")
        path = next((p for p in found if os.access(p, os.X_OK)), found[0])
    if not os.access(path, os.X_OK):
        raise ValueError(f"{path} is not executable; chmod +x it, or name its interpreter "
                         f"first (command: [sh, {shlex.quote(program)}])")
    return path


def build(entry: HookEntry, _names: Mapping[str, str]) -> CommandExecutor:
    """The executor of the entry, its program found now (a missing one fails the load)."""
    program, *args = entry.options["command"]
    try:
        path = resolve_program(program, Path(entry.folder))
    except ValueError as exc:
        raise entry_error(entry, "command", str(exc)) from None
    return CommandExecutor(
        name=entry.name, argv=[str(path), *args], where=program, cwd=entry.folder,
        timeout=entry.timeout, env=entry.options["env"],
        pass_env=tuple(entry.options["passEnv"]), secret_env=tuple(entry.options["secretEnv"]))


def _one_source_per_variable(entry: dict[str, Any]) -> dict[str, Any]:
    """A variable comes from one place: `env`, `passEnv` or `secretEnv`."""
    seen: dict[str, str] = {}
    for key in ("env", "passEnv", "secretEnv"):
        for name in entry[key]:
            if name in seen:
                raise Problem(f"{name} is also in {seen[name]}; give each variable one source",
                              key)
            seen[name] = key
    return entry


_ENV_NAME = Str(pattern=ENV_PATTERN, expected="an environment variable name (letters, digits "
                                              "and _, e.g. LANG)")
_ARG = Str(pattern="^[^\0]*$", expected="a string without NUL")
KEYS = {
    "command": Field(ListOf(
        item=_ARG, min_items=1, expected="a non-empty list [program, arg, …]",
        hint="; for a shell line write [sh, -c, \"…\"]",
        description="the program and its arguments (no shell unless you name one)",
        schema={"prefixItems": [{"type": "string", "pattern": NON_EMPTY_PATTERN}]})),
    "timeoutSeconds": URL_KEYS["timeoutSeconds"],
    "env": Field(DictOf(key=_ENV_NAME, value=_ARG, nullable=True,
                        expected="a mapping of variable name to value",
                        description="variables set for the program"), default=dict),
    "passEnv": Field(ListOf(item=_ENV_NAME, unique=True, nullable=True,
                            expected="a list of environment variable names",
                            description="variables passed on from the loop's environment"),
                     default=list),
    "secretEnv": Field(ListOf(item=_ENV_NAME, unique=True, nullable=True,
                              expected="a list of environment variable names",
                              description="variables holding secrets, passed on from the "
                                          "loop's environment; redacted wherever the loop "
                                          "writes"), default=list),
}


def _program_given(entry: dict[str, Any]) -> dict[str, Any]:
    if not re.search(NON_EMPTY_PATTERN, entry["command"][0]):
        raise Problem("the program (its first item) is empty", "command")
    return _one_source_per_variable(entry)


KIND = Kind(
    name="command",
    keys={"command": KEYS},
    check=_program_given,
    build=build,
    classes=(f"{__name__}.CommandExecutor",),
    default_points=protocol_points,
    handler=protocol_handler,
    replay=RECORDED,
    logged_as="command",
    about="a program run once per point, in any language: the `url:` request on stdin, its "
          "answer on stdout, exit 2 to refuse",
    runs_at="every point (the program answers what it handles)",
    shown=shlex.join,
    secrets=("secretEnv",),
    docs={
        "command": KeyDoc("list `[program, arg, …]`", "—", "the program and its arguments, "
                          "no shell unless you name one (`[sh, -c, \"…\"]`); a program with a "
                          "`/` is relative to the config's folder, a bare name is found on "
                          "the loop's `PATH`"),
        "timeoutSeconds": KeyDoc(f"number, > 0 and ≤ {MAX_TIMEOUT:g}", "`10`", "how long the "
                                 "program may run; then it is killed with its process group "
                                 "and that counts as the hook's failure"),
        "env": KeyDoc("mapping of name to string", "`{}`", "variables set for the program, "
                      "e.g. `{LANG: C.UTF-8}`; not secrets (they are in this file)"),
        "passEnv": KeyDoc("list of variable names", "`[]`", "variables passed on from the "
                          "loop's environment, e.g. `[PATH, HOME]`; nothing else of it reaches "
                          "the program"),
        "secretEnv": KeyDoc("list of variable names", "`[]`", "variables holding secrets, "
                            "passed on like `passEnv`; unset fails the call, and their values "
                            "are `[redacted]` in what the program prints and wherever the "
                            "loop writes"),
    },
)
