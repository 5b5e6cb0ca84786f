"""The JSON Schema of cli-config.yaml's `hooks` section, derived from the loader's tables."""

from __future__ import annotations

from typing import Any

from the_loop.hooks.declaration import (
    COMMON_KEYS,
    DEFAULT_TIMEOUT,
    FORBIDDEN_HEADERS,
    KIND_KEYS,
    KINDS,
    MAX_TIMEOUT,
)
from the_loop.hooks.points import POINTS

_POINT = {"enum": list(POINTS), "description": "a lifecycle point (the-loop hooks points)"}

# https:// to any host, or http:// to a loopback host only; never credentials before the host.
_LOOPBACK = r"(([a-z0-9-]+\.)*localhost|localhost\.localdomain|127(\.[0-9]{1,3}){3}|\[::1\])"
_URL = rf"^(https://[^/?#@\s]+|http://{_LOOPBACK}(:[0-9]+)?)([/?#]\S*)?$"


def _any_case(word: str) -> str:
    """A regex matching `word` in any letter case (JSON Schema regexes have no flags)."""
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else c for c in word)


_FORBIDDEN = "^(" + "|".join(_any_case(h) for h in sorted(FORBIDDEN_HEADERS)) + ")$"

_PROPS: dict[str, Any] = {
    "name": {"type": "string", "pattern": "^[a-z][a-z0-9-]*$", "description": "unique name"},
    "module": {"type": "string", "pattern": r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$",
               "description": "an installed dotted module defining a LifecycleHooks subclass"},
    "path": {"type": "string", "pattern": "\\S",
             "description": "a .py file: absolute, ~/…, or relative to this file's folder"},
    "url": {"type": "string", "pattern": _URL,
            "description": "https://…, or http:// to a loopback host"},
    "policy": {"type": "string", "pattern": "\\S",
               "description": "a folder of YAML rule files, relative to this file's folder"},
    "executor": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$",
                 "description": "the class to use when the module defines several"},
    "with": {"type": ["object", "null"], "description": "constructor keyword arguments",
             "propertyNames": {"pattern": "^[A-Za-z_][A-Za-z0-9_]*$"}},
    "tokenEnv": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$",
                 "description": "NAME of the environment variable holding the bearer token"},
    "headers": {
        "type": ["object", "null"], "description": "non-secret request headers",
        "propertyNames": {
            "pattern": "^[!#$%&'*+.^_`|~0-9A-Za-z-]+$",
            "not": {"pattern": _FORBIDDEN},
        },
        "additionalProperties": {"type": "string", "pattern": "^[^\\r\\n]*$"},
    },
    "timeoutSeconds": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_TIMEOUT,
                       "default": DEFAULT_TIMEOUT},
    "on": {"oneOf": [_POINT, {"type": "array", "items": _POINT, "minItems": 1,
                              "uniqueItems": True}]},
    "required": {"type": "boolean", "default": False},
    "enabled": {"type": "boolean", "default": True},
}


def _variant(kind: str) -> dict[str, Any]:
    keys = [*COMMON_KEYS, kind, *KIND_KEYS[kind]]
    return {
        "type": "object",
        "required": ["name", kind],
        "properties": {k: _PROPS[k] for k in keys},
        "additionalProperties": False,
    }


def hooks_schema() -> dict[str, Any]:
    """A draft 2020-12 schema for a cli-config.yaml whose `hooks` an editor can check."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://the-loop.dev/schemas/cli-config-hooks.json",
        "title": "the-loop cli-config.yaml: hooks",
        "type": "object",
        "properties": {
            "hooks": {
                "type": ["array", "null"],
                "items": {"oneOf": [_variant(k) for k in KINDS]},
            },
        },
    }
