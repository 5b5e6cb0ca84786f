"""A safe YAML loader for operator files: YAML 1.2 booleans, no duplicate keys, bounded input.

PyYAML follows YAML 1.1, where a bare `on:` key is the boolean True and `enabled: yes` is
True. Our files document `on:` as a key, so only `true`/`false` are booleans here; `yes`,
`no`, `on` and `off` stay strings (and a bool-typed key given `yes` fails with a clear
message instead of guessing). A key given twice in one mapping — for example `on:` and
`"on":` — is an error, not "the last one wins".

Bounded (issue 11 rule 6): a file is at most `MAX_BYTES`, must be UTF-8 text, and its aliases
may add at most `ALIAS_BUDGET` nodes to the document once expanded (a 600-byte
"billion laughs" file would otherwise expand to 10^9 nodes the moment anything walks it); the
check counts each node once, so it is linear in the file. An integer has at most
`MAX_INT_DIGITS` digits. Each breach is a `yaml.YAMLError` with the line and column, so every
caller's existing "not valid YAML at line L, column C: …" message covers it.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from pathlib import Path
from typing import Any

import yaml

from the_loop.errors import quote

#: The largest operator YAML file read (cli-config.yaml, a policy or graph file).
MAX_BYTES = 8 * 1024 * 1024
#: How many nodes aliases (`*name`, `<<: *name`) may add to a document, in total.
ALIAS_BUDGET = 10_000
#: The most digits an integer may have (far beyond any port, timeout or count).
MAX_INT_DIGITS = 100


class DuplicateKeyError(yaml.constructor.ConstructorError):
    """A mapping gave the same key twice."""


class TooLargeError(yaml.YAMLError):
    """The input is past a bound: file size, alias expansion, digits of an integer."""

    def __init__(self, problem: str, mark: Any = None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.problem_mark = mark


class UnreadableError(OSError):
    """The file is too large, or not UTF-8 text: an `OSError`, so every caller's "cannot
    read" message covers it (`strerror` is the sentence)."""

    def __init__(self, message: str) -> None:
        super().__init__(errno.EINVAL, message)


# libyaml's parser when PyYAML was built with it (about 10x faster on a 1,000-rule file);
# the constructor and resolver stay the Python SafeConstructor and Resolver either way.
_Base: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class OperatorLoader(_Base):  # type: ignore[misc]
    """A safe loader with YAML 1.2 booleans, duplicate-key detection and input bounds."""

    def get_single_data(self) -> Any:
        node = self.get_single_node()
        if node is None:
            return None
        if getattr(self, "may_alias", True):
            _check_aliases(node)
        return self.construct_document(node)

    def construct_yaml_int(self, node: Any) -> int:
        digits = len(str(node.value).lstrip("+-").replace("_", ""))
        if digits > MAX_INT_DIGITS:
            raise TooLargeError(
                f"an integer of {digits} digits; at most {MAX_INT_DIGITS} (quote it if it "
                "is meant as text)", node.start_mark,
            )
        value: int = yaml.constructor.SafeConstructor.construct_yaml_int(self, node)
        return value

    def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            # Only keys written in this mapping count: a key brought in by a `<<:` merge may be
            # overridden by one written here, as YAML intends, so check before flattening.
            seen: dict[Any, Any] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=deep)
                try:
                    hash(key)
                except TypeError:
                    continue
                if key in seen:
                    raise DuplicateKeyError(
                        "while constructing a mapping", node.start_mark,
                        f"found the key {quote(key)} twice", key_node.start_mark,
                    )
                seen[key] = True
        mapping: dict[Any, Any] = yaml.constructor.SafeConstructor.construct_mapping(
            self, node, deep=deep
        )
        return mapping


OperatorLoader.add_constructor("tag:yaml.org,2002:int", OperatorLoader.construct_yaml_int)


def _check_aliases(root: Any) -> None:
    """Refuse a document whose aliases add more than `ALIAS_BUDGET` nodes once expanded.

    The composed graph shares one node per anchor; its expanded size is computed bottom-up
    with each node's size remembered, so the check is linear in the number of distinct
    nodes however large the expansion would be.
    """
    sizes: dict[int, int] = {}
    distinct = 0
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if key in sizes and not done:
            continue
        children = _children(node)
        if not done:
            sizes[key] = 0  # visiting: a cycle back to here counts as 1 (never expanded)
            distinct += 1
            stack.append((node, True))
            stack.extend((c, False) for c in children if id(c) not in sizes)
            continue
        total = 1 + sum(sizes.get(id(c), 0) or 1 for c in children)
        sizes[key] = total
        if total - distinct > ALIAS_BUDGET:
            raise TooLargeError(
                f"aliases expand this document past {ALIAS_BUDGET} extra nodes (a "
                "\"billion laughs\" file?); write the values out, or anchor less",
                getattr(node, "start_mark", None),
            )


def _children(node: Any) -> list[Any]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


# Rebuild the implicit resolvers so only true/false (any case) resolve to bool.
OperatorLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
OperatorLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool",
    re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
    list("tTfF"),
)


def load(text: str) -> Any:
    """Parse operator YAML; raises `yaml.YAMLError` (with marks) on bad input."""
    if len(text) > MAX_BYTES:
        raise TooLargeError(f"{len(text)} characters; at most {MAX_BYTES}")
    # OperatorLoader derives from SafeLoader: no arbitrary object construction.
    loader = OperatorLoader(text)
    loader.may_alias = "*" in text  # no "*" anywhere: no alias, nothing to expand
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


#: What a FIFO, socket or device is called wherever a regular file was expected.
NOT_REGULAR = "not a regular file (a FIFO, socket or device)"


def read_bytes(path: Path, limit: int = MAX_BYTES) -> bytes:
    """A regular file's bytes, at most `limit`; raises `OSError` (`UnreadableError` for a
    FIFO, socket or device, or a file past `limit`).

    The file is opened without blocking and its kind checked on the open descriptor before
    anything is read: a FIFO would block the open (or the read) until some writer came, and
    a device like /dev/zero never ends (issue 20, item 9).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as fh:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
        if not stat.S_ISREG(mode):
            raise UnreadableError(f"{NOT_REGULAR}; name a regular file")
        data = fh.read(limit + 1)
    if len(data) > limit:
        size = f"{limit // (1024 * 1024)} MiB" if limit >= 1024 * 1024 else f"{limit} bytes"
        raise UnreadableError(
            f"larger than {size}; an operator file is far smaller (is this the right file?)")
    return data


def read_text(path: Path) -> str:
    """The file as text; raises `OSError` (`UnreadableError` for a file too large, not
    regular (`read_bytes`), or not UTF-8, with the offset of the first bad byte)."""
    return decoded(read_bytes(path))


def decoded(data: bytes) -> str:
    """`data` as UTF-8 text; raises `UnreadableError` naming the first bad byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnreadableError(
            f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); save it "
            "as UTF-8, or name the right file"
        ) from None


def load_file(path: Path) -> Any:
    """`load(read_text(path))`: raises `OSError` (unreadable) or `yaml.YAMLError` (invalid)."""
    return load(read_text(path))


def describe_error(exc: yaml.YAMLError) -> str:
    """'at line L, column C: problem' for a YAML error (the problem cut to a readable size)."""
    if isinstance(exc, yaml.reader.ReaderError):  # a character YAML refuses, by offset
        where = f"at offset {exc.position}: "
        char = exc.character
        code = ord(char) if isinstance(char, str) and len(char) == 1 else char
        if isinstance(code, int):
            return f"{where}unacceptable character #x{code:04x}: {exc.reason}"
        return where + str(exc.reason)
    mark = getattr(exc, "problem_mark", None)
    where = f"at line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
    problem = getattr(exc, "problem", None) or str(exc)
    text = " ".join(str(problem).split())
    return where + (text if len(text) <= 300 else text[:300] + "…")
