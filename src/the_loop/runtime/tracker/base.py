"""The tracker interface the runtime's call sites use; a hosted tracker implements the same."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, Protocol

from the_loop.errors import TrackerError as TrackerError

if TYPE_CHECKING:
    from the_loop.hooks.engine.points import WorkItem


class Comment:
    """One comment on a work item. Plain classes here, as the runtime's other records are
    (runtime/graph.py says why); a comment is compared by its fields."""

    __slots__ = ("author", "body", "created", "id", "source")

    def __init__(self, id: int, author: str, body: str, created: float,
                 source: str = "comment") -> None:
        self.id: Final = id
        self.author: Final = author
        self.body: Final = body
        self.created: Final = created
        #: How the text came in: `comment` (written on the tracker), `reply` (the CLI), `api`.
        self.source: Final = source

    def _fields(self) -> tuple[object, ...]:
        return (self.id, self.author, self.body, self.created, self.source)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Comment):
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return "Comment({!r}, {!r}, {!r}, {!r}, {!r})".format(*self._fields())

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "author": self.author, "body": self.body,
                "created": self.created}


class Item:
    """A ticket or pull request as the tracker holds it."""

    __slots__ = ("author", "body", "closed_by", "comments", "created", "kind", "labels",
                 "parent", "pull", "ref", "state", "title")

    def __init__(self, ref: str, kind: str, title: str, body: str, state: str,
                 labels: list[str] | None = None, comments: list[Comment] | None = None,
                 parent: str = "", closed_by: str = "", created: float = 0.0,
                 author: str = "", pull: PullRequest | None = None) -> None:
        self.ref = ref
        self.kind = kind  # issue | pull-request
        self.title = title
        self.body = body
        self.state = state  # open | closed
        self.labels: list[str] = [] if labels is None else labels
        self.comments: list[Comment] = [] if comments is None else comments
        self.parent = parent  # for a pull request: the ticket it belongs to
        self.closed_by = closed_by
        #: when it was opened (epoch seconds); 0 when the tracker does not say
        self.created = created
        self.author = author  # who filed it ('' when nobody was named)
        self.pull = pull  # a pull request's branches; None for a ticket

    def to_json(self) -> dict[str, Any]:
        out = {
            "ref": self.ref, "title": self.title, "kind": self.kind, "state": self.state,
            "labels": list(self.labels), "body": self.body, "for": self.parent,
            "author": self.author, "comments": [c.to_json() for c in self.comments],
        }
        if self.pull is not None:
            out.update(self.pull.to_json())
        return out


class PullRequest:
    """Where a pull request comes from and goes to. `fork` is derived, never stored."""

    __slots__ = ("base", "draft", "head", "head_repository", "repository")

    def __init__(self, repository: str, base: str = "", head: str = "",
                 head_repository: str = "", draft: bool = False) -> None:
        self.repository: Final = repository  # the base repository (the tracker's owner/repo)
        self.base: Final = base
        self.head: Final = head
        self.head_repository: Final = head_repository
        self.draft: Final = draft

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

    def items(self, *, state: str | None = None, parent: str | None = None) -> list[Item]:
        """Every item (in `state`; of `parent`: the pull requests naming that ticket)."""
        ...

    def add(self, title: str, *, body: str = "", kind: str = "issue", parent: str = "",
            labels: list[str] | None = None, author: str = "",
            pull: PullRequest | None = None) -> str: ...

    def comment(self, ref: str, body: str, *, author: str, source: str = "comment") -> int: ...

    def comment_once(self, ref: str, body: str, mark: str, *, author: str) -> bool:
        """Write a comment unless `author` wrote one holding `mark`; True when written."""
        ...

    def comments_after(self, ref: str, after_id: int) -> list[Comment]: ...

    def label(self, ref: str, label: str, *, remove: bool = False) -> None: ...

    def relabel(self, ref: str, old: str, new: str) -> None:
        """Label `ref` `new` instead of `old` (`new` is added when `old` is not there)."""
        ...

    def close(self, ref: str, *, actor: str) -> bool: ...
