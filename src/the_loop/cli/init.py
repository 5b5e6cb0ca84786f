"""`the-loop init [DIR]`: write a working starting point where the config lookup finds it."""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
from pathlib import Path
from typing import Any

from the_loop.config import ENV_VAR, lookup_paths
from the_loop.errors import LoopError, UsageError

DEFAULT_DIR = ".the-loop"


def rule_count(files: dict[str, str]) -> int:
    """How many rules the rule files among `files` (`policies/*.yaml`) hold (it said how
    many files: "4 rules" for five)."""
    import yaml

    return sum(len((yaml.safe_load(text) or {}).get("rules") or [])
               for name, text in files.items()
               if name.startswith("policies/") and name.count("/") == 1)


def register(sub: Any) -> None:
    p = sub.add_parser(
        "init", help="write a cli-config.yaml, example policies with tests, an example hook",
    )
    p.add_argument("dir", metavar="DIR", nargs="?", default=DEFAULT_DIR,
                   help="the folder to write, created if missing (default: ./.the-loop/, "
                        "where the config lookup finds it)")
    p.set_defaults(func=cmd_init)


def write_all(folder: Path, files: dict[str, str]) -> None:
    """Write every file, or none: each goes to a temporary name beside it, and only when all
    are written are they renamed into place. On any failure (a full disk, a read-only
    folder) what this call made is removed, folders included, and `LoopError` names the
    file and the reason (issue 20, item 12: a full disk left half a config behind)."""
    made: list[Path] = []  # folders this call created, outermost first
    temporaries: dict[str, Path] = {}
    renamed: list[Path] = []
    name = ""
    try:
        for name, text in files.items():
            _make_folders((folder / name).parent, made)
            temporaries[name] = _temporary(folder / name, text)
        for name, tmp in temporaries.items():
            tmp.rename(folder / name)
            renamed.append(folder / name)
    except OSError as exc:
        for path in [*temporaries.values(), *renamed]:
            path.unlink(missing_ok=True)
        for made_folder in reversed(made):
            with contextlib.suppress(OSError):
                made_folder.rmdir()
        raise LoopError(f"{folder}: cannot write {name}: {exc.strerror or exc}; nothing was "
                        "written: free some space, or pass a DIR you may write to") from None


def _make_folders(path: Path, made: list[Path]) -> None:
    """Create `path` and its missing parents, adding each one created to `made`."""
    for missing in [p for p in (path, *path.parents) if not p.exists()][::-1]:
        missing.mkdir()
        made.append(missing)


def _temporary(path: Path, text: str) -> Path:
    """`text` written to a new hidden file beside `path` (removed again if that fails)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


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
    write_all(folder, FILES)
    config = (folder / "cli-config.yaml").absolute()
    rules = rule_count(FILES)
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
    print("note: this config runs its harness (the demo agent) as your own user, so an agent "
          "is not isolated from the loop; before declaring a real one, read \"What the "
          "operator must do: isolate the harness\" in docs/security.md")
    return 0
