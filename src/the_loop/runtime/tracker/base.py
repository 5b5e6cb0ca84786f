"""The tracker interface the runtime's call sites use; a hosted tracker implements the same."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from the_loop.errors import TrackerError as TrackerError
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

    def to_json(self) -> dict[str, Any]:
        return {
            "ref": self.ref, "title": self.title, "kind": self.kind, "state": self.state,
            "labels": list(self.labels), "body": self.body, "for": self.parent,
            "comments": [c.to_json() for c in self.comments],
        }


class Tracker(Protocol):
    """What the loop needs from a tracker."""

    def resolve(self, ref: str) -> str:
        """The canonical ref for what a person typed (`#3`, `3`, or a full ref)."""
        ...

    def work_item(self, ref: str) -> WorkItem: ...

    def get(self, ref: str, *, comments: bool = True) -> Item: ...

    def items(self, *, state: str | None = None) -> list[Item]: ...

    def add(self, title: str, *, body: str = "", kind: str = "issue", parent: str = "",
            labels: list[str] | None = None, author: str = "") -> str: ...

    def comment(self, ref: str, body: str, *, author: str, source: str = "comment") -> int: ...

    def comments_after(self, ref: str, after_id: int) -> list[Comment]: ...

    def label(self, ref: str, label: str, *, remove: bool = False) -> None: ...

    def close(self, ref: str, *, actor: str) -> bool: ...
