"""The JSON Schema of the whole cli-config.yaml, derived from each section's description.

`the-loop hooks schema` prints it. The `hooks` section comes from
`hooks.declaring.declaration.HOOKS`, the runtime keys from `runtime.settings.SETTINGS`, the
top-level key list from `config.TOP_LEVEL_KEYS`; nothing here restates a rule.
"""

from __future__ import annotations

from typing import Any

from the_loop.config import TOP_LEVEL_KEYS
from the_loop.configspec import Field, Mapping, Str
from the_loop.hooks.declaring.declaration import HOOKS
from the_loop.runtime.settings import SETTINGS

#: cli-config.yaml as a whole: every top-level key, each section's own description.
CONFIG = Mapping(fields={
    "loop": Field(Str()),
    "stateDir": Field(Str()),
    "hooks": Field(HOOKS),
    **SETTINGS.fields,
})


def config_schema() -> dict[str, Any]:
    """A draft 2020-12 schema an editor checks cli-config.yaml with, as the loader would."""
    schema = CONFIG.json_schema()
    for key, prop in schema["properties"].items():
        prop.setdefault("description", TOP_LEVEL_KEYS[key])
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://the-loop.dev/schemas/cli-config.json",
        "title": "the-loop cli-config.yaml",
        **schema,
    }
