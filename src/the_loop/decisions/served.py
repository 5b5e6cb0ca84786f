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
from the_loop.decisions.encoding import context_json, encode_record
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
        self._named: tuple[Any, str, str] = (None, "", UNKNOWN)  # executor, name, kind
        self._lines: dict[tuple[str, tuple[Any, ...], tuple[Any, ...]], str] = {}  # `_rules_of`

    def row(self, at: float, call: Call) -> Row:
        """One call's row: the request as received when nothing in it is to be masked,
        else its record built, masked and encoded (see the module doc)."""
        raw = call.request
        # One byte is looked for first: a search for one byte is memchr's, for two, a
        # walk ten times slower.
        if raw and (b"\\" not in raw or (_HIDING[0] not in raw and _HIDING[1] not in raw)):
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
        if self.masker.touches(point, {"context": ctx.__dict__, "steps": [
                {"changed": changes}] if given is None else given}):
            return None
        executor = call.executor
        if executor is not self._named[0]:  # one executor serves until a reload
            self._named = (executor, _name(executor), logged_name(executor))
        refused_by = detail.get("refused_by", self._named[1] if call.refused else "")
        head: dict[str, Any] = {
            "v": VERSION, "served": True, "caller": call.caller,
            "revision": str(getattr(executor, "revision", "")), "ms": round(call.ms, 3),
            "status": call.status, "refused_by": refused_by,
            "decisions": changes if type(changes) is dict else dict(changes),
        }
        if given is None:  # one executor: its step is its hook, kind, error and rules
            head["hook"], head["kind"] = self._named[1], self._named[2]
            if call.failure:
                head["error"] = call.failure
            matched = detail.get("rules"), detail.get("audit")
            if matched[0]:
                head["rules"] = matched[0]
            if matched[1]:
                head["audit"] = matched[1]
            rules = self._rules_of(head, matched)
        else:
            head["steps"] = given
            rules = rules_text(given)
        text = f"{encode_record(head)[:-1]},\"request\":{raw.decode()}}}"
        if self.masker.secrets_in(text):
            return None  # a secret: redacted by the built record
        refused = bool(refused_by) or changes.get("proceed") is False
        return (at, point, item_key(str(ctx.work_item.ref)), text, "", rules, int(refused))

    def _rules_of(self, head: dict[str, Any], matched: tuple[Any, Any]) -> str:
        """The rules column of a one-step `head` (its hook's rules and audit rules `matched`),
        kept per hook and rule lists: a policy's calls match few distinct lists."""
        key = (head["hook"], tuple(matched[0] or ()), tuple(matched[1] or ()))
        text = self._lines.get(key)
        if text is None:
            if len(self._lines) >= _LINES_KEPT:
                self._lines.clear()
            text = self._lines[key] = rules_text((head,))
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
            "ms": round(call.ms, 3), "status": call.status,
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
        executor = call.executor
        if executor is not self._named[0]:  # one executor serves until a reload
            self._named = (executor, _name(executor), logged_name(executor))
        return step_of(self._named[1], self._named[2], step_status(call.failure, call.changes),
                       call.changes, call.failure,
                       (), call.detail)

    def message(self, call: Call, text: str) -> str:
        """`text` (a line about `call`) with every value masked at its point replaced."""
        ctx = call.context
        return text if ctx is None else self.masker.scrub(ctx.POINT, ctx.__dict__, text)


__all__ = ["Call", "ServedRecords"]
