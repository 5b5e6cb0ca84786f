"""The catalog's entries as data: one `FieldSpec` per context field, one `PointSpec` per point.

`spec_of(cls)` reads a point's context class (built in `points.py` with `fact()` and
`decision()`, whose metadata this module defines the keys of) into its `PointSpec`;
`point_doc` words one entry as the SDK docstring. A fact carries, besides its type and doc,
`values` (the closed set of values this loop sends, empty when open; the policy checker and
lints read it) and `sent_by` (`both`, or `other-loop` for a fact only the open-source the-loop
sends and this loop's runtime never fills; what each caller sends is `hooks.engine.callers`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

FACT = "fact"
DECISION = "decision"


@dataclass(frozen=True)
class FieldSpec:
    """One field of a point's context, as a rule author and the chain see it."""

    name: str
    role: str  # fact | decision
    type: str  # str | bool | int | list[str] | WorkItem
    default: Any
    doc: str
    applied: str = ""
    #: The values this loop sends for this fact, when they are a closed set (else empty).
    values: tuple[str, ...] = ()
    #: `both`, or `other-loop`: a fact this loop's runtime never fills (see callers.py).
    sent_by: str = "both"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "type": self.type, "doc": self.doc}
        if self.role == DECISION:
            out["default"] = self.default
            out["applied"] = self.applied
        else:
            if self.values:
                out["values"] = list(self.values)
            if self.sent_by != "both":
                out["sent_by"] = self.sent_by
        return out


@dataclass(frozen=True)
class PointSpec:
    """The catalog entry for one point, derived from its context class."""

    name: str
    context: Any  # the point's context class (type[Context]; points.py imports this module)
    when: str
    facts: tuple[FieldSpec, ...]
    decisions: tuple[FieldSpec, ...]

    @property
    def fields(self) -> tuple[FieldSpec, ...]:
        return self.facts + self.decisions

    def field(self, name: str) -> FieldSpec | None:
        for spec in self.fields:
            if spec.name == name:
                return spec
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "point": self.name,
            "context": self.context.__name__,
            "when": self.when,
            "facts": [f.to_json() for f in self.facts],
            "decisions": [d.to_json() for d in self.decisions],
        }


def spec_of(cls: Any) -> PointSpec:
    """The catalog entry of a point's context class (a dataclass built with fact/decision)."""
    facts: list[FieldSpec] = []
    decisions: list[FieldSpec] = []
    for f in dataclasses.fields(cls):
        type_name = str(f.type)
        if f.default is not dataclasses.MISSING:
            default = f.default
        else:
            factory: Callable[[], Any] = f.default_factory  # type: ignore[assignment]
            default = factory()
        spec = FieldSpec(
            name=f.name, role=f.metadata["role"], type=type_name, default=default,
            doc=f.metadata["doc"], applied=f.metadata.get("applied", ""),
            values=tuple(f.metadata.get("values", ())),
            sent_by=f.metadata.get("sent_by", "both"),
        )
        (decisions if spec.role == DECISION else facts).append(spec)
    return PointSpec(cls.POINT, cls, cls.WHEN, tuple(facts), tuple(decisions))


_SENT_BY_WORDS = {"other-loop": "sent only by the open-source the-loop"}


def point_doc(spec: PointSpec) -> str:
    """The docstring of a point's context class and `LifecycleHooks` method, from the catalog."""
    lines = [f"The context of `{spec.name}`. Fires: {spec.when}.", "", "Decisions:"]
    lines += [
        f"    {d.name} ({d.type}, default {d.default!r}): {d.doc}; {d.applied}."
        for d in spec.decisions
    ]
    lines += ["", "Facts (read-only; a changed fact is ignored):"]
    for f in spec.facts:
        said = f"    {f.name} ({f.type}): {f.doc}"
        if f.sent_by in _SENT_BY_WORDS:
            said += f" ({_SENT_BY_WORDS[f.sent_by]})"
        lines.append(said + ".")
    return "\n".join(lines)
