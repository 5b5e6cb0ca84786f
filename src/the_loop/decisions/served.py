"""A served call's decision record: the request's own bytes and what only the answer says.

`ServedRecords.row(at, call)` is what a hook server stores for one answered call whose
context was read. Most calls are stored as received (`layout.VERSION` 3): the request's
own bytes, beside what is known only after it (the decisions answered, the hook and its
kind, the rules that applied and the audit rules that matched, its error, the refusing
hook, the caller, the revision, the time and the call's status); a reader rebuilds the
context from those bytes through the dialect reader, as the server read them, and the
step with `layout.step_of`. Nothing per call is built but that small head: no copy of the
context, no encoding of it.

A call is stored as its record built, masked and encoded (as version 2 did; `masking`)
instead, when its bytes may hold what a log must not keep or cannot be read back alike:

- its point has a path to mask (`--mask`, a policy folder's `mask:`), or a hook replaced
  a text decision wholesale (the original must not be kept): the context is masked;
- a secret the server holds occurs in the record: it is redacted. The bytes are searched
  for each secret as itself and JSON-escaped (`EventLog.secrets_in`), which finds every
  occurrence only in bytes without `\\u` or `\\/` escapes (a caller may write any
  character so), so a request holding either is never stored as received;
- it was one request of a batch (the server has no bytes of its own for it).
"""

from __future__ import annotations

from typing import Any, Protocol

from the_loop.decisions.build import UNKNOWN
from the_loop.decisions.encoding import context_json, encode_bytes, encode_record
from the_loop.decisions.layout import (
    VERSION,
    Row,
    decode,
    item_key,
    rules_text,
    step_of,
    step_status,
)
from the_loop.decisions.masking import Masker
from the_loop.hooks.engine.points import Context, WorkItem
from the_loop.hooks.executors.registry import logged_name


class Call(Protocol):
    """What a record needs of a served call (`hooks.serving.jsonrpc.CallRecord`)."""

    @property
    def context(self) -> Context | None: ...
    @property
    def changes(self) -> Any: ...
    @property
    def detail(self) -> Any: ...
    @property
    def executor(self) -> Any: ...
    @property
    def refused(self) -> bool: ...
    @property
    def failure(self) -> str: ...
    @property
    def caller(self) -> str: ...
    @property
    def ms(self) -> float: ...
    @property
    def status(self) -> str: ...
    @property
    def request(self) -> bytes: ...


def _ms(ms: float) -> float:
    """Milliseconds to the microsecond, as a record keeps them (`round(ms, 3)` formats and
    parses a decimal string: a fortieth of a record's cost, measured)."""
    return round(ms * 1000.0) / 1000.0


def _name(executor: Any) -> str:
    return str(getattr(executor, "name", "") or type(executor).__name__)


#: Escapes by which a request may write a secret's characters so that neither the secret
#: nor its JSON-escaped form occurs in its bytes: such a request is not stored as received.
_HIDING = (b"\\u", b"\\/")
#: Distinct (rules, audit rules) lists whose rules column is kept (`_rules_of`).
_LINES_KEPT = 256


class ServedRecords:
    """Builds one server's rows; `masker` may be swapped on a reload."""

    def __init__(self, masker: Masker) -> None:
        self.masker = masker
        # `_serving`: the executor serving, its name, kind and fixed JSON
        self._named: tuple[Any, str, str, bytes, bytes] = (None, "", UNKNOWN, b"", b"")
        self._lines: dict[tuple[str, tuple[Any, ...], tuple[Any, ...]], str] = {}  # `_rules_of`

    def row(self, at: float, call: Call) -> Row:
        """One call's row: the request as received when nothing in it is to be masked,
        else its record built, masked and encoded (see the module doc)."""
        raw = call.request
        # One byte is looked for first: a search for one byte is memchr's, for two, a
        # walk ten times slower. By `find`: Python 3.11's `in` on bytes first tries its
        # operand as an integer, raising and formatting a TypeError each time.
        if raw and (raw.find(b"\\") < 0 or (raw.find(_HIDING[0]) < 0
                                           and raw.find(_HIDING[1]) < 0)):
            kept = self._as_received(at, call, raw)
            if kept is not None:
                return kept
        return self._built(at, call)

    def _as_received(self, at: float, call: Call, raw: bytes) -> Row | None:
        """The row keeping the request's bytes, or None when they must not be kept."""
        ctx = call.context
        assert ctx is not None
        point = ctx.POINT
        detail = call.detail
        given = detail.get("steps")  # a chain's steps
        changes = call.changes
        masker = self.masker
        if (masker.touches_one(point, ctx.__dict__, changes) if given is None else
                masker.touches(point, {"context": ctx.__dict__, "steps": given})):
            return None
        _, name, _, fixed, fixed_one = self._serving(call.executor)
        refused_by = detail.get("refused_by", name if call.refused else "")
        head: dict[str, Any] = {
            "caller": call.caller, "ms": _ms(call.ms), "status": call.status,
            "refused_by": refused_by,
            "decisions": changes if type(changes) is dict else dict(changes),
        }
        if given is None:  # one executor: its step is its hook, kind, error and rules
            fixed = fixed_one
            if call.failure:
                head["error"] = call.failure
            matched = detail.get("rules"), detail.get("audit")
            if matched[0]:
                head["rules"] = matched[0]
            if matched[1]:
                head["audit"] = matched[1]
            rules = self._rules_of(name, matched)
        else:
            head["steps"] = given
            rules = rules_text(given)
        # One text made of bytes, decoded once: the head's, then the request's as sent.
        text = b"".join((fixed, encode_bytes(head)[1:-1], b',"request":', raw, b"}")).decode()
        if masker.secrets_in(text):
            return None  # a secret: redacted by the built record
        refused = bool(refused_by) or changes.get("proceed") is False
        return (at, point, item_key(str(ctx.work_item.ref)), text, "", rules, int(refused))

    def _serving(self, executor: Any) -> tuple[Any, str, str, bytes, bytes]:
        """(`executor`, its name, its kind, and the start of a record's JSON, UTF-8, up to
        the comma before what each call adds: what is fixed while it serves, the version
        and revision, and for a record of one step its hook and kind too), kept for the
        executor serving now (one serves until a reload)."""
        if executor is not self._named[0]:
            name, kind = _name(executor), logged_name(executor)
            fixed = {"v": VERSION, "served": True,
                     "revision": str(getattr(executor, "revision", ""))}
            self._named = (executor, name, kind, encode_bytes(fixed)[:-1] + b",",
                           encode_bytes({**fixed, "hook": name, "kind": kind})[:-1] + b",")
        return self._named

    def _rules_of(self, hook: str, matched: tuple[Any, Any]) -> str:
        """The rules column of one step of `hook` whose rules and audit rules are
        `matched`, kept per hook and rule lists: a policy's calls match few distinct lists."""
        key = (hook, tuple(matched[0] or ()), tuple(matched[1] or ()))
        text = self._lines.get(key)
        if text is None:
            if len(self._lines) >= _LINES_KEPT:
                self._lines.clear()
            text = self._lines[key] = rules_text(({"hook": hook, "rules": key[1],
                                                    "audit": key[2]},))
        return text

    def _built(self, at: float, call: Call) -> Row:
        """One call's row: its record built, masked and encoded."""
        ctx = call.context
        assert ctx is not None
        point = ctx.POINT
        given = call.detail.get("steps")  # a chain's steps: the call's own, until masked
        rec: dict[str, Any] = {
            "v": VERSION, "context": ctx.__dict__,
            "steps": [self._step(call)] if given is None else given,
            "decisions": dict(call.changes),
            "refused_by": call.detail.get("refused_by", _name(call.executor)
                                          if call.refused else ""),
            "served": True, "caller": call.caller,
            "revision": str(getattr(call.executor, "revision", "")),
            "ms": _ms(call.ms), "status": call.status,
        }
        masker = self.masker
        masked: list[str] = []
        if masker.touches(point, rec):  # masking edits copies, never the call's own
            rec["context"] = context_json(ctx)
            if given is not None:
                rec["steps"] = decode(encode_record(given))
            masked = masker.apply(point, rec)
            if masked:
                rec["masked"] = masked
        text = encode_record(rec)
        secret = masker.redact(point, rec, text)
        if secret:  # rare: encode again without them (`redact` made copies)
            rec["masked"] = masked + secret
            text = encode_record(rec)
        work_item: Any = rec["context"]["work_item"]
        ref = work_item.ref if isinstance(work_item, WorkItem) else work_item["ref"]
        # The item column is a key to filter by, one PostgreSQL can store and index (a
        # batch holding a row it refuses would be lost whole): `item_key`.
        refused = bool(rec["refused_by"]) or rec["decisions"].get("proceed") is False
        return (at, point, item_key(str(ref)), text, "", rules_text(rec["steps"]),
                int(refused))

    def _step(self, call: Call) -> dict[str, Any]:
        _, name, kind, _, _ = self._serving(call.executor)
        return step_of(name, kind, step_status(call.failure, call.changes),
                       call.changes, call.failure,
                       (), call.detail)

    def message(self, call: Call, text: str) -> str:
        """`text` (a line about `call`) with every value masked at its point replaced."""
        ctx = call.context
        return text if ctx is None else self.masker.scrub(ctx.POINT, ctx.__dict__, text)


__all__ = ["Call", "ServedRecords"]
