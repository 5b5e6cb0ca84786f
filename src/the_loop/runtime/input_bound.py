"""How much one piece of input (a comment, a reply, an API call) may bring into a work item.

A bound on input, not on its item: input past it is refused alone, with a sentence saying
why, before it is written where possible (`serve`, `reply`) and otherwise when the loop takes
it in; the item goes on as if it had not been sent, and never blocks on it.
"""

from __future__ import annotations

#: The most characters one input may carry: GitHub's own limit on a comment's body, so no
#: comment a tracker accepts is refused, and a prompt built from one stays far below the
#: policy output bound (hooks/policy/executor.py).
MAX_INPUT_CHARS = 65_536


def input_refusal(text: str) -> str:
    """Why `text` is not taken as input ('' when it is)."""
    if len(text) <= MAX_INPUT_CHARS:
        return ""
    return (f"one input may carry at most {MAX_INPUT_CHARS:,} characters and this one has "
            f"{len(text):,}; shorten it, or link to a file instead of pasting it")


#: The most characters one launch's prompt may carry once inputs queued for a session that
#: has not started join it (runtime/steps.py): three inputs at their most, so the context sent
#: to a url: hook stays under its server's 1 MiB a request even at four UTF-8 bytes a
#: character. An input past it is refused alone, like one input past MAX_INPUT_CHARS.
MAX_LAUNCH_CHARS = 3 * MAX_INPUT_CHARS

LAUNCH_FULL = (f"more input is waiting for this item's next session than one launch carries "
               f"({MAX_LAUNCH_CHARS:,} characters); send it again once the session has "
               "started")

