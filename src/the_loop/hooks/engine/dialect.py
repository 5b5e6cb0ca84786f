"""A tolerant reader for the params a hook server receives: other loops' names mapped to ours.

A server must keep answering when a caller speaks a newer or different dialect of the same
protocol (the open-source the-loop, GitHub MadaraUchiha-314/the-loop, or a newer version of
this one). `read_params(point, params)` builds the point's context from what it knows:

- keys this catalog does not know, in `params` and inside a work-item record, are ignored
  and returned as dotted names (`instance`, `work_item.extra`) for the server's own log;
- names with the same meaning under another name map to ours (`ALIASES` per point,
  `RECORD_ALIASES` inside a work item); our name wins when both are sent (and the other
  name is reported as ignored only when its value differs: our own client sends both);
- a `kind` of `""` (the other loop's "not known") means our default for that field;
- the work item's `kind` comes from `work_item_complete`'s top-level `kind` when the record
  does not say (the other loop puts it there);
- a field we do know with a value of the wrong type is still an error (`ValueError` naming
  it), so a caller's bug is never silently read as a default.

Facts that exist only in the other loop (`instance`, `effort`, `harness_args`, …) are catalog
facts too (`sent_by: other-loop`), read under their own names and types.

A fact the caller did not send is listed in the context's `unknown_facts` (dotted for a
work-item record's field: `work_item.fork`; the record's name when the whole record is
absent), together with any the caller itself lists there; it reads as its default, and a
policy rule that reads it fails instead of deciding on that default. A pull request's own
facts (`base`, `head`, `head_repository`, `fork`, `draft`) are known for a record that says
its `kind` is `issue` (a ticket has none), never for one that does not say.

`wire_params(ctx)` is the other direction, what our `url:` client sends: every field under
our name and, for each name in `ALIASES`, under theirs too (`command` beside `control`,
`harness_session_id` beside `session_id`; each work item's `provider` beside `tracker`), so a
hook written for the other loop reads what its own loop would send it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from the_loop.hooks.engine.points import (
    PULL_REQUEST_FIELDS,
    SPECS,
    WORK_ITEM_FIELDS,
    WORK_ITEM_TYPES,
    Context,
    FieldSpec,
    WorkItem,
    check_value,
)

#: Per point: the other loop's field name → ours (same meaning, same type).
ALIASES: dict[str, dict[str, str]] = {
    "session_spawned": {"harness_session_id": "session_id"},
    "input_received": {"command": "control"},
}
#: Inside a work-item record (`work_item`, `endpoint`): their name → ours.
RECORD_ALIASES: dict[str, str] = {"provider": "tracker"}
#: Fields whose empty string means "not known": read as our default.
EMPTY_MEANS_DEFAULT = frozenset({"kind"})

_FIELDS = {point: {f.name: f for f in spec.fields} for point, spec in SPECS.items()}
_SIMPLE: dict[str, type] = {"str": str, "bool": bool, "int": int}
#: Per point: each fact (but `unknown_facts`) → the keys that send it (ours, and aliases).
_SENT_AS: dict[str, dict[str, tuple[str, ...]]] = {
    point: {f.name: (f.name, *(k for k, v in ALIASES.get(point, {}).items() if v == f.name))
            for f in spec.facts if f.name != "unknown_facts"}
    for point, spec in SPECS.items()
}
#: Per point: (fact, the keys that send it, whether it is a work-item record), for `unsent`.
_PLAN: dict[str, tuple[tuple[str, tuple[str, ...], bool], ...]] = {
    point: tuple((name, keys, _FIELDS[point][name].type == "WorkItem")
                 for name, keys in sent_as.items())
    for point, sent_as in _SENT_AS.items()
}
#: The record fields `_record_unsent` tests by name (tracker, also sent as provider, and
#: kind, also said by work_item_complete's own kind, are tested apart).
_RECORD_PLAIN = tuple(f for f in WORK_ITEM_FIELDS if f not in ("tracker", "kind"))
_TICKET_PLAIN = tuple(f for f in _RECORD_PLAIN if f not in PULL_REQUEST_FIELDS)
_RECORD_TYPES: dict[str, type] = {name: _SIMPLE[WORK_ITEM_TYPES[name]]
                                  for name in WORK_ITEM_FIELDS}
#: Per point: the scalar fields a value of the right type is taken for as it is (not one
#: another name maps onto this point's fields, not one whose "" means the default).
_PLAIN_FIELDS: dict[str, dict[str, type]] = {
    point: {name: _SIMPLE[f.type] for name, f in fs.items()
            if f.type in _SIMPLE and name not in EMPTY_MEANS_DEFAULT
            and name not in ALIASES.get(point, {})}
    for point, fs in _FIELDS.items()
}
#: Per point: the list-of-strings and work-item fields read by their own name (no alias).
_LIST_FIELDS = {point: frozenset(name for name, f in fs.items() if f.type == "list[str]"
                                 and name not in ALIASES.get(point, {}))
                for point, fs in _FIELDS.items()}
_RECORD_FIELDS = {point: frozenset(name for name, f in fs.items() if f.type == "WorkItem"
                                   and name not in ALIASES.get(point, {}))
                  for point, fs in _FIELDS.items()}


def read_params(point: str, params: Any) -> tuple[Context, list[str]]:
    """The point's context from `params`, and the keys ignored (dotted, sorted).

    Raises `ValueError` naming a known field whose value has the wrong type.
    """
    if not isinstance(params, dict):
        raise ValueError(f"the context must be a JSON object, got {_json_type(params)}")
    fields = _FIELDS[point]
    aliases = ALIASES.get(point, {})
    simple, lists, records = _PLAIN_FIELDS[point], _LIST_FIELDS[point], _RECORD_FIELDS[point]
    ignored: list[str] = []
    kwargs: dict[str, Any] = {}
    for raw_key, value in params.items():
        if simple.get(raw_key) is type(value):  # our name, the right scalar type
            kwargs[raw_key] = value
        elif raw_key in lists and type(value) is list and all(type(v) is str for v in value):
            kwargs[raw_key] = list(value)  # our name, a list of strings
        elif raw_key in records:  # our name, a work-item record: mapped and checked there
            kwargs[raw_key] = _typed(point, fields[raw_key], raw_key, value, ignored)
        else:  # another name, an unknown key, a "" kind or a wrong type
            key = str(raw_key)
            fs = _field_for(fields, aliases, key, value, params, ignored)
            if fs is not None:
                value = _typed(point, fs, key, value, ignored)
                if value is not _DEFAULT:
                    kwargs[fs.name] = value
    if point == "work_item_complete":
        _take_their_kind(params, kwargs, ignored)
    ctx = SPECS[point].context(**kwargs)
    ctx.unknown_facts = unsent(point, params, kwargs.get("unknown_facts", ()))
    return ctx, sorted(ignored)


#: What `_typed` answers for a value read as its field's default: the field is not passed.
_DEFAULT = object()


def _field_for(fields: dict[str, FieldSpec], aliases: dict[str, str], key: str, value: Any,
               params: dict[str, Any], ignored: list[str]) -> FieldSpec | None:
    """The field `key` sends, under our name or another (`aliases`); None when it sends none
    (not this point's, or another name beside ours), with `key` added to `ignored` unless
    it is another name sending the same value as ours (our own client sends both)."""
    name = aliases.get(key, key)
    fs = fields.get(name)
    if fs is None or (name != key and name in params):
        if fs is None or params[name] != value:
            ignored.append(key)
        return None
    return fs


def _typed(point: str, fs: FieldSpec, key: str, value: Any, ignored: list[str]) -> Any:
    """`value`, sent as `key`, read as field `fs`: a work-item record in our names, `_DEFAULT`
    for a "" that means the default; else checked (`ValueError` naming the wrong type)."""
    want = _SIMPLE.get(fs.type)
    if want is not None and type(value) is want:  # the common case, checked inline
        return _DEFAULT if value == "" and fs.name in EMPTY_MEANS_DEFAULT else value
    if fs.type == "WorkItem":
        value = _record(value, ignored, prefix=key)
        if isinstance(value, WorkItem):
            return value
    return check_value(fs, value, where=f"{point}.{key}")


def _take_their_kind(params: dict[str, Any], kwargs: dict[str, Any],
                     ignored: list[str]) -> None:
    """work_item_complete's top-level `kind` (where the other loop says it) as the work
    item's, when the record does not say; the key is then read, not ignored."""
    their_kind = params.get("kind")
    if isinstance(their_kind, str) and their_kind:
        item = kwargs.get("work_item", WorkItem())
        raw = params.get("work_item")
        if not (isinstance(raw, dict) and raw.get("kind")):
            kwargs["work_item"] = dataclasses.replace(item, kind=their_kind)
        ignored.remove("kind")


def unsent(point: str, params: dict[str, Any], listed: Any = ()) -> list[str]:
    """The facts of `point` that `params` does not send (dotted inside a work-item record),
    with those the caller lists itself in `listed`, sorted."""
    out = set(listed)
    for name, keys, record in _PLAN[point]:
        for key in keys:
            if key in params:
                if record and type(params[key]) is dict:
                    _record_unsent(name, params[key], point, params, out)
                break
        else:
            out.add(name)
    return sorted(out)


def _record_unsent(name: str, record: dict[str, Any], point: str, params: dict[str, Any],
                   out: set[str]) -> None:
    """Add to `out` the fields `record` does not send, as `name.field`. A ticket (`kind:
    issue`, said) has no pull-request facts to send; work_item_complete's own `kind` says
    the kind too."""
    kind = record.get("kind") or (params.get("kind") if point == "work_item_complete" else "")
    for field in _RECORD_PLAIN if kind != "issue" else _TICKET_PLAIN:
        if field not in record:
            out.add(f"{name}.{field}")
    if "tracker" not in record and "provider" not in record:
        out.add(f"{name}.tracker")
    if "kind" not in record and not kind:
        out.add(f"{name}.kind")


def wire_params(ctx: Context) -> dict[str, Any]:
    """The `params` our client sends for `ctx`: every field (`Context.to_params`, whose
    work items carry `provider` beside `tracker`) and, per `ALIASES`, the other loop's name
    for a field beside ours, with the same value."""
    params = ctx.to_params()
    for theirs, ours in ALIASES.get(ctx.POINT, {}).items():
        params.setdefault(theirs, params[ours])
    return params


def _record(value: Any, ignored: list[str], *, prefix: str) -> Any:
    """A work-item record in our names, built when every type is right; else the mapped
    object, for `check_value` to name the wrong type. Unknown keys are recorded, as
    `<prefix>.<key>`."""
    if not isinstance(value, dict):
        return value  # the type check names it
    for key, item in value.items():  # the common case: our names, right types, a kind
        if _RECORD_TYPES.get(key) is not type(item):
            break
    else:
        if value.get("kind") != "":
            return _work_item(value)
    out: dict[str, Any] = {}
    typed = True
    for raw_key, item in value.items():
        key = str(raw_key)
        name = RECORD_ALIASES.get(key, key)
        if name not in _RECORD_TYPES or (name != key and name in value):
            if name == key or value[name] != item:  # our own client sends both, the same
                ignored.append(f"{prefix}.{key}")
            continue
        if name in EMPTY_MEANS_DEFAULT and item == "":
            continue
        typed = typed and type(item) is _RECORD_TYPES[name]
        out[name] = item
    return _work_item(out) if typed else out


_WORK_ITEM_DEFAULTS = dict(WorkItem().__dict__)
_DEFAULT_ITEM = WorkItem()


def _work_item(fields: dict[str, Any]) -> WorkItem:
    """`WorkItem(**fields)` for fields already checked (names and types): the frozen
    dataclass's `__init__` sets each field through `object.__setattr__`, which costs a
    served call more than the rest of reading the record."""
    values = {**_WORK_ITEM_DEFAULTS, **fields}
    if values == _WORK_ITEM_DEFAULTS:
        return _DEFAULT_ITEM  # frozen: one shared empty record is safe
    item: WorkItem = object.__new__(WorkItem)
    object.__setattr__(item, "__dict__", values)
    return item


def _json_type(value: Any) -> str:
    names = {list: "an array", str: "a string", bool: "a boolean", int: "a number",
             float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)
