"""The names hook files written for the open-source the-loop call, with the same meaning here.

Mixed into `points.Context` and `points.WorkItem` (this module imports nothing of ours, so
the catalog can use it): `ctx.to_params()`, `Ctx.decisions()` / `Ctx.facts()`,
`ctx.apply(result)` raising `DecisionTypeError`, `item.to_params()` (which carries `tracker`
also as `provider`), the read-only alias `item.provider` (our `tracker`), `bool(item)`
(false for the empty record) and
`WorkItem.from_ref(ref, kind, id)` for our ref formats: `local:owner/repo#N`, and
`<tracker>:[host/]owner/repo#N` (e.g. `github:acme/app#12`). As there, `Context` itself
cannot be built (only a point's context can).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any, ClassVar, Self

DECISION = "decision"
_REF_RE = re.compile(
    r"^(?P<tracker>[a-z][a-z0-9-]*):(?:(?P<host>[^/#\s]+)/)?(?P<owner>[A-Za-z0-9_.-]+)/"
    r"(?P<repo>[A-Za-z0-9_.-]+)#(?P<number>[0-9]{1,12})$"
)
_DEFAULT_HOSTS = {"github": "github.com", "gitlab": "gitlab.com"}
_PY_TYPES = {"str": str, "bool": bool, "int": int}


class DecisionTypeError(TypeError):
    """A decision was given a value of the wrong type: refused, never coerced."""


class ContextMethods:
    """Methods every point's context carries besides its fields."""

    POINT: ClassVar[str]

    def __post_init__(self) -> None:
        if not type(self).POINT:
            raise TypeError("Context is the base of the points' contexts; build a point's "
                            "context instead (e.g. WorkItemStart(), SessionSpawn(prompt=...))")

    @classmethod
    def decisions(cls) -> tuple[str, ...]:
        """The names of the fields a hook may change, in declaration order."""
        return tuple(f.name for f in dataclasses.fields(cls)  # type: ignore[arg-type]
                     if f.metadata.get("role") == DECISION)

    @classmethod
    def facts(cls) -> tuple[str, ...]:
        """The names of the read-only fields, in declaration order."""
        return tuple(f.name for f in dataclasses.fields(cls)  # type: ignore[arg-type]
                     if f.metadata.get("role") != DECISION)

    def to_params(self) -> dict[str, Any]:
        """Every field as JSON values: what a remote hook receives as `params`."""
        out: dict[str, Any] = {}
        for key, value in vars(self).items():
            if isinstance(value, WorkItemMethods):
                out[key] = value.to_params()
            else:
                out[key] = list(value) if isinstance(value, list) else value
        return out

    def apply(self, result: Mapping[str, Any]) -> tuple[str, ...]:
        """Set the decisions named in `result` (facts and unknown keys are ignored).

        Every value is checked before any is set: a wrong type raises `DecisionTypeError`
        and changes nothing. Returns the names of the decisions whose value changed.
        """
        staged: list[tuple[str, Any]] = []
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            if f.metadata.get("role") != DECISION or f.name not in result:
                continue
            value, want = result[f.name], _PY_TYPES[str(f.type)]
            if type(value) is not want:
                raise DecisionTypeError(
                    f"decision {f.name!r} must be {want.__name__} (got {value!r} that is "
                    f"{type(value).__name__})"
                )
            if value != getattr(self, f.name):
                staged.append((f.name, value))
        for name, value in staged:
            setattr(self, name, value)
        return tuple(name for name, _ in staged)


class WorkItemMethods:
    """Methods of the work-item record besides its fields."""

    ref: str
    tracker: str

    @property
    def provider(self) -> str:
        """The other the-loop's name for `tracker` (read-only)."""
        return self.tracker

    def __bool__(self) -> bool:
        """False for the empty record (no `ref`), as there: `if ctx.endpoint:` asks whether
        the point names one. (A policy reads a record as a JSON object, whose truth is not
        this.)"""
        return bool(self.ref)

    def to_params(self) -> dict[str, Any]:
        """The record as a JSON object, `tracker` also as `provider` (both loops' name)."""
        return {**vars(self), "provider": self.tracker}

    @classmethod
    def from_ref(cls, ref: str, kind: str = "", id: str = "") -> Self:
        """The record a ref names: `local:owner/repo#N` or `<tracker>:[host/]owner/repo#N`.

        `repository` is `owner/repo`, or `host/owner/repo` when the ref names a host that
        is not the tracker's default (`github:ghe.corp.example/octo/repo#3`), as there.
        A string that is no such ref gives a record with only `ref`, `kind` and `id` set:
        a fact for the hooks is never a failure of the operation. Without `id`, the id is
        what the other the-loop gives: `issue-N` for a `github:` ref, else the ref itself.
        """
        kind = kind or "issue"
        m = _REF_RE.match(ref)
        if m is None:
            return cls(ref=ref, kind=kind, id=id or ref)  # type: ignore[call-arg]
        tracker, owner, repo, number = m["tracker"], m["owner"], m["repo"], int(m["number"])
        host = "" if tracker == "local" else m["host"] or _DEFAULT_HOSTS.get(tracker, "")
        # `repository` is host-qualified when the host is not the tracker's default, as the
        # other the-loop gives it (issue 30.11): an allow-list reads the same string from
        # either loop, and `github:github.com/a/b#1` reads as `a/b`, like `github:a/b#1`.
        repository = (f"{owner}/{repo}" if host in ("", _DEFAULT_HOSTS.get(tracker))
                      else f"{host}/{owner}/{repo}")
        if tracker == "local":
            url = f"local://{owner}/{repo}/{number}"
        elif host:
            url = (f"https://{host}/{owner}/{repo}/"
                   f"{'pull' if kind == 'pull-request' else 'issues'}/{number}")
        else:
            url = ""
        return cls(ref=ref, tracker=tracker, host=host,  # type: ignore[call-arg]
                   owner=owner, repo=repo, repository=repository, number=number, kind=kind,
                   url=url, id=id or (f"issue-{number}" if tracker == "github" else ref))
