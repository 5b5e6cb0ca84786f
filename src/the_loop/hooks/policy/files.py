"""A policy folder's files: which are read, which entries are refused, one snapshot, the revision.

The rule files are the `*.yaml`/`*.yml` files directly in the folder; the data files the same
in its `data/` subfolder (`tests/` is never read at load). `snapshot(folder)` resolves the
folder once, lists it once, checks every entry before anything is read (no links out of the
folder, no FIFOs or devices), reads every rule and data file into memory and hashes what it
read: the loader compiles that snapshot and names its revision, so a deploy that swaps the
folder (a symlink flipped to another release) while it is read gives one folder or the
other, never a mix, and never a revision of files that were not the ones compiled
(issue 31, item 7). `load_yaml` is the one bounded YAML loader every file goes through.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from the_loop import yamlsafe
from the_loop.hooks.policy.yamlhints import yaml_hint

__all__ = [
    "DATA_FOLDER", "Read", "Snapshot", "data_files", "load_yaml", "revision", "rule_files",
    "snapshot", "unsafe_entries",
]

#: The subfolder of a policy folder that holds its data files.
DATA_FOLDER = "data"
_SUFFIXES = (".yaml", ".yml")


def _is_rule_name(name: str) -> bool:
    return name.endswith(_SUFFIXES) and not name.startswith(".")


def rule_files(folder: Path) -> list[Path]:
    """The `*.yaml`/`*.yml` files directly in `folder` (never `tests/`), in name order."""
    return sorted(
        (p for p in folder.iterdir() if p.is_file() and _is_rule_name(p.name)),
        key=lambda p: p.name,
    )


def data_files(folder: Path) -> list[Path]:
    """The data files of the policy folder `folder` (`data/*.yaml`), in name order."""
    data = folder / DATA_FOLDER
    return rule_files(data) if data.is_dir() and not data.is_symlink() else []


def unsafe_entries(folder: Path, *, within: Path | None = None) -> list[str]:
    """One message per entry of `folder` the loader refuses (issue 11 rule 6).

    A dangling symlink (a rule file that silently vanished), a FIFO, socket or device
    (reading one can block forever), and a rule file whose real path is outside the folder
    (`within`, default `folder`: a link into someone else's files) each fail the load;
    `policy check` lists them too. A `data` entry that is a link is refused as well: the data
    a policy decides on lives in its own folder.
    """
    return _listing(folder, folder, (within or folder).resolve(), data_link=within is None)[0]


def _listing(folder: Path, shown: Path, real_folder: Path, *, data_link: bool
             ) -> tuple[list[str], list[str]]:
    """One look at `folder` (named `shown` in messages): the messages for the entries the
    loader refuses, and the names of its rule files (in name order)."""
    errors: list[str] = []
    names: list[str] = []
    for name in sorted(os.listdir(folder)):
        at = folder / name
        entry = shown / name
        try:
            st = at.stat()
        except FileNotFoundError:
            if at.is_symlink():
                errors.append(f"{entry}: a dangling symlink (its target does not exist); "
                              "remove it or point it at a rule file in this folder")
            continue  # gone since the folder was listed: a later look sees what replaced it
        except OSError as exc:
            errors.append(f"{entry}: cannot be read: {exc.strerror}")
            continue
        if stat.S_ISDIR(st.st_mode):
            if name == DATA_FOLDER and data_link and at.is_symlink():
                errors.append(f"{entry}: a link to {at.resolve()}; a policy's data files "
                              "live in its own data/ folder: copy them in instead of linking")
            continue
        if not stat.S_ISREG(st.st_mode):
            errors.append(f"{entry}: {yamlsafe.NOT_REGULAR}; a policy folder holds only "
                          "rule files; remove it")
            continue
        if _is_rule_name(name):
            real = at.resolve()
            if not real.is_relative_to(real_folder):
                errors.append(f"{entry}: resolves to {real}, outside the policy folder; copy "
                              "the rule file into the folder instead of linking to it")
            else:
                names.append(name)
    return errors, names


@dataclass(frozen=True)
class Read:
    """One file as the snapshot read it: its path and bytes, or why it could not be read."""

    path: Path
    body: bytes = b""
    error: str = ""


@dataclass(frozen=True)
class Snapshot:
    """A policy folder read once: `folder` as named, `real` the folder it resolved to at the
    look (every file was read there; messages and `Read.path` name it under `folder`), the
    refused entries (`errors`), the rule and data files with their bytes, and the revision
    of exactly those bytes."""

    folder: Path
    real: Path
    errors: list[str] = field(default_factory=list)
    rules: list[Read] = field(default_factory=list)
    data: list[Read] | None = None  # None: no data/ folder
    revision: str = ""


def snapshot(folder: Path) -> Snapshot:
    """Read the policy folder `folder` once (see the module doc); raises `OSError` when the
    folder itself cannot be resolved or listed (it vanished mid-deploy, say)."""
    real = Path(os.path.realpath(folder, strict=True))
    errors, names = _listing(real, folder, real, data_link=True)
    rules = [_read(real / name, folder / name) for name in names]
    data: list[Read] | None = None
    sub = real / DATA_FOLDER
    if sub.is_dir() and not sub.is_symlink():
        found, data_names = _listing(sub, folder / DATA_FOLDER, real, data_link=False)
        errors += found
        data = [_read(sub / name, folder / DATA_FOLDER / name) for name in data_names]
    return Snapshot(folder, real, errors, rules, data, _digest(rules, data or []))


def _read(path: Path, shown: Path | None = None) -> Read:
    """`path` read (named `shown`, default `path`, in the `Read` and its messages)."""
    shown = path if shown is None else shown
    try:
        return Read(shown, yamlsafe.read_bytes(path))
    except OSError as exc:
        return Read(shown, error=f"{shown}: cannot read: {exc.strerror or exc}")


def _digest(rules: list[Read], data: list[Read]) -> str:
    digest = hashlib.sha256()
    for label, files in (("rules", rules), ("data", data)):
        for read in files:
            body = read.body if not read.error else f"unreadable: {read.error}".encode(
                "utf-8", "surrogateescape")
            # a name need not be UTF-8: its bytes on disk are what is hashed
            for part in (label.encode(), os.fsencode(read.path.name), body):
                digest.update(len(part).to_bytes(8, "big"))
                digest.update(part)
    return digest.hexdigest()


class Unloadable(Exception):
    """A policy file that cannot be read or is not valid YAML; the message says which."""


def load_yaml(path: Path | Read) -> Any:
    """The YAML document in `path` (or in the bytes a snapshot read), read with the operator
    loader's bounds and YAML 1.2 booleans; raises `Unloadable` with a one-line message
    (line, column, a known slip's fix)."""
    read = path if isinstance(path, Read) else _read(path)
    where = str(read.path)
    if read.error:
        raise Unloadable(read.error)
    try:
        text = yamlsafe.decoded(read.body)
    except OSError as exc:
        raise Unloadable(f"{where}: cannot read: {exc.strerror or exc}") from None
    try:
        return yamlsafe.load(text)
    except yaml.YAMLError as exc:
        raise Unloadable(f"{where}: not valid YAML {yamlsafe.describe_error(exc)}"
                         f"{_hint_for(text, exc)}") from None


def _hint_for(text: str, exc: yaml.YAMLError) -> str:
    """The rule and the fix when the line YAML refused shows a known slip, else ''."""
    mark = getattr(exc, "problem_mark", None)
    return "" if mark is None else yaml_hint(text, mark.line)


def revision(folder: Path) -> str:
    """A hash of the folder's rule files and data files, names and bytes (sha256, hex).

    Equal revisions mean the same rules and data were read; any edit, added or removed rule
    or data file changes it. A file that cannot be read counts as its error text, so the
    revision of a folder that does not load still changes when it is mended; a folder that
    cannot be listed at all has the revision of an empty one.
    """
    try:
        return snapshot(folder).revision
    except OSError:
        return _digest([], [])
