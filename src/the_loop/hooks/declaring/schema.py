"""The JSON Schema of cli-config.yaml's `hooks` section, derived from the loader's description."""

from __future__ import annotations

from typing import Any

from the_loop.hooks.declaring.declaration import HOOKS


def hooks_section_schema() -> dict[str, Any]:
    """The schema of the `hooks:` value alone (a list of entries, or empty)."""
    return HOOKS.json_schema()


def hooks_schema() -> dict[str, Any]:
    """A draft 2020-12 schema for a cli-config.yaml whose `hooks` an editor can check."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://the-loop.dev/schemas/cli-config-hooks.json",
        "title": "the-loop cli-config.yaml: hooks",
        "type": "object",
        "properties": {"hooks": hooks_section_schema()},
    }
