"""`the-loop --help` at 80 columns, as the parser prints it.

Written by `python -m the_loop.cli.app` (do not edit): tests/cli/test_startup_imports.py
checks that it is the parser's output.

`the-loop --help`, `-h` and a bare `the-loop` print this when the help is 80 columns
wide (no terminal, or a terminal of 80): no argparse imported, no parser built (issue
34: a command costs at most 3x a bare Python). At any other width the parser prints it.
"""

from __future__ import annotations

#: The terminal width TEXT was formatted for (argparse's own fallback without a terminal).
WIDTH = 80


TEXT = (
    'usage: the-loop [-h] [--version] [--config PATH] COMMAND ...\n'
    '\n'
    'Deliver work items with agent sessions; attach hooks and policy to their\n'
    'lifecycle.\n'
    '\n'
    'positional arguments:\n'
    '  COMMAND\n'
    '    init         write a cli-config.yaml, example policies with tests, an\n'
    '                 example hook\n'
    '    hooks        the declared hooks, the catalog, dry runs\n'
    '    policy       check, test and try policy folders; replay recorded points\n'
    '    items        tickets and pull requests in the local tracker\n'
    '    start        arm a ticket or pull request (the poller starts it)\n'
    '    reply        answer, comment or send /approve, /reject, /stop\n'
    '    poll         the poller daemon: start armed items, read input\n'
    '    ask          (inside a session) ask a person a question\n'
    '    graph        (inside a session) the phase graph\n'
    '    serve        the control plane: a JSON API, a tracker webhook and a read-\n'
    '                 only console in a browser (/console/)\n'
    "    state        the loop's database: migrate its schema, check it\n"
    '    events       the event log, readable (--json for machines)\n'
    '    demo         run one work item end to end on the embedded default\n'
    '    completion   print a shell completion script to source\n'
    '\n'
    'options:\n'
    '  -h, --help     show this help message and exit\n'
    "  --version      show program's version number and exit\n"
    '  --config PATH  the cli-config.yaml to use; accepted anywhere on the line\n'
    '                 (default: $THE_LOOP_CLI_CONFIG, else ./cli-config.yaml,\n'
    '                 ./.the-loop/cli-config.yaml, ~/.the-loop/cli-config.yaml)\n'
    '\n'
    'example:\n'
    '  the-loop init && the-loop policy test --coverage\n'
)
