"""Shell-style patterns (`fnmatch`'s syntax) as RE2: `glob_match` in time linear in the subject.

`fnmatch.fnmatchcase` compiles a pattern with Python's backtracking `re` and caches up to
32,768 of them: a pattern taken from a fact (the reversed-arguments slip,
`glob_match(prompt, 'acme/*')`) cost 23 s and 430 MB on 800 KB of text (issue 20, item 7).
`to_re2` writes the same pattern for RE2 instead, which matches in linear time and refuses a
pattern past its memory budget. The meaning is fnmatch's own: a `[…]` set is read by
`fnmatch.translate` itself and only re-spelt (each member as `\\x{…}`, so nothing in it is
RE2 syntax); `*` matches any run of characters, newlines and `/` included; `?` one.
"""

from __future__ import annotations

import fnmatch
import re

#: fnmatch's translation of one set: `(?s:X)\Z` (or `\z`), X a class, `(?!)` or `.`.
_TRANSLATED = re.compile(r"\(\?s:(.*)\)\\[Zz]", re.DOTALL)
_NOTHING = r"[^\x{0}-\x{10ffff}]"  # a class no character is in (fnmatch's empty range)


def to_re2(pattern: str) -> str:
    """RE2 syntax that matches (fully, with `fullmatch`) what `pattern` matches."""
    out = ["(?s)"]
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        i += 1
        if c == "*":
            if out[-1] != ".*":  # a run of stars is one star
                out.append(".*")
        elif c == "?":
            out.append(".")
        elif c == "[" and (end := _set_end(pattern, i)) >= 0:
            out.append(_set(pattern[i - 1:end + 1]))
            i = end + 1
        else:
            out.append(_char(c))
    return "".join(out)


def _set_end(pattern: str, i: int) -> int:
    """Where the set opened just before `i` closes (fnmatch's rule), or -1: an unclosed
    `[` is a literal. A `]` first (after an optional `!`) is a member, not the end."""
    j, n = i, len(pattern)
    if j < n and pattern[j] == "!":
        j += 1
    if j < n and pattern[j] == "]":
        j += 1
    while j < n and pattern[j] != "]":
        j += 1
    return j if j < n else -1


def _set(segment: str) -> str:
    """One `[…]` set as an RE2 class, read from `fnmatch.translate`'s own class."""
    found = _TRANSLATED.fullmatch(fnmatch.translate(segment))
    translated = found.group(1) if found else "(?!)"
    if translated == "(?!)":
        return _NOTHING
    if translated == ".":
        return "."
    body = translated[1:-1]  # `[…]`: `^` for negation, `\\X` escapes, `a-b` ranges
    negate = body.startswith("^")
    tokens: list[str | None] = []  # a member, or None for a range's `-`
    k = 1 if negate else 0
    while k < len(body):
        if body[k] == "\\":
            tokens.append(body[k + 1])
            k += 2
        else:
            tokens.append(None if body[k] == "-" else body[k])
            k += 1
    parts: list[str] = []
    k = 0
    while k < len(tokens):
        first = tokens[k]
        if first is not None and k + 2 < len(tokens) and tokens[k + 1] is None:
            last = tokens[k + 2]
            parts.append(f"{_char(first)}-{_char(last or '-')}")
            k += 3
        else:
            parts.append(_char(first or "-"))
            k += 1
    return "[" + ("^" if negate else "") + "".join(parts) + "]"


def _char(c: str) -> str:
    """One literal character in RE2 syntax, inside or outside a class."""
    return c if c.isascii() and c.isalnum() else f"\\x{{{ord(c):x}}}"
