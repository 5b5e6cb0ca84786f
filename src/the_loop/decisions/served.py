"""A served call's decision record: built from the call, masked, encoded, as one row.

`ServedRecords.row(at, call)` is what a hook server stores for one answered call whose
context was read: its point, the context as received, the decisions answered, each hook's
step (`build.step_of`, the loop's own step builder; a served chain's steps as its links
answered), the refusing hook, the caller, the revision, the time, and what was masked. It
costs the caller's thread a few microseconds: the record is built on the call's own
values (no copy unless masking must edit it), encoded once, and masked (`masking`).
"""

from __future__ import annotations

from typing import Any, Protocol

from the_loop.decisions.build import UNKNOWN, step_of
from the_loop.decisions.encoding import context_json, encode_record
from the_loop.decisions.layout import VERSION, Row, decode, item_key, rules_text
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


def _name(executor: Any) -> str:
    return str(getattr(executor, "name", "") or type(executor).__name__)


class ServedRecords:
    """Builds one server's rows; `masker` may be swapped on a reload."""

    def __init__(self, masker: Masker) -> None:
        self.masker = masker
        self._named: tuple[Any, str, str] = (None, "", UNKNOWN)  # executor, name, kind

    def row(self, at: float, call: Call) -> Row:
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
        status = "failed" if call.failure else "changed" if call.changes else "unchanged"
        return step_of(self._named[1], self._named[2], status, call.changes, call.failure,
                       (), call.detail)

    def message(self, call: Call, text: str) -> str:
        """`text` (a line about `call`) with every value masked at its point replaced."""
        ctx = call.context
        return text if ctx is None else self.masker.scrub(ctx.POINT, ctx.__dict__, text)


__all__ = ["Call", "ServedRecords"]
