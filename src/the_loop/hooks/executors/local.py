"""The `local` kind: a `LifecycleHooks` subclass from an installed module (`module:`) or a file
(`path:`), imported and constructed in this process; replay calls it.

Every error names the entry and the key to fix (`HooksConfigError`); whatever the hook's own
code raises while it is imported or constructed fails its entry, with where it was raised.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from the_loop.configspec import (
    IDENTIFIER_PATTERN,
    NON_EMPTY_PATTERN,
    Any_,
    DictOf,
    Field,
    Number,
    Str,
    got,
)
from the_loop.errors import HooksConfigError, quote
from the_loop.hooks.declaring.entry import HookEntry, entry_error
from the_loop.hooks.engine.executor import LifecycleHooks
from the_loop.hooks.engine.location import failure_line
from the_loop.hooks.executors.classcheck import problems
from the_loop.hooks.executors.kind import CALL, KeyDoc, Kind
from the_loop.interrupt import reraise_if_real

_IDENTIFIER = IDENTIFIER_PATTERN[1:-1]
MODULE_PATTERN = rf"^{_IDENTIFIER}(\.{_IDENTIFIER})*$"
#: `module:` and `executor:` (also checked for `hooks serve --module/--executor`).
MODULE_NAME = Str(
    pattern=MODULE_PATTERN, expected="a dotted module name like acme.hooks",
    hint=" (for a file, use path:)", shown=lambda v: quote(v) if isinstance(v, str) else got(v),
    description="an installed dotted module defining a LifecycleHooks subclass")
CLASS_NAME = Str(pattern=IDENTIFIER_PATTERN, expected="a class name in the module",
                 description="the class to use when the module defines several")
_WITH = DictOf(
    key=Str(pattern=IDENTIFIER_PATTERN, expected="a keyword argument name",
            mismatch=lambda k: f"{k!r} is not a valid keyword argument name"),
    value=Any_(), nullable=True, expected="a mapping of constructor keyword arguments",
    description="constructor keyword arguments",
)
#: How a `path:`/`module:` entry's keys are spelled where a fix names another key.
YAML_KEYS = {"path": "path:", "module": "module:", "executor": "executor:", "with": "with:"}


def construct(entry: HookEntry, names: Mapping[str, str] | None = None) -> LifecycleHooks:
    """Import and construct one entry's class; raises `HooksConfigError` naming entry and key.

    `names` spells the keys a fix refers to (default: as in cli-config.yaml); a caller that
    took the entry from elsewhere (command-line options, environment variables) passes its
    own, and builds its message from the error's `key` and `detail`.
    """
    names = names or YAML_KEYS
    module = _import(entry)
    cls = _pick_class(entry, module, names)
    wrong = problems(type(cls) if isinstance(cls, LifecycleHooks) else cls)
    if wrong:
        raise entry_error(entry, entry.declared_as, "; ".join(wrong))
    if isinstance(cls, LifecycleHooks):
        if entry.with_:
            raise entry_error(entry, "with", f"{entry.executor} is already an instance; "
                                             f"`{names['with'].rstrip(':')}` needs a class")
        return _narrowed(entry, cls)
    try:
        built: LifecycleHooks = cls(**entry.with_)
    except BaseException as exc:  # whatever a hook's constructor raises fails its entry
        reraise_if_real(exc)
        raise entry_error(entry, "with", f"constructing {cls.__name__}(**with) failed: "
                                         f"{failure_line(exc, cls)}", at_key=False) from None
    return _narrowed(entry, built)


def _narrowed(entry: HookEntry, executor: LifecycleHooks) -> LifecycleHooks:
    """`on` may narrow the points a class overrides; naming one it does not is an error."""
    defaults = type(executor).overridden_points()
    extra = [p for p in entry.on or () if p not in defaults]
    if extra:
        raise entry_error(entry, "on", f"{', '.join(extra)} not handled by "
                          f"{type(executor).__name__} (it overrides: "
                          f"{', '.join(defaults) or 'no point'}); `on` narrows the points a "
                          "class overrides, it cannot add one")
    return executor


def _import_installed(name: str) -> ModuleType:
    """Import an installed module, never one from the working directory.

    `python -m …` puts the working directory first on sys.path; a session working in a
    checkout must not be able to plant `acme_hooks.py` there and have it imported.
    """
    saved = sys.path[:]
    # Only the entry Python itself put first (the working directory for `-m` and `-c`);
    # a PYTHONPATH entry the operator chose stays, even when it names the same folder.
    if saved and (saved[0] in ("", ".") or os.path.abspath(saved[0]) == os.getcwd()):
        sys.path[:] = saved[1:]
    try:
        return importlib.import_module(name)
    finally:
        sys.path[:] = saved


def _import(entry: HookEntry) -> ModuleType:
    key = "module" if entry.declared_as == "module" else "path"
    try:
        if entry.declared_as == "module":
            return _import_installed(entry.resolved)
        path = Path(entry.resolved)
        if not path.is_file():
            raise entry_error(entry, "path", f"no file at {path} (relative paths resolve "
                                             "against the folder of cli-config.yaml)")
        mod_name = f"the_loop_hook_{entry.name.replace('-', '_')}"
        spec = importlib.util.spec_from_file_location(mod_name, path)
        if spec is None or spec.loader is None:
            raise entry_error(entry, "path", f"{path} is not a Python file")
        module = importlib.util.module_from_spec(spec)
        sys.modules[mod_name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(mod_name, None)
            raise
        return module
    except HooksConfigError:
        raise
    except BaseException as exc:  # whatever a hook module raises at import fails its entry
        reraise_if_real(exc)
        raise entry_error(entry, key, f"cannot import {entry.target!r}: "
                                      f"{failure_line(exc)}") from None


def _pick_class(entry: HookEntry, module: ModuleType, names: Mapping[str, str]) -> Any:
    if entry.executor:
        obj = getattr(module, entry.executor, None)
        if obj is None:
            raise entry_error(entry, "executor", f"{entry.target!r} has no attribute "
                                                 f"{entry.executor!r}")
        if isinstance(obj, LifecycleHooks) or (
            isinstance(obj, type) and issubclass(obj, LifecycleHooks)
        ):
            return obj
        raise entry_error(entry, "executor", f"{entry.executor!r} is not a LifecycleHooks "
                                             f"subclass (got {type(obj).__name__})")
    found = [
        obj for obj in vars(module).values()
        if isinstance(obj, type) and issubclass(obj, LifecycleHooks) and obj is not LifecycleHooks
    ]
    own = [c for c in found if c.__module__ == module.__name__] or found
    if not own:
        raise entry_error(entry, entry.declared_as, f"{entry.target!r} defines no LifecycleHooks "
                                             "subclass; subclass the_loop.sdk.hooks.LifecycleHooks")
    if len(own) > 1:
        listed = ", ".join(sorted(c.__name__ for c in own))
        raise entry_error(entry, "executor", f"{entry.target!r} defines several LifecycleHooks "
                                             f"subclasses ({listed}); name one with "
                                             f"{names['executor']}")
    return own[0]


def _class_points(executor: Any) -> tuple[str, ...]:
    return type(executor).overridden_points()  # type: ignore[no-any-return]


def _method(executor: Any, point: str) -> Any:
    return getattr(executor, point)


#: The most a local hook's `timeoutSeconds` may be (as for a url: entry).
MAX_TIMEOUT = 300.0
_TIMEOUT = Number(above=0, maximum=MAX_TIMEOUT,
                  expected=f"a number of seconds > 0 and ≤ {MAX_TIMEOUT:g}",
                  description="each call runs on a worker thread and counts as this hook's "
                              "failure after this long (default: none, in the loop's thread)")
_CLASS_KEYS = {"executor": Field(CLASS_NAME, default=""), "with": Field(_WITH, default=dict),
               "timeoutSeconds": Field(_TIMEOUT)}

KIND = Kind(
    name="local",
    keys={
        "module": {"module": Field(MODULE_NAME), **_CLASS_KEYS},
        "path": {"path": Field(Str(pattern=NON_EMPTY_PATTERN, expected="a non-empty string",
                                   description="a .py file: absolute, ~/…, or relative to this "
                                               "file's folder")), **_CLASS_KEYS},
    },
    paths=frozenset({"path"}),
    build=construct,
    classes=("the_loop.hooks.engine.executor.LifecycleHooks",),
    default_points=_class_points,
    handler=_method,
    replay=CALL,
    logged_as="local",
    about="a `LifecycleHooks` subclass, imported and run in the loop's own process",
    runs_at="every point its class overrides",
    docs={
        "module": KeyDoc("dotted module name", "—", "an installed module defining a "
                         "`LifecycleHooks` subclass, e.g. `acme_hooks.telemetry`"),
        "path": KeyDoc("file path", "—", "a `.py` file: absolute, `~/…`, or relative to the "
                       "config's folder, e.g. `hooks/prefix.py`"),
        "executor": KeyDoc("class name", "the only subclass", "which `LifecycleHooks` subclass "
                           "to use when the module defines several, e.g. `PrefixHooks`"),
        "with": KeyDoc("mapping", "`{}`", "keyword arguments for the class's constructor, e.g. "
                       '`{prefix: "ACME: "}`'),
        "timeoutSeconds": KeyDoc(f"number, > 0 and ≤ {MAX_TIMEOUT:g}", "none", "each call runs "
                                 "on a worker thread of its own and counts as that hook's "
                                 "failure after this long (see below); without it the hook "
                                 "runs in the loop's own thread, unbounded"),
    },
)

__all__ = ["CLASS_NAME", "KIND", "MODULE_NAME", "MODULE_PATTERN", "YAML_KEYS", "construct"]
