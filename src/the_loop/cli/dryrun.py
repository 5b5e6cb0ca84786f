"""Dry runs for `hooks run` and `policy eval`: a point's context from --context and --facts (a
work item filled from its ref as the loop fills it), one chain run in memory, and its result
printed for a person (long values cut unless --full) or as JSON."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from the_loop import yamlsafe
from the_loop.errors import UsageError
from the_loop.hooks.engine.chain import Chain, Outcome
from the_loop.hooks.engine.points import (
    POINTS,
    SPECS,
    WORK_ITEM_FIELDS,
    WORK_ITEM_TYPES,
    Context,
    WorkItem,
    context_from_json,
    context_to_json,
    unknown_point_message,
)
from the_loop.hooks.serving.wire import NotUnicode, read_json
from the_loop.util import closest, shown_value


def add_input_args(p: argparse.ArgumentParser) -> None:
    """--context, --facts, --explain and --full, as `hooks run` and `policy eval` take them."""
    p.add_argument("--context", metavar="FILE|-",
                   help="a JSON object of the point's fields, from FILE or stdin (-); fields "
                        "left out take their defaults (default: an empty object); a work_item "
                        "with a ref gets its number, owner, repository… from the ref")
    p.add_argument("--facts", nargs="+", action="extend", default=[], metavar="NAME=VALUE",
                   help="fields set on top of --context, e.g. actor=alice labels=loop,urgent "
                        "work_item=github:acme/app#12 work_item.kind=pull-request")
    p.add_argument("--explain", action="store_true",
                   help="per policy rule: matched, not matched (the false part of `when` and "
                   "the fields it read) or failed; audit rules with what they would set")
    p.add_argument("--full", action="store_true",
                   help="show long values whole (by default their first and last characters "
                        "and their length)")


def read_context_arg(source: str | None) -> Any:
    """The JSON object --context names (FILE or -), or {} without one; `UsageError` if bad."""
    if source is None:
        return {}
    try:
        text = _context_text(source)
    except OSError as exc:
        raise UsageError(f"--context {source}: cannot read: {exc.strerror}") from None
    try:
        return read_json(text) if text.strip() else {}
    except NotUnicode as exc:
        raise UsageError(f"--context {source}: the context {exc}") from None
    except json.JSONDecodeError as exc:
        raise UsageError(
            f"--context {source}: not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None


def _context_text(source: str) -> str:
    """The --context file (a regular file) or standard input, bounded and UTF-8."""
    if source != "-":
        return yamlsafe.read_text(Path(source))
    limit = yamlsafe.MAX_BYTES
    data = sys.stdin.buffer.read(limit + 1)
    if len(data) > limit:
        raise yamlsafe.UnreadableError(f"more than {limit // (1024 * 1024)} MiB on standard "
                                       "input; a context is far smaller (is this the right "
                                       "input?)")
    return yamlsafe.decoded(data)


def parse_facts(point: str, facts: list[str]) -> dict[str, Any]:
    """`NAME=VALUE` strings as the point's fields, each typed as its field is."""
    spec = SPECS[point]
    names = [f.name for f in spec.fields]
    out: dict[str, Any] = {}
    for item in facts:
        name, sep, text = item.partition("=")
        head, dot, sub = name.partition(".")
        if not sep or not head:
            raise UsageError(f"--facts {item}: expected NAME=VALUE, e.g. actor=alice or "
                             "work_item.kind=pull-request")
        fs = spec.field(head)
        if fs is None:
            hint = closest(head, names)
            raise UsageError(f"--facts {name}: {point} has no field {head!r}"
                             + (f" (did you mean {hint!r}?)" if hint else "")
                             + f"; valid fields: {', '.join(names)}")
        if not dot:
            out[head] = _typed(name, fs.type, text)
            continue
        if fs.type != "WorkItem" or sub not in WORK_ITEM_FIELDS:
            near = closest(sub, WORK_ITEM_FIELDS) if fs.type == "WorkItem" else None
            known = ((f" (did you mean {near!r}?)" if near else "")
                     + f"; a work item's fields: {', '.join(WORK_ITEM_FIELDS)}"
                     if fs.type == "WorkItem" else f" ({head} is a {fs.type})")
            raise UsageError(f"--facts {name}: {head} has no field {sub!r}{known}")
        record = out.get(head)
        record = {"ref": record} if isinstance(record, str) else dict(record or {})
        record[sub] = _typed(name, WORK_ITEM_TYPES[sub], text)
        out[head] = record
    return out


def _typed(name: str, type_name: str, text: str) -> Any:
    if type_name == "str":
        return text
    if type_name == "bool" and text in ("true", "false"):
        return text == "true"
    if type_name == "int" and text.strip().lstrip("-").isdigit():
        return int(text)
    if type_name == "list[str]":
        if text.lstrip().startswith("["):
            try:
                value = json.loads(text)
            except ValueError:
                value = None
            if isinstance(value, list) and all(isinstance(v, str) for v in value):
                return value
        else:
            return [part.strip() for part in text.split(",") if part.strip()]
    if type_name == "WorkItem":
        return text  # a ref; its record is filled from it
    want = {"bool": "true or false", "int": "a whole number",
            "list[str]": "a JSON list of strings, or words separated by commas"}[type_name]
    raise UsageError(f"--facts {name}={text}: expected {want}")


def filled(data: dict[str, Any]) -> dict[str, Any]:
    """The context with its work item completed from its ref, as the loop builds it (the
    fields given win); a work item may be given as a bare ref."""
    item = data.get("work_item")
    if isinstance(item, str):
        item = {"ref": item}
    if not isinstance(item, dict) or not isinstance(item.get("ref"), str) or not item["ref"]:
        return data
    kind, ident = item.get("kind", ""), item.get("id", "")
    base = WorkItem.from_ref(item["ref"], kind=kind if isinstance(kind, str) else "",
                             id=ident if isinstance(ident, str) else "").to_json()
    return {**data, "work_item": {**base, **item}}


def dry_input(args: argparse.Namespace, point: str) -> tuple[Any, str]:
    """What --context and --facts give at `point`, and the option to blame for a bad field
    (`UsageError` for an unknown point, an unreadable context or a bad fact)."""
    if point not in POINTS:
        raise UsageError(unknown_point_message(point))
    data = read_context_arg(args.context)
    facts = parse_facts(point, args.facts)
    where = "--facts" if facts and args.context is None else "--context"
    if isinstance(data, dict):
        given = data.get("work_item")
        given = {"ref": given} if isinstance(given, str) else given
        extra = facts.get("work_item")
        if isinstance(given, dict) and isinstance(extra, dict):
            facts["work_item"] = {**given, **extra}
        data = filled({**data, **facts})
    return data, where


def dry_context(point: str, given: tuple[Any, str], loop: str = "") -> Context:
    """The context `dry_input` read, with the loop's name as the loop would pass it."""
    data, where = given
    if isinstance(data, dict) and "loop" not in data and loop:
        data = {**data, "loop": loop}
    try:
        return context_from_json(point, data)
    except ValueError as exc:
        raise UsageError(f"{where}: {exc}") from None


def print_outcome(args: argparse.Namespace, chain: Chain, outcome: Outcome,
                  explained: dict[str, Any], *, heading: str = "final decisions:") -> None:
    """A person's view of one run: a line per hook, the rules explained, the final decisions
    (under `heading`)."""
    point, full = outcome.point, args.full
    names = chain.names(point)
    print(f"{point}: {len(names)} hook(s) run: {', '.join(names) or 'none'}")
    if not names and chain.links:  # say why, or a hook that skips the point looks broken
        runs = [f"{link.name} runs at "
                f"{', '.join(p for p in POINTS if p in link.points) or 'no point'}"
                for link in chain.links]
        print(f"  none handles {point}: {'; '.join(runs)}")
    for step in outcome.steps:
        line = f"  {step.hook:<16} {step.status:<9} {step.ms:8.3f} ms"
        if step.changed:
            line += "  changed " + ", ".join(
                f"{k}={shown_value(v, full=full)}" for k, v in step.changed.items())
        if step.error:
            line += f"  error: {step.error}"
        if step.dropped:
            line += f"  ignored: {', '.join(step.dropped)}"
        rules = step.detail.get("rules")
        if rules:
            line += f"  rules: {', '.join(rules)}"
        audit = step.detail.get("audit")
        if audit:
            line += f"  audit rules matched: {', '.join(audit)}"
        print(line)
        for rule in explained.get(step.hook, ()):
            print(f"      {rule.text(full)}")
    print(heading)
    print_decisions(outcome.context, full=full)


def print_decisions(ctx: Context, *, full: bool, indent: str = "  ") -> None:
    """One line per decision of `ctx`'s point: `name = value`."""
    final = context_to_json(ctx)
    for d in SPECS[ctx.POINT].decisions:
        print(f"{indent}{d.name} = {shown_value(final[d.name], full=full)}")


def explained_of(args: argparse.Namespace, chain: Chain, outcome: Outcome) -> dict[str, Any]:
    """Per policy hook of the run, its rules explained (empty without --explain)."""
    if not args.explain:
        return {}
    from the_loop.hooks.policy.explain import explain_chain

    return explain_chain(chain, outcome)


__all__ = ["add_input_args", "dry_context", "dry_input", "explained_of", "filled", "parse_facts",
           "print_decisions", "print_outcome", "read_context_arg"]
