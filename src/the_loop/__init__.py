"""the-loop: a delivery loop for agent work items with a typed lifecycle hooks engine."""

__version__ = "0.1.0"
