"""`the-loop init [DIR]`: write a working starting point where the config lookup finds it."""

from __future__ import annotations

import argparse
import os
import shlex
from pathlib import Path
from typing import Any

from the_loop.config import ENV_VAR, lookup_paths
from the_loop.errors import LoopError, UsageError

DEFAULT_DIR = ".the-loop"


def register(sub: Any) -> None:
    p = sub.add_parser(
        "init", help="write a cli-config.yaml, example policies with tests, an example hook",
    )
    p.add_argument("dir", metavar="DIR", nargs="?", default=DEFAULT_DIR,
                   help="the folder to write, created if missing (default: ./.the-loop/, "
                        "where the config lookup finds it)")
    p.set_defaults(func=cmd_init)


def cmd_init(args: argparse.Namespace) -> int:
    from the_loop.scaffold import FILES

    if getattr(args, "config", None):
        raise UsageError("init writes DIR/cli-config.yaml and takes no --config: name the "
                         "folder instead, e.g. `the-loop init ops/loop` (then pass --config "
                         "ops/loop/cli-config.yaml to the other commands, as init prints)")
    folder = Path(args.dir).expanduser()
    present = [name for name in FILES if (folder / name).exists()]
    if present:
        raise LoopError(
            f"{folder}: not written, it already holds {', '.join(present)}; init never "
            "overwrites a file: pass another DIR, or move those away"
        )
    try:
        for name, text in FILES.items():
            path = folder / name
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("x", encoding="utf-8") as fh:
                fh.write(text)
    except OSError as exc:
        raise LoopError(f"{folder}: cannot write: {exc.strerror} ({exc.filename})") from None
    config = (folder / "cli-config.yaml").absolute()
    rules = sum(1 for n in FILES if n.startswith("policies/") and n.count("/") == 1)
    print(f"wrote {folder}/: cli-config.yaml, policies/ ({rules} rules, each with a test "
          "case in policies/tests/), hooks/example.py")
    found = config in {p.absolute() for p in lookup_paths()} and not os.environ.get(ENV_VAR)
    flag = "" if found else f" --config {shlex.quote(str(config))}"  # pasted into a shell
    if not found:
        print(f"(the lookup does not find {config} from here: the commands below pass "
              f"--config; or set ${ENV_VAR})")
    print("next:")
    for command, what in (
        (f"the-loop{flag} policy check", "compile every rule; list them per point"),
        (f"the-loop{flag} policy test --coverage --min-coverage 100",
         f"run the cases in {folder / 'policies' / 'tests'}; fail unless every rule is "
         "matched by one"),
        (f"the-loop{flag} hooks", "what is declared"),
        (f"echo '{{\"labels\": [\"do-not-automate\"], \"work_item\": {{\"ref\": "
         f"\"local:acme/app#7\"}}}}' | the-loop{flag} hooks run work_item_start --context - "
         "--explain", "a dry run, rule by rule"),
    ):
        print(f"  {command}\n      {what}")
    print(f"then edit {folder / 'policies'}/*.yaml and add a case to "
          f"{folder / 'policies' / 'tests'}/ for each rule (the policy guide, "
          "docs/policy-guide.md in the-loop's repository, has every key and function)")
    return 0
