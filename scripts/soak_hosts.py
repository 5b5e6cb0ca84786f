"""Randomised soak of one loop on several hosts sharing PostgreSQL (issue 24.5), longer than the
suite's test: each round makes a fresh database, starts `--hosts` simulated hosts (a folder
and a `poll --host-id` daemon each; tests/hosts_helpers.py), arms `--items` items with a few
comments, and until every item is done kills a whole random host (its poller and its
sessions, SIGKILL) or pauses one past its lease (SIGSTOP, then SIGCONT) at random moments,
bringing killed hosts back after a random wait. Then the promises are checked (every item
done once, every comment delivered once, no session id launched twice, nothing pending or
left running) and no poller may have written a traceback. Bounded by `--rounds` and
`--time-limit`, whichever ends first; exits 1 naming what broke, with the seed.

    .venv/bin/python scripts/soak_hosts.py --dsn postgresql:///postgres [--hosts 3]
        [--items 20] [--rounds 5] [--time-limit 600] [--seed N]

`--dsn` names a server where the soak may create and drop databases.
"""

from __future__ import annotations

import argparse
import random
import signal
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from hosts_helpers import Host, all_done, broken
from runtime_helpers import pg_query


def fresh_database(admin: str) -> tuple[str, str]:
    import psycopg

    name = f"the_loop_soak_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    base, _, query = admin.partition("?")
    return name, base.rsplit("/", 1)[0] + "/" + name + (f"?{query}" if query else "")


def drop(admin: str, name: str) -> None:
    import psycopg

    from the_loop.sqldb import _close_pools

    _close_pools()
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def one_round(root: Path, dsn: str, rng: random.Random, args: argparse.Namespace) -> list[str]:
    hosts = [Host(root, f"host-{i}", dsn, work=rng.uniform(0.2, 1.0), expiry=1.5)
             for i in range(args.hosts)]
    try:
        first = hosts[0]
        refs = [first.cli("items", "add", f"Item {i}").strip() for i in range(args.items)]
        for ref in refs:
            first.cli("start", ref, "--actor", "alice")
        for ref in rng.sample(refs, k=min(5, len(refs))):
            first.cli("items", "comment", ref, f"Note for {ref}.", "--author", "bob")
        for h in hosts:
            h.start()
        deadline = time.monotonic() + 180
        while not all_done(dsn, refs) and time.monotonic() < deadline:
            time.sleep(rng.uniform(0.3, 2.0))
            victim = rng.choice(hosts)
            if rng.random() < 0.5:
                victim.kill()
                time.sleep(rng.uniform(0.5, 3.0))
                victim.start()
            else:
                victim.signal(signal.SIGSTOP)
                time.sleep(rng.uniform(1.0, 3.0))
                victim.signal(signal.SIGCONT)
        if not all_done(dsn, refs):
            return [f"not done in 180 s: {pg_query(dsn, 'SELECT ref, state FROM work')}"]
        end = time.monotonic() + 30
        while pg_query(dsn, "SELECT id FROM sessions WHERE exited=0") and time.monotonic() < end:
            time.sleep(0.2)
    finally:
        for h in hosts:
            h.signal(signal.SIGCONT)
            h.stop()
    out = broken(hosts, refs, dsn)
    out += [f"{h.name} wrote a traceback" for h in hosts if "Traceback" in h.errors()]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dsn", required=True)
    ap.add_argument("--hosts", type=int, default=3)
    ap.add_argument("--items", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--time-limit", type=float, default=600)
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    started = time.monotonic()
    failures: list[str] = []
    rounds = 0
    while rounds < args.rounds and time.monotonic() - started < args.time_limit:
        rounds += 1
        name, dsn = fresh_database(args.dsn)
        try:
            with tempfile.TemporaryDirectory(prefix="soak-hosts-") as tmp:
                failures += [f"round {rounds}: {f}" for f in one_round(Path(tmp), dsn, rng, args)]
        finally:
            drop(args.dsn, name)
        print(f"round {rounds} done ({time.monotonic() - started:.0f} s)", flush=True)
    for f in failures:
        print(f, file=sys.stderr)
    print(f"{rounds} rounds, {len(failures)} broken promises (seed {seed})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
