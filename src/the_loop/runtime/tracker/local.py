"""The embedded tracker: tickets, pull requests, comments and labels in the loop's database."""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Any

from the_loop.errors import quote
from the_loop.runtime.db import Database
from the_loop.runtime.tracker.base import Comment, Item, PullRequest, TrackerError
from the_loop.sqldb import SQLITE

if TYPE_CHECKING:
    from the_loop.hooks.engine.points import WorkItem

REF_RE = re.compile(r"^local:(?P<owner>[A-Za-z0-9_.-]+)/(?P<repo>[A-Za-z0-9_.-]+)#(?P<n>\d+)$")
KINDS = ("issue", "pull-request")


#: The largest number a local work item can have (SQLite's INTEGER).
MAX_NUMBER = 2**63 - 1


def _number(digits: str, ref: str) -> int:
    """The work item number in `digits`; a TrackerError for one no item can have."""
    if len(digits) > 19 or int(digits) > MAX_NUMBER:
        raise TrackerError(
            f"{quote(ref)}: no work item has a number that large; list them with "
            "`the-loop items list`"
        )
    return int(digits)


class LocalTracker:
    """Refs look like `local:<owner>/<repo>#<n>`; `#n` and `n` mean the default repository."""

    def __init__(self, db: Database, repository: str) -> None:
        self.db = db
        self.repository = repository
        self._ids: dict[tuple[str, int], int] = {}  # an item's id never changes

    def resolve(self, ref: str) -> str:
        raw = ref.strip()
        short = raw.lstrip("#")
        if short.isdigit():
            return f"local:{self.repository}#{_number(short, ref)}"
        m = REF_RE.match(raw)
        if not m:
            raise TrackerError(
                f"{quote(ref)} is not a work item ref; expected local:owner/repo#N (or #N for "
                f"{self.repository})"
            )
        _number(m["n"], ref)
        return raw

    def _row(self, ref: str) -> tuple[int, str, int]:
        canon = self.resolve(ref)
        m = REF_RE.match(canon)
        assert m is not None
        repository = f"{m['owner']}/{m['repo']}"
        known = self._ids.get((repository, int(m["n"])))
        memo = self.db.memo()
        if known is None and memo is not None and ("item", canon) in memo:
            known = int(memo["item", canon][0]["id"])  # the visit has read the item
        if known is not None:
            return known, repository, int(m["n"])
        row = self.db.conn.execute(
            "SELECT id FROM items WHERE repository=? AND number=?", (repository, int(m["n"]))
        ).fetchone()
        if row is None:
            raise TrackerError(f"no work item {canon}; list them with `the-loop items list`")
        self._ids[repository, int(m["n"])] = int(row["id"])
        return int(row["id"]), repository, int(m["n"])

    def work_item(self, ref: str) -> WorkItem:
        from the_loop.hooks.engine.points import WorkItem

        canon, repository, number = self._parts(ref)
        if self.db.memo() is not None:  # a visit: the item as `get` read it
            row = self._rows(canon, repository, number)[0]
        else:
            row = self.db.conn.execute(
                "SELECT id, kind, author, base, head, head_repository, draft FROM items WHERE "
                "repository=? AND number=?", (repository, number)).fetchone()
        if row is None:
            raise TrackerError(f"no work item {canon}; list them with `the-loop items list`")
        owner, repo = repository.split("/", 1)
        pull = pull_of(row, repository) or PullRequest("")  # a ticket: no branches, no fork
        return WorkItem(
            ref=canon, tracker="local", host="", owner=owner, repo=repo,
            repository=repository, number=number, kind=str(row["kind"]),
            url=f"local://{repository}/{number}", id=str(row["id"]), author=str(row["author"]),
            base=pull.base, head=pull.head, head_repository=pull.head_repository,
            fork=pull.fork, draft=pull.draft,
        )

    def _parts(self, ref: str) -> tuple[str, str, int]:
        canon = self.resolve(ref)
        m = REF_RE.match(canon)
        assert m is not None
        return canon, f"{m['owner']}/{m['repo']}", int(m["n"])

    #: An item's row with one of its labels per row (NULL: none); ordered by id, then label.
    _WITH_LABELS = ("SELECT i.*, l.label AS label FROM items i LEFT JOIN labels l ON "
                    "l.item = i.id")

    def get(self, ref: str, *, comments: bool = True) -> Item:
        """One query for the item and its labels (a second for its comments)."""
        canon, repository, number = self._parts(ref)
        return self._item(self._rows(canon, repository, number), comments=comments)

    def _rows(self, canon: str, repository: str, number: int) -> list[Any]:
        """The item's rows with its labels: read once in a visit (db.memo; a label or a
        closure written through this tracker reads it again)."""
        memo = self.db.memo()
        if memo is not None and ("item", canon) in memo:
            return list(memo["item", canon])
        rows = self.db.conn.execute(
            f"{self._WITH_LABELS} WHERE i.repository=? AND i.number=? ORDER BY l.label",
            (repository, number)).fetchall()
        if not rows:
            raise TrackerError(f"no work item {canon}; list them with `the-loop items list`")
        if memo is not None:
            memo["item", canon] = [dict(r) for r in rows]
        return rows

    def _changed(self, ref: str, label: str = "", *, remove: bool = False,
                 **fields: Any) -> None:
        """The visit's copy of the item's rows after a write through this tracker: a label
        added or removed, or item columns set (`fields`)."""
        memo = self.db.memo()
        rows = memo.get(("item", self.resolve(ref))) if memo is not None else None
        if rows is None:
            return
        if fields:
            for row in rows:
                row.update(fields)
        if not label:
            return
        kept = [r for r in rows if r["label"] is not None and r["label"] != label]
        if not remove:
            kept.append(dict(rows[0], label=label))
        rows[:] = sorted(kept, key=lambda r: r["label"]) or [dict(rows[0], label=None)]

    def _item(self, rows: list[Any], *, comments: bool) -> Item:
        """An item from its rows of `_WITH_LABELS` (sqlite3.Row, or dicts on PostgreSQL)."""
        r = rows[0]
        labels = [str(x["label"]) for x in rows if x["label"] is not None]
        cs = [
            Comment(int(c["id"]), str(c["author"]), str(c["body"]), float(c["created"]),
                    str(c["source"]))
            for c in self.db.conn.execute(
                "SELECT * FROM comments WHERE item=? ORDER BY id", (r["id"],))
        ] if comments else []
        return Item(
            ref=f"local:{r['repository']}#{r['number']}", kind=str(r["kind"]),
            title=str(r["title"]), body=str(r["body"]), state=str(r["state"]), labels=labels,
            comments=cs, parent=str(r["parent"]), closed_by=str(r["closed_by"]),
            created=float(r["created"]), author=str(r["author"]),
            pull=pull_of(r, str(r["repository"])),
        )

    def items(self, *, state: str | None = None, parent: str | None = None) -> list[Item]:
        """Every item (in `state`; of `parent`: the pull requests naming that ticket), with
        its labels, in one query."""
        where = {"i.state=?": state, "i.parent=?": parent}
        given = {k: v for k, v in where.items() if v is not None}
        sql = (self._WITH_LABELS + (" WHERE " + " AND ".join(given) if given else "")
               + " ORDER BY i.id, l.label")
        by_id: dict[int, list[Any]] = {}
        for row in self.db.conn.execute(sql, tuple(given.values())).fetchall():
            by_id.setdefault(int(row["id"]), []).append(row)
        return [self._item(rows, comments=False) for rows in by_id.values()]

    def add(self, title: str, *, body: str = "", kind: str = "issue", parent: str = "",
            labels: list[str] | None = None, author: str = "",
            pull: PullRequest | None = None) -> str:
        """A new item's ref. `pull`: a pull request's branches (default: none recorded, its
        head in this repository)."""
        if kind not in KINDS:
            raise TrackerError(f"--kind must be one of {', '.join(KINDS)} (got {kind!r})")
        if not title.strip():
            raise TrackerError("a work item needs a non-empty title")
        if parent:
            parent = self.resolve(parent)
            self._row(parent)
            if kind != "pull-request":
                raise TrackerError("--for links a pull request to its ticket; use "
                                   "--kind pull-request")
        if pull is not None and kind != "pull-request":
            raise TrackerError("--base, --head, --head-repository and --draft describe a pull "
                               "request; use --kind pull-request")
        if kind == "pull-request" and pull is None:
            pull = PullRequest(self.repository, head_repository=self.repository)
        with self.db.transaction() as conn:
            self.db.lock(conn, f"items {self.repository}")
            row = conn.execute(
                "SELECT COALESCE(MAX(number), 0) + 1 AS n FROM items WHERE repository=?",
                (self.repository,),
            ).fetchone()
            number = int(row["n"])
            p = pull or PullRequest(self.repository)
            item_id = conn.execute(
                "INSERT INTO items(repository, number, kind, title, body, parent, author, "
                "created, base, head, head_repository, draft) VALUES (?,?,?,?,?,?,?,?,?,?,?,?) "
                "RETURNING id",
                (self.repository, number, kind, title, body, parent, author, time.time(),
                 p.base, p.head, p.head_repository if pull else "", int(p.draft)),
            ).fetchone()["id"]
            for label in labels or []:
                conn.execute("INSERT INTO labels(item, label) VALUES (?, ?) ON CONFLICT "
                             "DO NOTHING", (item_id, label))
        return f"local:{self.repository}#{number}"

    def comment(self, ref: str, body: str, *, author: str, source: str = "comment") -> int:
        """Write a comment; `source` records how it came in (a reply, the API)."""
        item_id, _, _ = self._row(ref)
        with self.db.transaction() as conn:
            row = conn.execute(
                "INSERT INTO comments(item, author, body, created, source) VALUES (?,?,?,?,?) "
                "RETURNING id", (item_id, author, body, time.time(), source),
            ).fetchone()
        return int(row["id"])

    def comment_once(self, ref: str, body: str, mark: str, *, author: str) -> bool:
        """Write a comment unless `author` wrote one holding `mark`; True when written. One
        statement: the check and the write cannot be split by another writer's comment."""
        item_id, _, _ = self._row(ref)
        with self.db.transaction() as conn:
            row = conn.execute(
                "INSERT INTO comments(item, author, body, created, source) "
                "SELECT ?, ?, ?, ?, 'comment' WHERE NOT EXISTS (SELECT 1 FROM comments "
                f"WHERE item=? AND author=? AND {self.db.dialect.contains('body', '?')}) "
                "RETURNING id", (item_id, author, body, time.time(), item_id, author, mark),
            ).fetchone()
        return row is not None

    def comments_after(self, ref: str, after_id: int) -> list[Comment]:
        item_id, _, _ = self._row(ref)
        return [
            Comment(int(c["id"]), str(c["author"]), str(c["body"]), float(c["created"]),
                    str(c["source"]))
            for c in self.db.conn.execute(
                "SELECT * FROM comments WHERE item=? AND id>? ORDER BY id", (item_id, after_id))
        ]

    def label(self, ref: str, label: str, *, remove: bool = False) -> None:
        item_id, _, _ = self._row(ref)
        _check_labels(label)
        with self.db.transaction() as conn:
            if remove:
                conn.execute("DELETE FROM labels WHERE item=? AND label=?", (item_id, label))
            else:
                conn.execute("INSERT INTO labels(item, label) VALUES (?, ?) ON CONFLICT DO "
                             "NOTHING", (item_id, label))
        self._changed(ref, label, remove=remove)

    def relabel(self, ref: str, old: str, new: str) -> None:
        """Label `ref` `new` instead of `old` (a phase change). On SQLite one statement
        renames the label when the item has `old` and not `new` yet, else `old` is removed
        and `new` added; on PostgreSQL one statement removes and adds."""
        if old == new:
            self.label(ref, new)
            return
        item_id, _, _ = self._row(ref)
        _check_labels(old, new)
        with self.db.transaction() as conn:
            if self.db.dialect is not SQLITE:
                # Not a rename there: its NOT EXISTS would not see a person's label of the
                # same name being written, and the rename would then break the key.
                conn.execute("WITH gone AS (DELETE FROM labels WHERE item=? AND label=?) "
                             "INSERT INTO labels(item, label) VALUES (?, ?) ON CONFLICT DO "
                             "NOTHING", (item_id, old, item_id, new))
            elif conn.execute("UPDATE labels SET label=? WHERE item=? AND label=? AND NOT "
                              "EXISTS (SELECT 1 FROM labels WHERE item=? AND label=?)",
                              (new, item_id, old, item_id, new)).rowcount != 1:
                conn.execute("DELETE FROM labels WHERE item=? AND label=?", (item_id, old))
                conn.execute("INSERT INTO labels(item, label) VALUES (?, ?) ON CONFLICT DO "
                             "NOTHING", (item_id, new))
        self._changed(ref, old, remove=True)
        self._changed(ref, new)

    def close(self, ref: str, *, actor: str) -> bool:
        """Close the item; False when it was already closed."""
        item_id, _, _ = self._row(ref)
        now = time.time()
        with self.db.transaction() as conn:
            cur = conn.execute(
                "UPDATE items SET state='closed', closed_by=?, closed_at=? "
                "WHERE id=? AND state='open'", (actor, now, item_id),
            )
        if cur.rowcount == 1:
            self._changed(ref, state="closed", closed_by=actor, closed_at=now)
        elif (memo := self.db.memo()) is not None:  # closed by someone else: read it again
            memo.pop(("item", self.resolve(ref)), None)
        return bool(cur.rowcount == 1)

    def comment_body(self, comment_id: int) -> str:
        """The text of one comment ('' when it no longer exists)."""
        row = self.db.conn.execute("SELECT body FROM comments WHERE id=?",
                                   (comment_id,)).fetchone()
        return str(row["body"]) if row else ""


def pull_of(row: object, repository: str) -> PullRequest | None:
    """A pull request row's branches (None for a ticket)."""
    r: Any = row  # sqlite3.Row, or a dict on PostgreSQL
    if r["kind"] != "pull-request":
        return None
    return PullRequest(repository, str(r["base"]), str(r["head"]), str(r["head_repository"]),
                       bool(r["draft"]))


def _check_labels(*labels: str) -> None:
    """TrackerError unless every label is a non-empty string."""
    if not all(label.strip() for label in labels):
        raise TrackerError("a label must be a non-empty string")
