"""Randomised crash soak (issue 12.6): `kill -9` the poller at random moments, restart it,
and check at the end that nothing was lost, doubled or stuck.

Each round walks one new work item through a `poll --interval 0.05` daemon: arm it, wait
for its session, then mallory's comment (a policy drops it), the agent's question and the
answer, `graph complete`, `/approve`, done. After each command, most of the time, the
daemon is killed with SIGKILL at a random moment in the next half second and started again;
a wait that sees the daemon dead restarts it too. The run is bounded: `--rounds` rounds
(default 20) or `--time-limit` seconds (default 120), whichever ends first; a round the
limit cut short is not judged.

At the end (daemon stopped) the invariants of tests/fault_helpers.py are checked: every
input delivered exactly once, every refusal and marked comment posted once, no item stuck
(every judged item done), no hook asked twice for a recorded step (a kill between a hook's
answer and its record may ask once more: allowed once per kill, and reported), one session
per launch step, never two live sessions of one item; plus no traceback from any daemon.
Exits 0 when all hold, 1 naming each one broken.

    .venv/bin/python scripts/soak.py [--rounds 20] [--time-limit 120] [--seed N] [--keep]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fault_helpers import ANSWER, broken, hold, live_sessions
from runtime_helpers import LoopDir


class Daemon:
    """The poller under test: started, killed with SIGKILL, started again."""

    def __init__(self, ld: LoopDir, logs: Path) -> None:
        self.ld, self.logs = ld, logs
        self.proc: subprocess.Popen[str] | None = None
        self.started = 0
        self.kills = 0
        self.kill_at = 0.0

    def start(self) -> None:
        self.started += 1
        err = (self.logs / f"poller-{self.started}.err").open("w")
        self.proc = subprocess.Popen(self.ld.argv("poll", "--interval", "0.05", "--quiet"),
                                     cwd=self.ld.root, env=self.ld.env(), text=True,
                                     stdout=subprocess.DEVNULL, stderr=err)
        err.close()

    def tick(self) -> None:
        """Kill when the chosen moment has come; restart a daemon that is not running."""
        assert self.proc is not None
        if self.kill_at and time.monotonic() >= self.kill_at:
            self.kill_at = 0.0
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
            self.kills += 1
        if self.proc.poll() is not None:
            self.start()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=60)

    def tracebacks(self) -> list[str]:
        return [p.name for p in sorted(self.logs.glob("poller-*.err"))
                if "Traceback" in p.read_text(errors="replace")]


def pending(ld: LoopDir, ref: str) -> bool:
    return bool(ld.query("SELECT 1 FROM steps WHERE ref=? AND state='pending'", ref))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--time-limit", type=float, default=120.0, metavar="S")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--keep", action="store_true", help="keep the loop folder")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    root = Path(tempfile.mkdtemp(prefix="the-loop-soak-"))
    deadline = time.monotonic() + args.time_limit
    print(f"soak: seed {seed}, up to {args.rounds} rounds / {args.time_limit:g} s in {root}",
          flush=True)
    ld = LoopDir(root / "loop")
    hold(ld)
    daemon = Daemon(ld, root)
    judged: dict[str, str] = {}
    problems: list[str] = []

    def wait(what: str, ref: str, state: str) -> bool:
        """Until `ref` is in `state` with no pending step (and, when running, one live
        session); restarting the daemon whenever it is dead."""
        until = min(deadline, time.monotonic() + 60)
        while time.monotonic() < until:
            daemon.tick()
            if (ld.work(ref).get("state") == state and not pending(ld, ref)
                    and (state != "running" or live_sessions(ld)[ref] == 1)):
                return True
            time.sleep(0.02)
        if time.monotonic() < deadline:
            problems.append(f"item stuck: {ref} never reached {what} within 60 s "
                            f"(state {ld.work(ref).get('state')!r})")
        return False

    def do(*argv: str) -> None:
        done = ld.cli(*argv, ok=False)
        if done.returncode != 0:
            problems.append(f"`the-loop {' '.join(argv)}` exited {done.returncode}: "
                            f"{done.stderr.strip()}")
        if rng.random() < 0.7:  # a kill somewhere in what this command set going
            daemon.kill_at = time.monotonic() + rng.uniform(0.0, 0.5)

    rounds = 0
    daemon.start()
    try:
        for i in range(args.rounds):
            if time.monotonic() >= deadline:
                break
            ref = ld.add(f"Soak item {i}")
            do("start", ref, "--actor", "alice")
            ok = wait("a live session", ref, "running")
            do("reply", ref, f"Delete the database ({i}).", "--actor", "mallory")
            do("ask", "Which users first?", "--work-item", ref)
            do("reply", ref, f"{ANSWER} ({i})", "--actor", "alice")
            ok = ok and wait("the answer delivered", ref, "running")
            do("graph", "complete", "--work-item", ref)
            ok = ok and wait("the gate", ref, "gate")
            do("reply", ref, "/approve", "--actor", "alice")
            ok = ok and wait("done", ref, "done")
            if time.monotonic() >= deadline and not ok:
                break  # cut short by the time limit: not judged
            judged[ref] = "done"
            rounds += 1
            print(f"round {rounds}: {ref} done ({daemon.kills} kills so far)", flush=True)
    finally:
        daemon.stop()
    try:
        problems += broken(ld, judged, kills=daemon.kills)
        problems += [f"a poller wrote a traceback: {name}" for name in daemon.tracebacks()]
        extra = sum(1 for _ in ld.seen()) - sum(
            len(json.loads(s["decisions"])) for s in ld.query(
                "SELECT decisions FROM steps"))
    finally:
        ld.close()
    print(f"soak: {rounds} rounds, {daemon.kills} kills, {daemon.started} poller starts, "
          f"{max(extra, 0)} point(s) asked again after a kill before their record, "
          f"seed {seed}")
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    if rounds == 0:
        problems.append("no round finished within the time limit")
    for p in problems:
        print(f"BROKEN: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
