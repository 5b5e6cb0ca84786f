"""The CPU a `the-loop` command costs before and while it does its one thing (issue 34, item 1).

Each command runs `--runs` times as a real process; its CPU is user + system time from
`wait4`, and the table keeps the least of the runs (the least disturbed by the other work on
the machine). The floor is `python -c pass`, measured in the same run; the ratio is a
command's CPU over the floor's. With `--baseline REF` the same commands also run from a
checkout of REF (benchmarks/baseline.py) and sit beside this one's.

    .venv/bin/python benchmarks/startup.py [--runs 15] [--baseline HEAD~1]

Children write and read bytecode in a cache of the run (PYTHONPYCACHEPREFIX), as an
installed package would, even when PYTHONDONTWRITEBYTECODE is set here. The commands:
`the-loop --help`, `the-loop graph complete` and `the-loop ask` on an item at an agent node
of a local loop (SQLite, no hooks), `the-loop hooks points`.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

from baseline import checkout, describe, env_for
from the_loop.cli import main as cli_main

CONFIG = """\
loop: bench
stateDir: .the-loop
tracker: {kind: local, repository: acme/app}
harness: idle
harnesses:
  - name: idle
    command: ["true"]
"""

COMMANDS: dict[str, list[str]] = {
    "python -c pass": ["-c", "pass"],
    "the-loop --help": ["-m", "the_loop", "--help"],
    "the-loop graph complete": ["-m", "the_loop", "graph", "complete", "--summary", "ok"],
    "the-loop ask": ["-m", "the_loop", "ask", "Which database?"],
    "the-loop hooks points": ["-m", "the_loop", "hooks", "points"],
}


def cpu_of(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    """User + system seconds of one run of `python argv`."""
    proc = subprocess.Popen([sys.executable, *argv], env=env, cwd=cwd,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.stderr:
        proc.stderr.close()
    if proc.returncode not in (0,):
        raise RuntimeError(f"{argv} exited {proc.returncode}: {err}")
    return usage.ru_utime + usage.ru_stime


def loop_folder(root: Path) -> dict[str, str]:
    """A local loop with one item at its first (agent) node; the session's environment."""
    root.mkdir()
    config = root / "cli-config.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    quiet = io.StringIO()
    with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
        for args in (["items", "add", "Bench"], ["start", "1", "--actor", "alice"],
                     ["poll", "--once"]):
            if cli_main(["--config", str(config), *args]):
                raise RuntimeError(f"the-loop {args} failed: {quiet.getvalue()}")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("THE_LOOP_") and k != "PYTHONDONTWRITEBYTECODE"}
    # Bytecode as an installed package has it: compiled once, into a cache of this run
    # (a process that compiles every module from source costs 3x the CPU).
    env["PYTHONPYCACHEPREFIX"] = str(root.parent / "pycache")
    return {**env, "THE_LOOP_CLI_CONFIG": str(config), "THE_LOOP_WORK_ITEM": "local:acme/app#1"}


def measure(env: dict[str, str], cwd: Path, runs: int) -> dict[str, float]:
    best: dict[str, float] = {}
    for argv in COMMANDS.values():  # the bytecode cache is written here, not measured
        cpu_of(argv, env, cwd)
    for _ in range(runs):  # interleaved, so a burst of load hits every command alike
        for name, argv in COMMANDS.items():
            cpu = cpu_of(argv, env, cwd)
            best[name] = min(best.get(name, cpu), cpu)
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--baseline", default="", metavar="REF",
                    help="also measure a checkout of REF (e.g. HEAD~1, main)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="loop-startup-") as tmp:
        session = loop_folder(Path(tmp) / "loop")
        columns = {"this checkout": measure(env_for(None, session), Path(tmp), args.runs)}
        if args.baseline:
            with checkout(args.baseline) as src:
                columns[describe(args.baseline)] = measure(env_for(src, session), Path(tmp),
                                                           args.runs)
    load = os.getloadavg()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}, load {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} at end")
    print(f"command: python benchmarks/startup.py --runs {args.runs}"
          + (f" --baseline {args.baseline}" if args.baseline else ""))
    print(f"\nCPU (user + system) of one process, least of {args.runs} runs; ratio ÷ the "
          "floor (python -c pass) of the same column; target ≤ 3.0 for --help, graph "
          "complete, ask\n")
    names = list(columns)
    print("| command | " + " | ".join(f"{n}: ms | ratio" for n in names) + " |")
    print("|---|" + "---:|---:|" * len(names))
    for command in COMMANDS:
        cells = []
        for n in names:
            floor = columns[n]["python -c pass"]
            cells.append(f"{columns[n][command] * 1e3:.1f} | {columns[n][command] / floor:.2f}")
        print(f"| {command} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
