"""The engine: the catalog of points, the executor protocol and base class, and the chain."""
