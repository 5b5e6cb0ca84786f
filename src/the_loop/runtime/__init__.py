"""The delivery runtime: tracker, workspaces, harness sessions, phase graph, channels, daemons.

It depends on the hooks engine and owns the seven call sites; the engine never imports it.
"""
