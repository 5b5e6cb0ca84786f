"""Masking a served call's record before it is stored (what a decision log must not keep).

Three kinds, applied in this order to the record's context, each step's changes and the
decisions answered, and listed in the record's `masked` (so `policy replay` can say which
values it could not see):

- a path the operator names (`--mask input_received.text`, a policy folder's `mask:`):
  the value becomes `[masked]` (`hooks.policy.maskpaths`); a work-item field is masked in
  every work-item record of the context (`work_item`, and a session's `endpoint`);
- a text decision a hook replaced wholesale (its new value does not contain the old one,
  as when a rule redacts an input): the original, in the context and in earlier steps,
  becomes `[masked]` — the log keeps no more than the agent was let see;
- every secret the server holds (its bearer token, every `tokenEnv` of a declared chain):
  each occurrence, anywhere in the record, becomes `[redacted]`.

A value masked by the first two is masked wherever else it appears in the record too — a
rule's `reason: "refused: {{ text }}"`, a step's error quoting it — and in the server's
messages about the call (`scrub`), when it is `MIN_SCRUB` characters or longer (a shorter
value would mask every word that holds it).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from the_loop.events import redact
from the_loop.hooks.policy.maskpaths import MASKED, check

#: Characters a masked value needs before its copies elsewhere are masked too.
MIN_SCRUB = 4
#: Decisions that carry text a person or an agent wrote (their incoming value is a fact).
TEXT_DECISIONS = frozenset(("text", "prompt", "question", "summary", "announce", "notify"))


def mask_value(value: Any) -> Any:
    """A text (or each text of a list) as a masked record keeps it: `[masked]`."""
    if isinstance(value, str):
        return MASKED if value else value
    if isinstance(value, list):
        return [MASKED if isinstance(v, str) and v else v for v in value]
    return value


class Masker:
    """Masks records for one server: its paths (checked at start) and its secrets."""

    def __init__(self, paths: Iterable[str] = (),
                 secrets_in: Callable[[str], list[str]] = lambda text: []) -> None:
        """`secrets_in(text)`: the server's secrets that occur in `text` (raw or
        JSON-escaped), as `EventLog.secrets_in` answers."""
        self.paths = tuple(dict.fromkeys(paths))
        self.secrets_in = secrets_in
        self._at: dict[str, list[tuple[str, tuple[str, ...]]]] = {}
        for path in self.paths:
            points, parts = check(path)  # ValueError names a bad path
            for point in points:
                self._at.setdefault(point, []).append((path, parts))

    def touches(self, point: str, rec: dict[str, Any]) -> bool:
        """Whether `apply` would change `rec` (a path to mask here, or a text a hook
        replaced): when not, the record is stored without copying its context first."""
        steps = rec["steps"]
        if len(steps) != 1:
            return point in self._at or bool(self._replaced(point, rec, dry=True))
        return self.touches_one(point, rec["context"], steps[0].get("changed"))

    def touches_one(self, point: str, context: dict[str, Any], changed: Any) -> bool:
        """`touches` for a record of one step whose changes are `changed` (a served
        executor's call): `_replaced`'s rule asked of that step directly, without the
        record or the walk over steps that a chain's record needs."""
        if point in self._at:
            return True
        if changed:
            for name in changed:  # a few names: walked, no set intersected per call
                if name in TEXT_DECISIONS and _replaces(context.get(name), changed[name]):
                    return True
        return False

    def apply(self, point: str, rec: dict[str, Any]) -> list[str]:
        """Mask `rec`'s paths and replaced texts in place; returns what was masked (the
        secrets are `redact`'s, once the record is encoded)."""
        masked: list[str] = []
        originals = self._originals(point, rec["context"])
        for _path, parts in self._at.get(point, ()):
            if parts[0] == "work_item":
                masked += [f"{point}.{name}.{parts[1]}"
                           for name in self._mask_records(rec, parts[1])]
            elif self._mask_path(rec, parts):
                masked.append(f"{point}.{'.'.join(parts)}")
        masked += self._replaced(point, rec, originals=originals)
        if originals:
            for key in ("context", "steps", "decisions"):
                rec[key] = _scrub(rec[key], originals)
        return masked

    def _originals(self, point: str, context: dict[str, Any]) -> list[str]:
        """The texts at the paths masked at `point` (a work-item field in every work-item
        record of `context`), as long as `MIN_SCRUB` or longer."""
        found: list[str] = []
        for _path, parts in self._at.get(point, ()):
            if parts[0] == "work_item":
                values = [item.get(parts[1]) if isinstance(item, dict) else
                          getattr(item, parts[1], None) for item in context.values()
                          if isinstance(item, dict) or hasattr(item, "to_json")]
            else:
                values = [context.get(parts[0])]
            for value in values:
                for text in value if isinstance(value, list) else [value]:
                    if isinstance(text, str) and len(text) >= MIN_SCRUB and text != MASKED:
                        found.append(text)
        return sorted(set(found), key=len, reverse=True)  # the longest first

    def scrub(self, point: str, context: dict[str, Any], text: str) -> str:
        """`text` (a message about a call whose context is `context`) with each value masked
        at `point` replaced by `[masked]`."""
        for original in self._originals(point, context):
            text = text.replace(original, MASKED)
        return text

    @staticmethod
    def _mask_records(rec: dict[str, Any], key: str) -> list[str]:
        """Mask `key` in every work-item record of the context: `work_item`, and the
        `endpoint` of a session's points, which is the same item (or its pull request) and
        carries the same url; returns the records that held a value."""
        hit = []
        for name, item in rec["context"].items():
            if isinstance(item, dict) and item.get(key):  # work-item records are the dicts
                item[key] = MASKED
                hit.append(name)
        return hit

    def redact(self, point: str, rec: dict[str, Any], text: str) -> list[str]:
        """Replace every secret `text` (the encoded `rec`) holds, in `rec` (read back from
        `text`, so nothing the record shares with a live call is changed); returns the
        fields that held one ([] when none: the encoded text can be stored as it is)."""
        hits = self.secrets_in(text)
        if not hits:
            return []
        fresh = json.loads(text)
        masked = []
        for name, value in fresh["context"].items():
            shown = json.dumps(value, ensure_ascii=False)
            if any(s in shown or json.dumps(s)[1:-1] in shown for s in hits):
                masked.append(f"{point}.{name} (a secret)")
        for key in ("context", "steps", "decisions"):
            rec[key] = redact(fresh[key], hits)
        return masked or [f"{point} (a secret)"]

    @staticmethod
    def _mask_path(rec: dict[str, Any], parts: tuple[str, ...]) -> bool:
        context = rec["context"]
        name = parts[0]
        hit = bool(context.get(name))
        context[name] = mask_value(context.get(name))
        for step in rec["steps"]:
            changed = step.get("changed")
            if changed and name in changed:
                changed[name] = mask_value(changed[name])
                hit = True
        if name in rec["decisions"]:
            rec["decisions"][name] = mask_value(rec["decisions"][name])
            hit = True
        return hit

    @staticmethod
    def _replaced(point: str, rec: dict[str, Any], *, dry: bool = False,
                  originals: list[str] | None = None) -> list[str]:
        """Mask the originals of text decisions a hook replaced wholesale (`dry`: only say
        which would be); each original joins `originals` (to be masked elsewhere too)."""
        masked: list[str] = []
        context = rec["context"]
        steps = [s for s in rec["steps"] if s.get("changed")]
        if not steps:
            return masked
        for name in TEXT_DECISIONS & context.keys():
            before = context[name]
            earlier: list[dict[str, Any]] = []
            for step in steps:
                changed = step["changed"]
                new = changed.get(name)
                if _replaces(before, new):
                    if dry:
                        return [name]
                    if originals is not None and len(before) >= MIN_SCRUB:
                        originals.append(before)
                    context[name] = mask_value(context[name])
                    for old in earlier:
                        old[name] = mask_value(old[name])
                    rules = ", ".join(step.get("rules") or ())
                    masked.append(f"{point}.{name} (replaced by {step.get('hook')}"
                                  f"{f' rule {rules}' if rules else ''})")
                    break
                if name in changed:
                    earlier.append(changed)
                    before = new
        return masked


def _scrub(value: Any, originals: list[str]) -> Any:
    """`value` with each text of `originals` replaced by `[masked]` in every string in it."""
    if isinstance(value, str):
        for original in originals:
            if original in value:
                value = value.replace(original, MASKED)
        return value
    if isinstance(value, list):
        return [_scrub(v, originals) for v in value]
    if isinstance(value, dict):
        return {k: _scrub(v, originals) for k, v in value.items()}
    return value


def _replaces(before: Any, new: Any) -> bool:
    """Whether text decision `new` replaced `before` wholesale (does not contain it): the
    original then must not be kept."""
    if not (isinstance(new, str) and isinstance(before, str) and before):
        return False
    # A hook that edits a text mostly adds to it: a prefix or a suffix is found by
    # comparing the ends, where a search for a text of a kilobyte in another costs seven
    # instructions a character (measured, the benchmark's prompt).
    if new.endswith(before) or new.startswith(before):
        return False
    return before not in new and before != MASKED
