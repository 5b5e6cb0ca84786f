"""Masking a served call's record before it is stored (what a decision log must not keep).

Three kinds, applied in this order to the record's context, each step's changes and the
decisions answered, and listed in the record's `masked` (so `policy replay` can say which
values it could not see):

- a path the operator names (`--mask input_received.text`, a policy folder's `mask:`):
  the value becomes `[masked]` (`hooks.policy.maskpaths`);
- a text decision a hook replaced wholesale (its new value does not contain the old one,
  as when a rule redacts an input): the original, in the context and in earlier steps,
  becomes `[masked]` — the log keeps no more than the agent was let see;
- every secret the server holds (its bearer token, every `tokenEnv` of a declared chain):
  each occurrence, anywhere in the record, becomes `[redacted]`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from the_loop.events import redact
from the_loop.hooks.policy.maskpaths import MASKED, check

#: Decisions that carry text a person or an agent wrote (their incoming value is a fact).
TEXT_DECISIONS = frozenset(("text", "prompt", "question", "summary", "announce", "notify"))


def _mask_value(value: Any) -> Any:
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

    def apply(self, point: str, rec: dict[str, Any]) -> list[str]:
        """Mask `rec` (context, steps, decisions) in place; returns what was masked."""
        masked: list[str] = []
        for _path, parts in self._at.get(point, ()):
            if self._mask_path(rec, parts):
                masked.append(f"{point}.{'.'.join(parts)}")
        masked += self._replaced(point, rec)
        hits = self.secrets_in(json.dumps(rec, ensure_ascii=False))
        if hits:
            for name, value in rec["context"].items():
                shown = json.dumps(value, ensure_ascii=False)
                if any(s in shown or json.dumps(s)[1:-1] in shown for s in hits):
                    masked.append(f"{point}.{name} (a secret)")
            for key in ("context", "steps", "decisions"):
                rec[key] = redact(rec[key], hits)
        return masked

    @staticmethod
    def _mask_path(rec: dict[str, Any], parts: tuple[str, ...]) -> bool:
        context = rec["context"]
        if parts[0] == "work_item":
            item = context.get("work_item")
            if isinstance(item, dict) and item.get(parts[1]):
                item[parts[1]] = MASKED
                return True
            return False
        name = parts[0]
        hit = bool(context.get(name))
        context[name] = _mask_value(context.get(name))
        for step in rec["steps"]:
            changed = step.get("changed")
            if changed and name in changed:
                changed[name] = _mask_value(changed[name])
                hit = True
        if name in rec["decisions"]:
            rec["decisions"][name] = _mask_value(rec["decisions"][name])
            hit = True
        return hit

    @staticmethod
    def _replaced(point: str, rec: dict[str, Any]) -> list[str]:
        """Mask the originals of text decisions a hook replaced wholesale."""
        masked: list[str] = []
        context = rec["context"]
        for name in TEXT_DECISIONS & context.keys():
            before = context[name]
            earlier: list[dict[str, Any]] = []
            for step in rec["steps"]:
                changed = step.get("changed") or {}
                new = changed.get(name)
                if isinstance(new, str) and isinstance(before, str) and before and (
                        before not in new) and before != MASKED:
                    context[name] = _mask_value(context[name])
                    for old in earlier:
                        old[name] = _mask_value(old[name])
                    rules = ", ".join(step.get("rules") or ())
                    masked.append(f"{point}.{name} (replaced by {step.get('hook')}"
                                  f"{f' rule {rules}' if rules else ''})")
                    break
                if name in changed:
                    earlier.append(changed)
                    before = new
        return masked
