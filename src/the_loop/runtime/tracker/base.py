"""The tracker interface the runtime's call sites use; a hosted tracker implements the same."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from the_loop.errors import TrackerError as TrackerError

if TYPE_CHECKING:
    from the_loop.hooks.engine.points import WorkItem


@dataclass(frozen=True)
class Comment:
    id: int
    author: str
    body: str
    created: float
    #: How the text came in: `comment` (written on the tracker), `reply` (the CLI), `api`.
    source: str = "comment"

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "author": self.author, "body": self.body,
                "created": self.created}


@dataclass
class Item:
    """A ticket or pull request as the tracker holds it."""

    ref: str
    kind: str  # issue | pull-request
    title: str
    body: str
    state: str  # open | closed
    labels: list[str] = field(default_factory=list)
    comments: list[Comment] = field(default_factory=list)
    parent: str = ""  # for a pull request: the ticket it belongs to
    closed_by: str = ""
    created: float = 0.0  # when it was opened (epoch seconds); 0 when the tracker does not say
    author: str = ""  # who filed it ('' when nobody was named)
    pull: PullRequest | None = None  # a pull request's branches; None for a ticket

    def to_json(self) -> dict[str, Any]:
        out = {
            "ref": self.ref, "title": self.title, "kind": self.kind, "state": self.state,
            "labels": list(self.labels), "body": self.body, "for": self.parent,
            "author": self.author, "comments": [c.to_json() for c in self.comments],
        }
        if self.pull is not None:
            out.update(self.pull.to_json())
        return out


@dataclass(frozen=True)
class PullRequest:
    """Where a pull request comes from and goes to. `fork` is derived, never stored."""

    repository: str  # the base repository (the tracker's owner/repo)
    base: str = ""
    head: str = ""
    head_repository: str = ""
    draft: bool = False

    @property
    def fork(self) -> bool:
        """True when the head branch lives in another repository than the base."""
        return bool(self.head_repository) and self.head_repository != self.repository

    def to_json(self) -> dict[str, Any]:
        return {"base": self.base, "head": self.head, "head_repository": self.head_repository,
                "fork": self.fork, "draft": self.draft}


class Tracker(Protocol):
    """What the loop needs from a tracker."""

    def resolve(self, ref: str) -> str:
        """The canonical ref for what a person typed (`#3`, `3`, or a full ref)."""
        ...

    def work_item(self, ref: str) -> WorkItem: ...

    def get(self, ref: str, *, comments: bool = True) -> Item: ...

    def items(self, *, state: str | None = None) -> list[Item]: ...

    def add(self, title: str, *, body: str = "", kind: str = "issue", parent: str = "",
            labels: list[str] | None = None, author: str = "",
            pull: PullRequest | None = None) -> str: ...

    def comment(self, ref: str, body: str, *, author: str, source: str = "comment") -> int: ...

    def comments_after(self, ref: str, after_id: int) -> list[Comment]: ...

    def label(self, ref: str, label: str, *, remove: bool = False) -> None: ...

    def close(self, ref: str, *, actor: str) -> bool: ...
