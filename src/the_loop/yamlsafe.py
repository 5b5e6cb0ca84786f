"""A safe YAML loader for operator files: YAML 1.2 booleans and no silent duplicate keys.

PyYAML follows YAML 1.1, where a bare `on:` key is the boolean True and `enabled: yes` is
True. Our files document `on:` as a key, so only `true`/`false` are booleans here; `yes`,
`no`, `on` and `off` stay strings (and a bool-typed key given `yes` fails with a clear
message instead of guessing). A key given twice in one mapping — for example `on:` and
`"on":` — is an error, not "the last one wins".
"""

from __future__ import annotations

import re
from typing import Any

import yaml


class DuplicateKeyError(yaml.constructor.ConstructorError):
    """A mapping gave the same key twice."""


# libyaml's parser when PyYAML was built with it (about 10x faster on a 1,000-rule file);
# the constructor and resolver stay the Python SafeConstructor and Resolver either way.
_Base: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class OperatorLoader(_Base):  # type: ignore[misc]
    """A safe loader with YAML 1.2 booleans and duplicate-key detection."""

    def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            # Only keys written in this mapping count: a key brought in by a `<<:` merge may be
            # overridden by one written here, as YAML intends, so check before flattening.
            seen: dict[Any, Any] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=deep)
                try:
                    hash(key)
                except TypeError:
                    continue
                if key in seen:
                    raise DuplicateKeyError(
                        "while constructing a mapping", node.start_mark,
                        f"found the key {key!r} twice", key_node.start_mark,
                    )
                seen[key] = True
        mapping: dict[Any, Any] = yaml.constructor.SafeConstructor.construct_mapping(
            self, node, deep=deep
        )
        return mapping


# Rebuild the implicit resolvers so only true/false (any case) resolve to bool.
OperatorLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
OperatorLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool",
    re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
    list("tTfF"),
)


def load(text: str) -> Any:
    """Parse operator YAML; raises `yaml.YAMLError` (with marks) on bad input."""
    # OperatorLoader derives from SafeLoader: no arbitrary object construction.
    return yaml.load(text, Loader=OperatorLoader)


def describe_error(exc: yaml.YAMLError) -> str:
    """'at line L, column C: problem' for a YAML error."""
    mark = getattr(exc, "problem_mark", None)
    where = f"at line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
    problem = getattr(exc, "problem", None) or str(exc)
    return where + str(problem)
