"""Channels the loop tells about phases and closures: a JSONL file, or an HTTP webhook.

A channel that fails is recorded (`channel.failed`) and never stops the loop.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from typing import Any

from the_loop.events import EventLog
from the_loop.runtime.settings import ChannelSpec


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


class Channels:
    def __init__(self, specs: list[ChannelSpec], log: EventLog) -> None:
        self.specs = specs
        self.log = log

    @property
    def calls_out(self) -> bool:
        """Whether publishing waits on another machine (a webhook; a file is appended to
        here): a visit settles its writes first (runtime/steps.py)."""
        return any(spec.kind != "file" for spec in self.specs)

    def publish(self, message: dict[str, Any]) -> int:
        """Send to every channel; returns how many succeeded."""
        ok = 0
        for spec in self.specs:
            try:
                if spec.kind == "file":
                    line = (json.dumps(message, ensure_ascii=False) + "\n").encode("utf-8")
                    os.makedirs(os.path.dirname(spec.target) or ".", exist_ok=True)
                    fd = os.open(spec.target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                    try:
                        os.write(fd, line)
                    finally:
                        os.close(fd)
                else:
                    self._post(spec, message)
                ok += 1
            except Exception as exc:  # a channel never stops the loop
                self.log.emit("channel.failed", channel=_name(spec), error=_describe(exc),
                              message=message.get("type", ""))
        return ok

    def _post(self, spec: ChannelSpec, message: dict[str, Any]) -> None:
        headers = {"Content-Type": "application/json"}
        if spec.token_env:
            token = os.environ.get(spec.token_env, "")
            if not token:
                raise RuntimeError(f"${spec.token_env} is not set; nothing sent")
            headers["Authorization"] = f"Bearer {token}"
        req = urllib.request.Request(spec.target, data=json.dumps(message).encode(),
                                     headers=headers, method="POST")
        with _OPENER.open(req, timeout=5) as resp:
            resp.read(65536)


def _name(spec: ChannelSpec) -> str:
    return f"{spec.kind}:{spec.target}"


def _describe(exc: Exception) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code}"
    if isinstance(exc, urllib.error.URLError):
        return f"cannot reach: {exc.reason}"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__
