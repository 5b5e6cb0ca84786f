"""The CPU a `the-loop` command costs before and while it does its one thing (issue 34, item 3).

Each command runs `--runs` times as a real process; its CPU is user + system time of the
child from `wait4`, and the table gives the least of the runs (the least disturbed by the
other work on the machine) and their median. The floor is `python -c pass`, measured in the
same run; the ratio is a command's CPU over the floor's of the same column. With
`--baseline REF` the same commands also run from a checkout of REF (benchmarks/baseline.py)
and sit beside this one's. Runs alternate: each round runs every command of every column
once, so a burst of load hits all of them alike.

    .venv/bin/python benchmarks/startup.py [--runs 15] [--baseline HEAD~1] [--parts]

Children write and read bytecode in a cache of the run (PYTHONPYCACHEPREFIX), as an
installed package would, even when PYTHONDONTWRITEBYTECODE is set here. The commands:
`the-loop --help`, `the-loop graph complete` and `the-loop ask` on an item at an agent node
of a local loop (SQLite, no hooks; with `--hooks`, a policy folder declared, as an operator's
loop has) in the environment its session's harness was given (the harness writes it down),
`the-loop hooks points`; and the two agent commands again through the agent door
(the_loop/agentdoor.py) of a door this script holds open, as the poller that launched the
session does: their rows are the command's own process, and the door's CPU per answer (this
process's, while the command waits) is given apart.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from baseline import checkout, describe, env_for
from the_loop.agentdoor import DOOR_ENV
from the_loop.cli import main as cli_main
from the_loop.cli.door import Door
from the_loop.cli.loop import ask_line, complete_line
from the_loop.cli.quick import agent_args

CONFIG = """\
loop: bench
stateDir: .the-loop
tracker: {kind: local, repository: acme/app}
harness: idle
harnesses:
  - name: idle
    command: [PYTHON, "-c", WRITE_ENV, OUT]
"""
#: The session's harness: writes down the environment the loop gave it, and exits.
WRITE_ENV = "import json, os, sys; json.dump(dict(os.environ), open(sys.argv[1], 'w'))"

COMMANDS: dict[str, list[str]] = {
    "python -c pass": ["-c", "pass"],
    "the-loop --help": ["-m", "the_loop", "--help"],
    "the-loop graph complete": ["-m", "the_loop", "graph", "complete", "--summary", "ok"],
    "the-loop ask": ["-m", "the_loop", "ask", "Which database?"],
    "the-loop hooks points": ["-m", "the_loop", "hooks", "points"],
    "the-loop graph complete, through the door": ["-m", "the_loop", "graph", "complete",
                                                  "--summary", "ok"],
    "the-loop ask, through the door": ["-m", "the_loop", "ask", "Which database?"],
}
#: A loop's hooks with `--hooks`: a policy folder, as `the-loop demo` declares one.
HOOKS = """\
hooks:
  - name: house-rules
    policy: policies
    required: true
"""
RULES = """\
rules:
  - name: frozen
    on: work_item_start
    when: "contains(labels, 'frozen')"
    set: {proceed: false, reason: the code is frozen}
  - name: prefix
    on: session_spawn
    when: "work_item.kind == 'issue'"
    set: {prompt_prefix: "[house rules] "}
  - name: no-keys
    on: input_received
    when: "contains(text, 'sk-live-')"
    set: {text: "[a key was removed]"}
"""

#: With `--parts`, what the agent's commands are made of: the standard library modules their
#: path imports (with `python -m`'s own), then without typing, pathlib and hashlib one after
#: the other, and every module `graph complete` imports without its work.
_STDLIB = "runpy, importlib.util, re, json, sqlite3, threading, signal, fcntl, zlib, atexit, enum"
PARTS: dict[str, list[str]] = {
    "stdlib of the agent's path": ["-c", f"import {_STDLIB}, typing, pathlib, hashlib"],
    "  without typing": ["-c", f"import {_STDLIB}, pathlib, hashlib"],
    "  without typing, pathlib": ["-c", f"import {_STDLIB}, hashlib"],
    "  without typing, pathlib, hashlib": ["-c", f"import {_STDLIB}"],
    "graph complete's imports, no work": ["-c", "import runpy, hashlib, the_loop.cli.quick, "
                                          "the_loop.cli.loop, the_loop.cli.guard, "
                                          "the_loop.runtime.service, the_loop.runtime.identity"],
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


def loop_folder(root: Path, hooks: bool = False) -> dict[str, str]:
    """A local loop with one item at its first (agent) node; its session's environment."""
    root.mkdir()
    config = root / "cli-config.yaml"
    seen = root / "session-env.json"
    if hooks:
        (root / "policies").mkdir()
        (root / "policies" / "rules.yaml").write_text(RULES, encoding="utf-8")
    config.write_text(CONFIG.replace("PYTHON", json.dumps(sys.executable))
                      .replace("WRITE_ENV", json.dumps(WRITE_ENV))
                      .replace("OUT", json.dumps(str(seen))) + (HOOKS if hooks else ""),
                      encoding="utf-8")
    quiet = io.StringIO()
    with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
        for args in (["items", "add", "Bench"], ["start", "1", "--actor", "alice"],
                     ["poll", "--once"]):
            if cli_main(["--config", str(config), *args]):
                raise RuntimeError(f"the-loop {args} failed: {quiet.getvalue()}")
    deadline = time.monotonic() + 60
    while not seen.is_file() or not seen.read_text(encoding="utf-8").endswith("}"):
        if time.monotonic() > deadline:
            raise RuntimeError("the session's harness did not write its environment")
        time.sleep(0.05)
    env: dict[str, str] = json.loads(seen.read_text(encoding="utf-8"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    # Bytecode as an installed package has it: compiled once, into a cache of this run
    # (a process that compiles every module from source costs 3x the CPU).
    env["PYTHONPYCACHEPREFIX"] = str(root.parent / "pycache")
    return env


def measure(envs: dict[str, dict[str, str]], cwd: Path, runs: int, door: str
            ) -> tuple[dict[str, dict[str, list[float]]], float]:
    """Each column's CPU seconds of each command, one per run; and the CPU seconds this
    process spent per command through the door (the door's answers)."""
    def env_of(env: dict[str, str], name: str) -> dict[str, str]:
        return {**env, DOOR_ENV: door} if "door" in name else env

    for env in envs.values():  # the bytecode cache is written here, not measured
        for name, argv in COMMANDS.items():
            cpu_of(argv, env_of(env, name), cwd)
    cpu: dict[str, dict[str, list[float]]] = {c: {n: [] for n in COMMANDS} for c in envs}
    answering = 0.0
    for _ in range(runs):  # alternating, so a burst of load hits every command alike
        for column, env in envs.items():
            for name, argv in COMMANDS.items():
                before = time.process_time()
                cpu[column][name].append(cpu_of(argv, env_of(env, name), cwd))
                if "door" in name and column == "this checkout":
                    answering += time.process_time() - before
    return cpu, answering / (2 * runs)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--baseline", default="", metavar="REF",
                    help="also measure a checkout of REF (e.g. HEAD~1, main)")
    ap.add_argument("--hooks", action="store_true",
                    help="the loop declares a policy folder, as an operator's does")
    ap.add_argument("--parts", action="store_true",
                    help="also measure the imports of the agent's commands alone (PARTS)")
    args = ap.parse_args()
    if args.parts:
        COMMANDS.update(PARTS)
    with tempfile.TemporaryDirectory(prefix="loop-startup-") as tmp, \
            contextlib.ExitStack() as stack:
        session = loop_folder(Path(tmp) / "loop", args.hooks)
        door = Door.open(Path(tmp) / "loop" / "cli-config.yaml",
                         {"ask": ask_line, "graph": complete_line}, agent_args)
        if door is None:
            raise SystemExit("cannot open an agent door here (no Unix sockets?)")
        stack.callback(door.close)
        envs = {"this checkout": env_for(None, session)}
        if args.baseline:
            src = stack.enter_context(checkout(args.baseline))
            envs[describe(args.baseline)] = env_for(src, session)
        columns, answering = measure(envs, Path(tmp), args.runs, door.path)
    load = os.getloadavg()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
          f"{platform.python_version()}, load {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} at end")
    print(f"command: python benchmarks/startup.py --runs {args.runs}"
          + (f" --baseline {args.baseline}" if args.baseline else "")
          + (" --hooks" if args.hooks else "") + (" --parts" if args.parts else ""))
    print(f"\nCPU (user + system) of one process over {args.runs} alternating runs: the least "
          "(ms) and the median (ms); ratio: the least ÷ the floor's least (python -c pass) of "
          "the same column (median ÷ median in brackets); target ≤ 3.0 for --help, graph "
          "complete, ask\n")
    for n in columns:
        print(f"- {n}")
    names = list(columns)
    print("\n| command | " + " | ".join(f"{i + 1}: least | median | ratio"
                                       for i in range(len(names))) + " |")
    print("|---|" + "---:|---:|---:|" * len(names))
    for command in COMMANDS:
        cells = []
        for n in names:
            least, median = min(columns[n][command]), statistics.median(columns[n][command])
            floor = columns[n]["python -c pass"]
            cells.append(f"{least * 1e3:.1f} | {median * 1e3:.1f} | {least / min(floor):.2f} "
                         f"({median / statistics.median(floor):.2f})")
        print(f"| {command} | " + " | ".join(cells) + " |")
    print(f"\nThe door's CPU per answer (in the process holding it, the poller's): "
          f"{answering * 1e3:.1f} ms (mean of the {2 * args.runs} door rows' runs of this "
          "checkout). A checkout without the door runs those rows as one-shots.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
