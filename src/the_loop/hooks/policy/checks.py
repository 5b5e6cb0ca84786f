"""Messages for expressions that fail the load: syntax, unknown functions, arity, unknown fields.

Each message names the expression (as the caller shows it) and the column, and suggests the
closest valid name. Used by `rules.py` for `when` and for `{{ }}` placeholders.
"""

from __future__ import annotations

import re

from the_loop.errors import ExpressionError
from the_loop.hooks.engine.points import SPECS, WORK_ITEM_FIELDS, WORK_ITEM_TYPES, closest
from the_loop.hooks.policy.functions import PolicyFunctions


def describe_compile_error(shown: str, text: str, exc: ExpressionError) -> str:
    """What is wrong with expression `text` and at which column, from its `ExpressionError`;
    a syntax error also names an unbalanced parenthesis or a lone `=` it finds."""
    said = _describe(shown, text, exc)
    if exc.reason in ("incomplete", "lexer", "syntax"):
        said += "".join(f". {hint}" for hint in syntax_hints(text))
    return said


def syntax_hints(text: str) -> list[str]:
    """The slips a syntax error usually comes from: `=` for `==` (with the fixed expression),
    a `(` never closed or a `)` that closes nothing (with the column)."""
    hints: list[str] = []
    opened: list[int] = []
    lone: list[int] = []
    for i, char in _code(text):
        if char == "(":
            opened.append(i)
        elif char == ")":
            if not opened:
                hints.append(f"The ')' at column {i + 1} closes no '('")
                break
            opened.pop()
        elif char == "=" and (i == 0 or text[i - 1] not in "=!<>") and text[i + 1:i + 2] != "=":
            lone.append(i)
    if lone:
        fixed = "".join("==" if i in lone else c for i, c in enumerate(text))
        where = ", ".join(str(i + 1) for i in lone)
        hints.insert(0, f"A single '=' (column {where}) is not an operator: JMESPath compares "
                        f"with '=='; write {fixed}")
    hints.extend(f"The '(' at column {i + 1} is never closed" for i in opened)
    return hints


def _code(text: str) -> list[tuple[int, str]]:
    """(index, character) of `text` outside its quoted strings, identifiers and literals."""
    out: list[tuple[int, str]] = []
    quote_char = ""
    escaped = False
    for i, char in enumerate(text):
        if quote_char:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote_char:
                quote_char = ""
        elif char in "'\"`":
            quote_char = char
        else:
            out.append((i, char))
    return out


def _describe(shown: str, text: str, exc: ExpressionError) -> str:
    if exc.reason == "empty":
        return f"{shown} is empty; write an expression or remove the key"
    if exc.reason == "incomplete":
        return f"{shown} is incomplete: it ends at column {exc.column} where more was expected"
    if exc.reason == "lexer":
        return f"syntax error in {shown} at column {exc.column}: {exc.detail}"
    if exc.reason in ("arity", "variadic-arity"):
        want = "?" if exc.expected is None else exc.expected
        got = "?" if exc.got is None else exc.got
        least = "at least " if exc.reason == "variadic-arity" else ""
        return (
            f"{shown} calls {exc.function}() with {got} argument(s) at column "
            f"{_column_of_call(text, exc.function)}; it takes {least}{want}"
        )
    if exc.reason == "unknown-function":
        m = re.search(r"function:?\s*([A-Za-z_][A-Za-z0-9_]*)", exc.detail)
        name = m.group(1) if m else "?"
        names = sorted(PolicyFunctions.FUNCTION_TABLE)  # JMESPath's built-ins and ours
        hint = closest(name, names)
        return (
            f"{shown} calls unknown function {name}() at column {_column_of_call(text, name)}"
            + (f"; did you mean {hint}()?" if hint else "")
            + f" Functions: {', '.join(names)}"
        )
    if exc.reason == "syntax" and exc.column:
        return f"syntax error in {shown} at column {exc.column}: {exc.detail}"
    if exc.reason == "bad-regex":
        return f"{shown} at column {exc.column}: {exc}"
    if exc.reason == "data":  # a read of the policy data it does not hold
        return f"{shown} {exc}"
    if exc.reason == "too-costly":
        return f"{shown} is refused: it {exc}"
    return f"{shown} does not compile: {exc}"


def _column_of_call(text: str, name: str) -> int:
    m = re.search(rf"\b{re.escape(name)}\s*\(", text) if name else None
    return m.start() + 1 if m else 1


#: Words that are JSON literals, and in JMESPath field names unless written `backquoted`.
JSON_WORDS = ("true", "false", "null")


def check_fields(
    paths: list[tuple[str, ...]], points: tuple[str, ...], text: str = ""
) -> list[str]:
    """One message per field chain that some of `points` does not have, with a suggestion.

    Given the expression's `text`, each message names the column where the chain is read.
    """
    out: list[str] = []
    for path in dict.fromkeys(p for p in paths if p):
        lacking: dict[str, tuple[str, list[str]]] = {}
        for point in points:
            found = _path_problem(path, point)
            if found is not None:
                lacking[point] = found
        if not lacking:
            continue
        what, valid = next(iter(lacking.values()))
        at = ", ".join(lacking)
        dotted = ".".join(path)
        col = _column_of_path(text, what.split("."))
        dotted_at = f"{dotted!r} at column {col}" if col else repr(dotted)
        if not valid:  # a field of a scalar (actor.name) or of a WorkItem field
            parent = what.rsplit(".", 1)[0]
            out.append(
                f"reads {dotted_at}, but {parent!r} has no fields at {at} (it is a "
                f"{_type_of(parent, next(iter(lacking)))}); read {parent!r} itself"
            )
            continue
        prefix, _, bad = what.rpartition(".")
        names = sorted({n for _, (_, v) in lacking.items() for n in v})
        hint = closest(bad, names)
        message = f"reads {dotted_at}, but the context at {at} has no field {what!r}"
        if f'"{bad}"' in text:
            message += (f'. "{bad}" in double quotes is a field name in JMESPath; a string '
                        f"takes single quotes: '{bad}'.")
        elif not prefix and bad in JSON_WORDS:
            message += (f". A bare {bad} is a field name in JMESPath; a JSON literal takes "
                        f"backquotes: `{bad}`.")
        elif hint:
            message += f"; did you mean {((prefix + '.') if prefix else '') + hint!r}?"
        else:
            message += "."
        if len(lacking) == 1:
            message += f" Valid: {', '.join(valid)}"
        message += " (see `the-loop hooks points`)."
        out.append(message)
    return out


def _column_of_path(text: str, names: list[str]) -> int:
    """1-based column where the field chain `names` is first read in `text`, or 0."""
    pattern = r"\s*\.\s*".join(rf'(?:{re.escape(n)}|"{re.escape(n)}")' for n in names)
    m = re.search(rf"(?<![A-Za-z0-9_.'`]){pattern}(?![A-Za-z0-9_])", text)
    return m.start() + 1 if m else 0


def _type_of(dotted: str, point: str) -> str:
    head, _, sub = dotted.partition(".")
    fs = SPECS[point].field(head)
    if fs is None:
        return "unknown"
    if sub:
        return WORK_ITEM_TYPES.get(sub, "unknown")
    return fs.type


def _path_problem(path: tuple[str, ...], point: str) -> tuple[str, list[str]] | None:
    """(the first missing field chain, the valid names at that level) or None when fine.

    The valid list is empty when the chain reads into a value that has no fields.
    """
    spec = SPECS[point]
    head = path[0]
    fs = spec.field(head)
    if fs is None:
        return head, [f.name for f in spec.fields]
    if len(path) == 1:
        return None
    if fs.type == "WorkItem":
        sub = path[1]
        if sub not in WORK_ITEM_FIELDS:
            return f"{head}.{sub}", list(WORK_ITEM_FIELDS)
        if len(path) > 2:
            return f"{head}.{sub}.{path[2]}", []
        return None
    return f"{head}.{path[1]}", []
