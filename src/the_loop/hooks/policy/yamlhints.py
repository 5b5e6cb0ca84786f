"""`yaml_hint(text, line)`: the fix for a rule file YAML refused, read off the offending line.

Three slips turn a condition into a YAML error before any JMESPath is read: double quotes
inside a double-quoted `when` (`when: "contains(labels, "x")"` ends the YAML string early),
a single-quoted `when` holding JMESPath's single-quoted strings (`when: 'contains(labels,
'x')'`), and an unquoted condition starting with `!` (`when: !contains(labels, 'x')` — a
leading `!` is a YAML tag). The loader's message ("did not find expected key", "could not
determine a constructor for the tag") names none of them; this module looks at the line the
error points to and says which rule it is in and how to write it.

Indentation is the other slip YAML words by its own machinery ("mapping values are not
allowed here", "did not find expected '-' indicator", "found character that cannot start any
token"): a key indented one space too far or too short, a tab. `_indent_hint` reads the
indentation the lines above open (each enclosing key's and list item's column) and names
the key the line should line up with; any other error at least names the rule it is in
(the nearest rule above, when the line is in none).
"""

from __future__ import annotations

import re

# `key: "…"` whose double-quoted value holds more double quotes (flow or block style).
_INNER_QUOTES = re.compile(r'(?P<key>[A-Za-z_][\w-]*):\s*"(?P<value>.*)"')
# `key: '…'` whose single-quoted value holds more single quotes (JMESPath strings inside).
_INNER_SINGLE = re.compile(r"(?P<key>[A-Za-z_][\w-]*):\s*'(?P<value>.*)'")
# `key: !…` — a value that YAML reads as a tag (`!!type` is YAML's own and left alone).
_TAG = re.compile(r"(?P<key>[A-Za-z_][\w-]*):\s*(?P<value>![^!\s][^#]*)(?:#.*)?$")
_ITEM = re.compile(r"^(?P<indent>\s*)-\s")
_NAME = re.compile(r"""^\s*(?:-\s+)?name:\s*["']?(?P<name>[^"'\s#]+)""")
_FLOW_NAME = re.compile(r"""[{,]\s*name:\s*["']?(?P<name>[^"',}\s]+)""")
#: A line longer than this gets no hint (the error still names file, line and column): the
#: patterns above stay cheap on anything a person writes, and on nothing else.
MAX_HINT_LINE = 2000


def yaml_hint(text: str, line: int) -> str:
    """' (in rule 'r' → when). The fix…' for a YAML error at 0-based `line`, or ''."""
    lines = text.splitlines()
    if not 0 <= line < len(lines):
        return ""
    src = lines[line]
    if len(src) > MAX_HINT_LINE:
        return ""
    found = (_tag_hint(src) or _quote_hint(src) or _single_hint(src)
             or _indent_hint(lines, line))
    name = rule_at(lines, line) or _rule_above(lines, line)
    if found is None:
        return f" (in rule {name!r})" if name else ""
    key, fix = found
    where = f" (in rule {name!r} → {key})" if name else f" (at {key})"
    return f"{where}. {fix}"


def _quote_hint(src: str) -> tuple[str, str] | None:
    m = _INNER_QUOTES.search(src)
    if m is None or '"' not in m["value"]:
        return None
    key, value = m["key"], m["value"]
    if key == "when":
        single = value.replace('"', "'")
        return key, f'JMESPath strings take single quotes: when: "{single}"'
    return key, ('A double-quoted YAML string cannot hold a bare "; write \\" inside it, or '
                 f"quote the whole value with single quotes: {key}: '{value}'")


def _single_hint(src: str) -> tuple[str, str] | None:
    m = _INNER_SINGLE.search(src)
    if m is None or "'" not in m["value"] or '"' in m["value"]:
        return None
    key, value = m["key"], m["value"]
    return key, ("A single-quoted YAML string ends at the next ' (JMESPath strings inside "
                 f'need them): wrap the value in double quotes: {key}: "{value}"')


def _tag_hint(src: str) -> tuple[str, str] | None:
    m = _TAG.search(src)
    if m is None:
        return None
    key, value = m["key"], m["value"].rstrip()
    example = value if '"' not in value else "!contains(labels, 'x')"
    what = "the condition" if key == "when" else "the value"
    return key, (f"A value starting with ! is a YAML tag: quote {what}, e.g. "
                 f'{key}: "{example}"')


_KEY = re.compile(r"^(?P<indent>[ \t]*)(?:- +)*(?P<key>[A-Za-z_][\w-]*):(?:\s|$)")


def _indent_hint(lines: list[str], line: int) -> tuple[str, str] | None:
    """A tab, or a key at a column no line above opens: the key to line it up with."""
    src = lines[line]
    key_m = _KEY.match(src)
    key = key_m["key"] if key_m else "this line"
    if src[:len(src) - len(src.lstrip())].count("\t"):
        return key, "A tab indents this line: YAML indents with spaces only; use spaces"
    if key_m is None:
        return None
    at = len(key_m["indent"])
    opened = _columns_above(lines, line)
    if not opened or at in {col for col, _, _ in opened}:
        return None
    col, sibling, row = min(opened, key=lambda o: (abs(o[0] - at), o[2] != opened[0][2]))
    return key, (f"{key}: is indented {at} space(s), where {sibling}: on line {row + 1} is "
                 f"at {col}: YAML places a key by its indentation, so indent {key}: {col} "
                 f"spaces to line it up with {sibling}:")


def _columns_above(lines: list[str], line: int) -> list[tuple[int, str, int]]:
    """(column, key, 0-based line) of each key a line at `line` may line up with: the line
    above and each line enclosing it (nearest first); a list item gives its key's column
    and its dash's."""
    out: list[tuple[int, str, int]] = []
    limit = 1 << 30
    for i in range(line - 1, -1, -1):
        text = lines[i]
        if not text.strip() or text.lstrip().startswith("#"):
            continue
        m = _KEY.match(text)
        if m is None:
            continue
        dash = len(m["indent"])
        if dash >= limit:
            continue
        column = len(text) - len(text[dash:].lstrip("- ")) if text[dash:].startswith("-") \
            else dash
        out.append((column, m["key"], i))
        if column != dash:
            out.append((dash, m["key"], i))
        limit = dash
        if dash == 0:
            break
    return out


def _rule_above(lines: list[str], line: int) -> str:
    """The name of the nearest rule that starts above `line` ('' when none does)."""
    for i in range(min(line, len(lines) - 1), -1, -1):
        named = _NAME.match(lines[i])
        if named:
            return named["name"]
    return ""


def rule_at(lines: list[str], line: int) -> str:
    """The name of the rule whose list item holds `line` ('' when none can be read)."""
    flow = _FLOW_NAME.search(lines[line])
    if flow:
        return flow["name"]
    start, indent = -1, ""
    for i in range(line, -1, -1):
        m = _ITEM.match(lines[i])
        if m and (i == line or len(m["indent"]) < _indent(lines[line])):
            start, indent = i, m["indent"]
            break
    if start < 0:
        return ""
    for i in range(start, len(lines)):
        if i > start and (m := _ITEM.match(lines[i])) and len(m["indent"]) <= len(indent):
            break
        if i > start and lines[i].strip() and _indent(lines[i]) <= len(indent):
            break
        named = _NAME.match(lines[i])
        if named:
            return named["name"]
    return ""


def _indent(src: str) -> int:
    return len(src) - len(src.lstrip())
