"""What a poll cycle reads, in one statement: the snapshot the cycle decides from (issue 34).

One `UNION ALL` of tagged rows, each branch's row a JSON object, so the whole read is one
statement (one round trip and one transaction on PostgreSQL, one consistent snapshot on
either backend): this host's live sessions and its sessions another host declared lost,
the hosts whose heartbeat lapsed while sessions were recorded on them, the open items with
their labels, every active item's work row (whether it has a pending step, whether its
session ended, how long ago the host it names last beat), the open items with a comment
past their input cursor that the loop did not write itself (its own comments are no input:
a cycle after each would read the comments and move the cursor for nothing), and the items
with pending steps (and the action of each one's first). An idle cycle costs this one
statement.
"""

from __future__ import annotations

import json
from typing import Any

from the_loop.runtime.store import ACTIVE, Store

_WORK_COLUMNS = ("ref", "state", "arm_seq", "node", "session_id", "actor", "source",
                 "respawns", "updated", "epoch", "claim", "claim_until", "fence", "host")
_SESSION_COLUMNS = ("id", "ref", "endpoint", "harness", "pid", "node", "started", "exited",
                    "code", "log", "step", "host", "lost")
#: What a cycle decides from of an open item: its ref, the item a pull request names, its
#: labels (an item's title, body and the rest are read by the visit that needs them).
_ITEM_COLUMNS = ("id", "repository", "number", "parent")


def _obj(json_object: str, alias: str, columns: tuple[str, ...], *extra: str) -> str:
    pairs = [f"'{c}', {alias}.{c}" for c in columns] + list(extra)
    return f"{json_object}({', '.join(pairs)})"


def snapshot_sql(store: Store) -> str:
    """The cycle's one statement; parameters: host, host, host, expiry, *ACTIVE, the
    loop's own login."""
    jo = "json_build_object" if store.db.dialect.name == "postgresql" else "json_object"
    marks = ",".join("?" * len(ACTIVE))
    ref = "'local:' || i.repository || '#' || i.number"
    item = _obj(jo, "i", _ITEM_COLUMNS, "'label', l.label")
    work = _obj(jo, "w", _WORK_COLUMNS, "'session_exited', s.exited",
                "'pending', (SELECT COUNT(*) FROM steps p WHERE p.ref=w.ref AND "
                "p.state='pending')", f"'host_ago', {store.now} - h.seen")
    return " UNION ALL ".join((
        f"SELECT 'live' AS what, {_obj(jo, 's', _SESSION_COLUMNS)} AS r FROM sessions s "
        "WHERE s.exited=0 AND s.host IN ('', ?)",
        f"SELECT 'lost_here', {_obj(jo, 's', _SESSION_COLUMNS)} FROM sessions s "
        "WHERE s.lost=1 AND s.host=?",
        f"SELECT 'lapsed', {jo}('host', x.host) FROM (SELECT DISTINCT s.host AS host FROM "
        "sessions s LEFT JOIN hosts h ON h.id=s.host WHERE s.exited=0 AND s.host NOT IN "
        f"('', ?) AND (h.seen IS NULL OR h.seen <= {store.now} - ?)) AS x",
        f"SELECT 'open', {item} FROM items i "
        "LEFT JOIN labels l ON l.item=i.id WHERE i.state='open'",
        f"SELECT 'active', {work} FROM work w LEFT JOIN sessions s "
        "ON s.id=w.session_id AND w.session_id<>'' LEFT JOIN hosts h ON h.id=w.host "
        f"WHERE w.state IN ({marks})",
        f"SELECT 'commented', {jo}('ref', x.ref) FROM (SELECT DISTINCT {ref} AS ref FROM "
        "comments c JOIN items i ON i.id=c.item LEFT JOIN cursors k ON "
        f"k.ref={ref} WHERE i.state='open' AND c.id > COALESCE(k.last, 0) AND c.author <> ?) "
        "AS x",
        f"SELECT 'pending', {jo}('ref', x.ref, 'first', x.first, 'kind', p.kind) FROM "
        "(SELECT ref, MIN(seq) AS first FROM steps WHERE state='pending' GROUP BY ref) AS x "
        "JOIN steps p ON p.seq=x.first",
    ))


class OpenItem:
    """An open item as a cycle sees it: its ref, its parent (a pull request's ticket),
    its labels."""

    __slots__ = ("labels", "parent", "ref")

    def __init__(self, ref: str, parent: str, labels: list[str]) -> None:
        self.ref = ref
        self.parent = parent
        self.labels = labels


class Snapshot:
    """A poll cycle's view of the loop, read in one statement (see the module docstring)."""

    __slots__ = ("active", "commented", "first", "lapsed", "live", "lost_here", "open_items",
                 "pending")

    def __init__(self, live: list[dict[str, Any]], lost_here: list[dict[str, Any]],
                 lapsed: list[str], open_items: list[OpenItem],
                 active: dict[str, dict[str, Any]], commented: set[str], pending: list[str],
                 first: dict[str, str]) -> None:
        self.live = live
        self.lost_here = lost_here
        self.lapsed = lapsed
        self.open_items = open_items
        self.active = active
        self.commented = commented
        self.pending = pending
        #: The action of each pending item's first pending step (what its visit runs first).
        self.first = first

    def ended(self, sids: set[str]) -> None:
        """Sessions this cycle saw end (or lost with their host): their items owe a check."""
        for w in self.active.values():
            if w["session_id"] in sids:
                w["session_exited"] = 1


def read(store: Store, own: str) -> Snapshot:
    """The snapshot (`own`: the login the loop writes its comments as)."""
    rows = store.db.conn.execute(snapshot_sql(store), (
        store.host, store.host, store.host, store.expiry, *ACTIVE, own)).fetchall()
    by: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        value = row["r"]
        by.setdefault(str(row["what"]), []).append(
            json.loads(value) if isinstance(value, str) else dict(value))
    items: dict[int, dict[str, Any]] = {}
    for r in sorted(by.get("open", []), key=lambda r: (r["id"], r["label"] or "")):
        item = items.setdefault(int(r["id"]), {**r, "labels": []})
        if r["label"] is not None:
            item["labels"].append(str(r["label"]))
    active = sorted(by.get("active", []), key=lambda r: (float(r["updated"]), str(r["ref"])))
    pending = sorted(by.get("pending", []), key=lambda r: int(r["first"]))
    return Snapshot(
        live=sorted(by.get("live", []), key=lambda r: float(r["started"])),
        lost_here=by.get("lost_here", []),
        lapsed=sorted(str(r["host"]) for r in by.get("lapsed", [])),
        open_items=[_item(r) for r in items.values()],
        active={str(r["ref"]): r for r in active},
        commented={str(r["ref"]) for r in by.get("commented", [])},
        pending=[str(r["ref"]) for r in pending],
        first={str(r["ref"]): str(r["kind"]) for r in pending},
    )


def _item(r: dict[str, Any]) -> OpenItem:
    return OpenItem(f"local:{r['repository']}#{r['number']}", str(r["parent"]),
                    list(r["labels"]))
