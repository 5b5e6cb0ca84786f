"""A recorded context, decoded from the decision log, back into the typed context it was.

`rebuild(point, data)` is exact: a record with every field of the point, each of its catalog
type (lists of strings; work-item records with every field, `number` an int), becomes that
context directly — the record's own lists, values and key order, no copy of any text; any
other record goes through `context_from_json`, which fills defaults for missing fields and
raises `ValueError` naming a wrong one. Nothing is ever coerced.

This runs once per replayed point, so the check of a record's shape is generated per point
when the module loads (one straight-line function of plain `type(v) is T` tests over the
catalog's fields; `_source` writes it) rather than looped over the catalog for every record:
a session_spawn record then takes 31,000 instructions to rebuild instead of 44,000 (valgrind;
docs/performance.md). A record that fails the generated check is looked at again by
`_rebuild_checked`, the same rules written as a loop over the record (what `rebuild` was
before), which builds it directly or hands it to `context_from_json`.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter
from typing import Any, cast

from the_loop.hooks.engine.points import (
    POINTS,
    SPECS,
    WORK_ITEM_FIELDS,
    WORK_ITEM_TYPES,
    Context,
    WorkItem,
    context_from_json,
)

__all__ = ["rebuild"]

_PY = {"str": str, "bool": bool, "int": int, "list[str]": list, "WorkItem": dict}
#: point → field → the JSON type a field of that catalog type decodes to
_TYPES: dict[str, dict[str, type]] = {
    point: {f.name: _PY[f.type] for f in spec.fields} for point, spec in SPECS.items()
}
_ITEM_TYPES: dict[str, type] = {name: _PY[WORK_ITEM_TYPES[name]] for name in WORK_ITEM_FIELDS}
_new = object.__new__


def _source(name: str, types: dict[str, type], build: str) -> str:
    """A function `name(d)`: None unless `d` (a dict) has exactly the fields of `types`, each
    of its type — lists holding only strings, records valid for `item` —, else `build`."""
    n = len(types)
    values = ", ".join(f"v{i}" for i in range(n))
    lines = [
        f"def {name}(d):",
        f"    if len(d) != {n}:",
        "        return None",
        "    try:",
        f"        ({values},) = get(d)",
        "    except KeyError:",
        "        return None",
    ]
    checks = " or ".join(f"type(v{i}) is not {t.__name__}" for i, t in enumerate(types.values()))
    lines += [f"    if {checks}:", "        return None"]
    items: list[tuple[str, int]] = []
    for i, (key, t) in enumerate(types.items()):
        if t is list:
            lines += [f"    for s in v{i}:", "        if type(s) is not str:",
                      "            return None"]
        elif t is dict:
            lines += [f"    v{i} = item(v{i})", f"    if v{i} is None:", "        return None"]
            items.append((key, i))
    lines.append(build.format(items="".join(f"; f[{k!r}] = v{i}" for k, i in items)))
    return "\n".join(lines) + "\n"


def _compile(name: str, types: dict[str, type], build: str, **names: Any,
             ) -> Callable[[dict[str, Any]], Any]:
    namespace: dict[str, Any] = {"get": itemgetter(*types), **names}
    exec(compile(_source(name, types, build), f"<rebuild {name}>", "exec"), namespace)
    return cast(Callable[[dict[str, Any]], Any], namespace[name])


# A frozen record: filled once, here, never changed after (as WorkItem.from_json would).
_item = _compile("item", _ITEM_TYPES, "    w = new(WorkItem); w.__dict__.update(d); return w",
                 new=_new, WorkItem=WorkItem)
_FAST: dict[str, Callable[[dict[str, Any]], Context | None]] = {
    point: _compile(point, types, "    f = d.copy(){items}; c = new(cls); c.__dict__ = f; "
                    "return c", new=_new, cls=POINTS[point], item=_item)
    for point, types in _TYPES.items()
}


def rebuild(point: str, data: Any) -> Context:
    """The context a recorded point entered the chain with (see the module docstring)."""
    if type(data) is dict:
        ctx = _FAST[point](data)
        if ctx is not None:
            return ctx
    return _rebuild_checked(point, data)


def _rebuild_checked(point: str, data: Any) -> Context:
    """`rebuild`'s rules as a loop over the record: built directly, or `context_from_json`."""
    types = _TYPES[point]
    if type(data) is not dict or len(data) != len(types):
        return context_from_json(point, data)
    fields: dict[str, Any] = {}
    for key, value in data.items():
        want = types.get(key)
        if type(value) is not want:
            return context_from_json(point, data)
        if want is dict:
            item = _work_item(cast(dict[str, Any], value))
            if item is None:
                return context_from_json(point, data)
            fields[key] = item
        else:
            if want is list:
                for v in cast(list[Any], value):
                    if type(v) is not str:
                        return context_from_json(point, data)
            fields[key] = value
    ctx: Context = _new(POINTS[point])
    ctx.__dict__ = fields
    return ctx


def _work_item(data: dict[str, Any]) -> WorkItem | None:
    """A WorkItem from a record with exactly its fields, each of its type; else None."""
    if len(data) != len(_ITEM_TYPES):
        return None
    for key, value in data.items():
        if type(value) is not _ITEM_TYPES.get(key):
            return None
    item: WorkItem = _new(WorkItem)
    item.__dict__.update(data)
    return item
