"""`the-loop state check`: is the loop's database reachable, its schema current, this host's
clock close to the database's, is any claim or session held by a host not seen lately, and
is this host's id held by another live instance (another machine or state folder)?

Each check is a `Finding` (its name, ok or not, one sentence); `check_state` returns them all
and never raises for what it finds — an unreachable database is a finding too.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from the_loop.errors import LoopError
from the_loop.runtime.db import SCHEMA_VERSION, Database, open_database
from the_loop.runtime.lease import clash_message, clashes, host_id, host_owner, owner_host
from the_loop.runtime.settings import Settings


@dataclass(frozen=True)
class Finding:
    check: str
    ok: bool
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {"check": self.check, "ok": self.ok, "detail": self.detail}


def check_state(settings: Settings, *, max_skew: float) -> list[Finding]:
    """Every check, in order; later checks are skipped when the database cannot be read."""
    try:
        db = open_database(settings.db_target, migrate=False)
    except LoopError as exc:
        return [Finding("connectivity", False, str(exc))]
    try:
        found = [Finding("connectivity", True, f"{db.dialect.name} at {db.where}")]
        version = db.version()
        found.append(_schema(version))
        if version != SCHEMA_VERSION:
            return found
        found.append(_skew(db, max_skew))
        found.extend(_stale(db, settings.lease_expiry))
        found.append(_host_id(db, settings))
        found.append(_decisions(settings))
        return found
    finally:
        db.close()


def _schema(version: int) -> Finding:
    if version == SCHEMA_VERSION:
        return Finding("schema", True, f"version {version}, current")
    if version > SCHEMA_VERSION:
        return Finding("schema", False, f"version {version} is newer than this the-loop knows "
                                        f"({SCHEMA_VERSION}): upgrade the-loop on this host")
    return Finding("schema", False, f"version {version}, this the-loop writes "
                                    f"{SCHEMA_VERSION}: run `the-loop state migrate`")


def _skew(db: Database, max_skew: float) -> Finding:
    before = time.time()
    row = db.conn.execute(f"SELECT {db.dialect.now} AS now").fetchone()
    after = time.time()
    skew = float(row["now"]) - (before + after) / 2
    if abs(skew) > max_skew + (after - before) / 2:
        return Finding("clock", False, f"this host's clock is {abs(skew):.2f} s "
                                       f"{'behind' if skew > 0 else 'ahead of'} the "
                                       f"database's (more than {max_skew:g} s): run NTP here")
    return Finding("clock", True, f"within {max_skew:g} s of the database's "
                                  f"({skew:+.3f} s)")


def _decisions(settings: Settings) -> Finding:
    """The decision log of the store the config names, counted as replay and the console
    count it: every host's points."""
    from the_loop.decisions.reads import count_since, item_stats

    try:
        n = count_since(settings.db_target, None)
        hosts = sorted({h for s in item_stats(settings.db_target).values() for h in s.hosts})
    except LoopError as exc:
        return Finding("decisions", False, f"the decision log cannot be read: {exc}")
    return Finding("decisions", True, f"{n} recorded point(s)" + (
        f" from host(s) {', '.join(hosts)}" if hosts else ""))


def _stale(db: Database, expiry: float) -> list[Finding]:
    """Claims and sessions of hosts whose heartbeat is older than the lease expiry."""
    now = db.dialect.now
    seen = {str(r["id"]): float(r["ago"]) for r in db.conn.execute(
        f"SELECT id, {now} - seen AS ago FROM hosts")}
    stale: list[str] = []
    for r in db.conn.execute(f"SELECT ref, claim, claim_until - {now} AS left FROM work "
                             "WHERE claim <> '' ORDER BY ref"):
        host = owner_host(str(r["claim"]))
        if float(r["left"]) < 0:
            stale.append(f"{r['ref']} claimed by {host}, lapsed {-float(r['left']):.0f} s ago")
    for r in db.conn.execute("SELECT ref, id, host FROM sessions WHERE exited=0 AND "
                             "host <> '' ORDER BY ref"):
        ago = seen.get(str(r["host"]))
        if ago is None or ago > expiry:
            when = "never seen" if ago is None else f"not seen for {ago:.0f} s"
            stale.append(f"{r['ref']}: session {r['id']} on {r['host']} ({when})")
    hosts = ", ".join(f"{h} ({a:.0f} s ago)" for h, a in sorted(seen.items()))
    out = [Finding("hosts", True, hosts or "no host has run a daemon yet")]
    if stale:
        out.append(Finding("leases", False, "held by hosts not seen within the lease "
                                            f"({expiry:g} s); a live host takes them over: "
                                            + "; ".join(stale)))
    else:
        out.append(Finding("leases", True, "every claim and session belongs to a live host"))
    return out


def _host_id(db: Database, settings: Settings) -> Finding:
    """Whether this host's id is held by another instance that beat within the lease: the
    clash a daemon started here would refuse to start on (lease.py)."""
    me = host_id()
    row = db.conn.execute(f"SELECT owner, {db.dialect.now} - seen AS ago FROM hosts WHERE id=?",
                          (me,)).fetchone()
    if row is None:
        return Finding("host-id", True, f"{me!r} is not in use yet")
    ago = float(row["ago"])
    if ago < settings.lease_expiry and clashes(str(row["owner"]),
                                               host_owner(settings.state_dir)):
        return Finding("host-id", False, clash_message(me, str(row["owner"]), ago))
    return Finding("host-id", True, f"{me!r} is this machine's and this state folder's "
                                    "(or free)")
