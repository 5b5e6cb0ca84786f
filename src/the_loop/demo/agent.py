"""A scripted agent harness: reads its prompt, writes a document, asks once, completes nodes.

Run as `python -m the_loop.demo.agent` by the loop (prompt on stdin; THE_LOOP_WORK_ITEM,
THE_LOOP_SESSION, THE_LOOP_NODE and THE_LOOP_CLI_CONFIG in the environment).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from the_loop.cli import main as the_loop

QUESTION = "Which users should the first version serve?"


def run() -> int:
    prompt = sys.stdin.read()
    node = os.environ.get("THE_LOOP_NODE", "work")
    Path(f"{node}.md").write_text(f"# {node}\n\nWritten from this prompt:\n\n{prompt}\n",
                                  encoding="utf-8")
    print(f"agent: node {node}, prompt of {len(prompt)} characters", flush=True)
    if node == "requirements" and "Input from @" not in prompt:
        return the_loop(["ask", QUESTION, "--summary", "Drafted the requirements; one "
                         "question is open."])
    return the_loop(["graph", "complete", "--summary", f"Wrote {node}.md."])


if __name__ == "__main__":
    raise SystemExit(run())
