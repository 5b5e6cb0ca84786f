"""A policy folder's files: which are read, which entries are refused, one loader, the revision.

The rule files are the `*.yaml`/`*.yml` files directly in the folder; the data files the same
in its `data/` subfolder (`tests/` is never read at load). Every entry is checked before
anything is read (`unsafe_entries`: no links out of the folder, no FIFOs or devices), every
file is read through one bounded YAML loader (`load_yaml`), and `revision(folder)` hashes the
rule and data files, so two loads of the same files have the same revision.
"""

from __future__ import annotations

import hashlib
import stat
from pathlib import Path
from typing import Any

import yaml

from the_loop import yamlsafe
from the_loop.hooks.policy.yamlhints import yaml_hint

__all__ = [
    "DATA_FOLDER", "data_files", "load_yaml", "revision", "rule_files", "unsafe_entries",
]

#: The subfolder of a policy folder that holds its data files.
DATA_FOLDER = "data"


def rule_files(folder: Path) -> list[Path]:
    """The `*.yaml`/`*.yml` files directly in `folder` (never `tests/`), in name order."""
    return sorted(
        (p for p in folder.iterdir()
         if p.is_file() and p.suffix in (".yaml", ".yml") and not p.name.startswith(".")),
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
    errors: list[str] = []
    real_folder = (within or folder).resolve()
    for entry in sorted(folder.iterdir(), key=lambda p: p.name):
        try:
            st = entry.stat()
        except FileNotFoundError:
            errors.append(f"{entry}: a dangling symlink (its target does not exist); remove it "
                          "or point it at a rule file in this folder")
            continue
        except OSError as exc:
            errors.append(f"{entry}: cannot be read: {exc.strerror}")
            continue
        if stat.S_ISDIR(st.st_mode):
            if entry.name == DATA_FOLDER and within is None and entry.is_symlink():
                errors.append(f"{entry}: a link to {entry.resolve()}; a policy's data files "
                              "live in its own data/ folder: copy them in instead of linking")
            continue
        if not stat.S_ISREG(st.st_mode):
            errors.append(f"{entry}: {yamlsafe.NOT_REGULAR}; a policy folder holds only "
                          "rule files; remove it")
            continue
        if entry.suffix in (".yaml", ".yml") and not entry.name.startswith("."):
            real = entry.resolve()
            if not real.is_relative_to(real_folder):
                errors.append(f"{entry}: resolves to {real}, outside the policy folder; copy "
                              "the rule file into the folder instead of linking to it")
    return errors


class Unloadable(Exception):
    """A policy file that cannot be read or is not valid YAML; the message says which."""


def load_yaml(path: Path) -> Any:
    """The YAML document in `path`, read with the operator loader's bounds and YAML 1.2
    booleans; raises `Unloadable` with a one-line message (line, column, a known slip's fix)."""
    where = str(path)
    try:
        return yamlsafe.load_file(path)
    except OSError as exc:
        raise Unloadable(f"{where}: cannot read: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise Unloadable(f"{where}: not valid YAML {yamlsafe.describe_error(exc)}"
                         f"{_hint_for(path, exc)}") from None


def _hint_for(path: Path, exc: yaml.YAMLError) -> str:
    """The rule and the fix when the line YAML refused shows a known slip, else ''."""
    mark = getattr(exc, "problem_mark", None)
    if mark is None:
        return ""
    try:
        return yaml_hint(yamlsafe.read_text(path), mark.line)
    except OSError:
        return ""


def revision(folder: Path) -> str:
    """A hash of the folder's rule files and data files, names and bytes (sha256, hex).

    Equal revisions mean the same rules and data were read; any edit, added or removed rule
    or data file changes it. A file that cannot be read counts as its error text, so the
    revision of a folder that does not load still changes when it is mended.
    """
    digest = hashlib.sha256()
    for label, files in (("rules", rule_files(folder) if folder.is_dir() else []),
                         ("data", data_files(folder) if folder.is_dir() else [])):
        for path in files:
            try:
                body = yamlsafe.read_bytes(path)
            except OSError as exc:
                body = f"unreadable: {exc}".encode()
            for part in (label.encode(), path.name.encode(), body):
                digest.update(len(part).to_bytes(8, "big"))
                digest.update(part)
    return digest.hexdigest()
