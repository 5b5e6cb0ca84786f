"""The demo's two code hooks: one run in-process by path, one served over JSON-RPC."""

from __future__ import annotations

import re

from the_loop.sdk.hooks import InputReceived, LifecycleHooks, SessionSpawn

STAMP_HOOK = '''"""The demo's local hook: declared by path in cli-config.yaml."""

from the_loop.sdk.hooks import LifecycleHooks, WaitingForInput


class Stamp(LifecycleHooks):
    def __init__(self, team: str = "acme") -> None:
        self.team = team

    def waiting_for_input(self, ctx: WaitingForInput) -> WaitingForInput | None:
        if ctx.kind != "question":
            return None
        ctx.question = f"[{self.team}] {ctx.question}"
        return ctx
'''

SECRET_RE = re.compile(r"(?i)(password|token|secret)\s*[=:]\s*\S+")


class Compliance(LifecycleHooks):
    """The demo's remote hook: served by HookServer on loopback, declared by url."""

    def session_spawn(self, ctx: SessionSpawn) -> SessionSpawn | None:
        ctx.prompt = ctx.prompt + "\n\n(compliance: keep customer data out of documents)"
        return ctx

    def input_received(self, ctx: InputReceived) -> InputReceived | None:
        redacted = SECRET_RE.sub(lambda m: f"{m.group(1)}=[redacted]", ctx.text)
        if redacted == ctx.text:
            return None
        ctx.text = redacted
        return ctx
