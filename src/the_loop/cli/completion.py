"""`the-loop completion bash|zsh|fish`: a shell completion script, generated from the parser.

The script comes from argcomplete (kept, and it knows bash, zsh and fish): at each <Tab> the
shell runs `the-loop` with argcomplete's variables set, and `app.run` answers from the same
parser that parses the line, so completion can never drift from the commands.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

SHELLS = ("bash", "zsh", "fish")


def register(sub: Any) -> None:
    p = sub.add_parser("completion", help="print a shell completion script to source")
    p.add_argument("shell", choices=SHELLS, help="the shell to complete in")
    p.set_defaults(func=cmd_completion)


def cmd_completion(args: argparse.Namespace) -> int:
    from argcomplete.shell_integration import shellcode

    sys.stdout.write(shellcode(["the-loop"], shell=args.shell))
    return 0
