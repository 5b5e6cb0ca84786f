"""The `hooks:` declaration: parsed and checked strictly, its JSON Schema, the chain built."""
