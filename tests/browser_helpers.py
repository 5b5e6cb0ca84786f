"""Chromium (THE_LOOP_TEST_CHROMIUM) launched headless by playwright, the same way everywhere."""

from __future__ import annotations

#: What every browser test passes to Chromium: headless, no sandbox (CI runs as root), and
#: nothing that reaches off the machine (updates, sync, background fetches).
CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)
