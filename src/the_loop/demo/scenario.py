"""`the-loop demo`: one work item from start to close on the embedded default, narrated.

A fresh folder gets a cli-config.yaml declaring the example policies, a local hook (by
path) and a remote hook (a HookServer on loopback, by url); the scripted agent works each
node and asks one question; the scripted reviewer answers and approves every gate.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sys
import time
import urllib.parse
from importlib import resources
from pathlib import Path
from typing import Any, TextIO

from the_loop.demo.hooks import STAMP_HOOK, Compliance
from the_loop.events import EventTail
from the_loop.runtime.poller import poll_once, reply, wait_sessions

TOKEN_ENV = "THE_LOOP_DEMO_TOKEN"
REVIEWER = "alice"
OUTSIDER = "mallory"
ANSWER = "Admins first, then everyone else. Test account: password=hunter2"

CONFIG = """\
# Written by `the-loop demo`. Run `the-loop --config {path} events` to read what happened.
loop: demo
stateDir: .the-loop
tracker: {{kind: local, repository: acme/app}}
harness: demo
harnesses:
  - name: demo
    command: [python3, -m, the_loop.demo.agent]
    model: demo-1
graph: builtin
channels:
  - {{kind: file, path: channel.jsonl}}
hooks:
  - name: house-rules
    policy: policies
    required: true
  - name: stamp
    path: hooks/stamp.py
    with: {{team: acme}}
  # The demo served this hook only while it ran. To serve it again, in another terminal:
  #   export {token_env}=any-value
  #   the-loop hooks serve --module the_loop.demo.hooks --executor Compliance \\
  #     --port {port} --token-env {token_env}
  - name: compliance
    url: {url}
    tokenEnv: {token_env}
    timeoutSeconds: 5
"""


def fresh_dir(base: Path) -> Path:
    """`base` if it is absent or empty, else base-2, base-3, …"""
    candidate, n = base, 1
    while candidate.exists() and any(candidate.iterdir()):
        n += 1
        candidate = base.with_name(f"{base.name}-{n}")
    candidate.mkdir(parents=True, exist_ok=True)
    return candidate


def write_folder(folder: Path, url: str) -> Path:
    config = folder / "cli-config.yaml"
    port = urllib.parse.urlsplit(url).port or 8765
    config.write_text(CONFIG.format(path=config, url=url, token_env=TOKEN_ENV, port=port),
                      encoding="utf-8")
    (folder / "hooks").mkdir(exist_ok=True)
    (folder / "hooks" / "stamp.py").write_text(STAMP_HOOK, encoding="utf-8")
    source = resources.files("the_loop.demo") / "policies"
    with resources.as_file(source) as src:
        shutil.copytree(src, folder / "policies", dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.py", "*.pyc"))
    return config


class Narrator:
    """Prints each lifecycle point as it fires (from any process) and each phase change."""

    def __init__(self, events: Path, out: TextIO) -> None:
        self.tail = EventTail(events)
        self.out = out
        self.points: list[str] = []

    def flush(self) -> None:
        for r in self.tail.new():
            self.show(r)

    def show(self, r: dict[str, Any]) -> None:
        event = r.get("event")
        if event == "lifecycle.point":
            self.points.append(str(r["point"]))
            print(f"  ● {r['point']:<19} {_about(r)}", file=self.out)
            quiet = []
            for step in r.get("steps", []):
                if step["status"] == "changed":
                    rules = f"  [rules: {', '.join(step['rules'])}]" if step.get("rules") else ""
                    print(f"      {step['hook']:<12} {_what(step)}{rules}", file=self.out)
                elif step["status"] == "failed":
                    print(f"      {step['hook']:<12} FAILED: {step['error']}", file=self.out)
                else:
                    quiet.append(step["hook"])
            if quiet:
                print(f"      {'no change:':<12} {', '.join(quiet)}", file=self.out)
            if r.get("decisions", {}).get("proceed") is False:
                print(f"    ✗ refused: {r['decisions'].get('reason', '')}", file=self.out)
        elif event == "phase.changed":
            print(f"── {r['from_node']} → {r['to_node']} ({r['outcome']})", file=self.out)
        elif event in ("hooks.audit", "hooks.load_failed"):
            detail = {k: v for k, v in r.items() if k not in ("ts", "source", "pid", "event")}
            print(f"  ! {event} {json.dumps(detail, ensure_ascii=False)}", file=self.out)


def _about(r: dict[str, Any]) -> str:
    """A few words on which moment this was, from the facts the event repeats."""
    f = r.get("facts", {})
    point = r["point"]
    if point == "waiting_for_input":
        return f"({f.get('kind')} at {f.get('node')})"
    if point == "input_received":
        return f"({f.get('kind')} from @{f.get('actor')})"
    if point == "session_spawn":
        return f"({f.get('node')}{', resume' if f.get('respawn') else ''})"
    if point == "phase_changed":
        return f"({f.get('from_phase')} → {f.get('to_phase')})"
    if point == "work_item_complete":
        return f"({f.get('state')} by {f.get('source')})"
    return ""


def _what(step: dict[str, Any]) -> str:
    parts = []
    for key, value in step["changed"].items():
        edit = step.get("edits", {}).get(key)
        if edit and "text" not in edit:
            bits = [f"{where} {_brief(text)}" for where, text in edit.items() if text]
            parts.append(f"{key}: " + ", ".join(bits))
        else:
            parts.append(f"{key}={_brief(value)}")
    return "changed " + "; ".join(parts)


def _brief(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 90 else text[:87] + "…\""


def run_demo(folder: Path | None = None, out: TextIO = sys.stdout) -> int:
    from the_loop.config import read_config
    from the_loop.runtime.service import Loop
    from the_loop.sdk.hooks import HookServer

    folder = fresh_dir(folder or Path.cwd() / "the-loop-demo")
    os.environ.setdefault(TOKEN_ENV, secrets.token_urlsafe(24))
    server = HookServer(Compliance(), host="127.0.0.1", port=0, token_env=TOKEN_ENV)
    server.serve_in_thread()
    started = time.monotonic()
    try:
        config_path = write_folder(folder, server.url)
        print(f"the-loop demo in {folder}", file=out)
        print(f"  hooks: house-rules (policy: policies/), stamp (path: hooks/stamp.py), "
              f"compliance (url: {server.url})", file=out)
        loop = Loop(read_config(config_path), strict_hooks=True, source="demo")
        narrator = Narrator(loop.settings.events_path, out)
        ref = loop.tracker.add("Add a login page", body="Users need to sign in with email.",
                               labels=["loop"], author="operator")
        print(f"  work item {ref}: 'Add a login page'", file=out)
        loop.arm(ref, actor="operator", source="command")
        answered = tried = False
        for _ in range(60):
            poll_once(loop)
            wait_sessions(loop, timeout=60)
            narrator.flush()
            w = loop.work(ref) or {}
            state = w.get("state")
            if state == "waiting" and not answered:
                print(f"  reviewer @{REVIEWER} answers the question", file=out)
                reply(loop, ref, ANSWER, actor=REVIEWER)
                answered = True
            elif state == "gate" and not tried:
                print(f"  @{OUTSIDER} (not a maintainer) tries /approve", file=out)
                reply(loop, ref, "/approve", actor=OUTSIDER)
                tried = True
                narrator.flush()
                print(f"  reviewer @{REVIEWER} approves {w.get('node')}", file=out)
                reply(loop, ref, "/approve", actor=REVIEWER)
            elif state == "gate":
                print(f"  reviewer @{REVIEWER} approves {w.get('node')}", file=out)
                reply(loop, ref, "/approve", actor=REVIEWER)
            elif state in ("done", "refused", "blocked", "stopped"):
                break
            wait_sessions(loop, timeout=60)
            narrator.flush()
        narrator.flush()
        item = loop.tracker.get(ref)
        w = loop.work(ref) or {}
        loop.close(wait=10)
        seconds = time.monotonic() - started
        order = list(dict.fromkeys(narrator.points))
        print(f"\n{ref} is {item.state} (loop state {w.get('state')}) after "
              f"{seconds:.1f} s; points fired: {', '.join(order)}", file=out)
        print(f"read the log: the-loop --config {config_path} events", file=out)
        return 0 if item.state == "closed" and w.get("state") == "done" else 1
    finally:
        server.shutdown()
