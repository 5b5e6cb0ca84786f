"""The loop's commands: `start`, `reply`, `poll`, `ask`, `graph complete`.

Only `poll` (a daemon, like `serve` in serve.py) acts on work items: it loads the hooks
at start, refuses to start when they do not load, and runs each item's steps. The others
are one-shot: they fire no point, and only write what they ask for — an arming, a person's
input, a question, a node change — for a daemon to take in. `reply`, `ask` and `graph
complete` check the declaration too: when it cannot load, they record hooks.load_failed and
say that nothing moves until it is mended.
"""

from __future__ import annotations

import os
import sys
import time
from typing import TYPE_CHECKING, Any

from the_loop.cli._common import add_json, config_of, positive_seconds, print_json, seconds
from the_loop.errors import HooksConfigError, LoopError, UsageError

if TYPE_CHECKING:  # `ask` and `graph complete` run without argparse (cli/quick.py)
    import argparse
    from collections.abc import Callable

    from the_loop.runtime.identity import Caller
    from the_loop.runtime.service import Loop


def register(sub: Any) -> None:
    s = sub.add_parser("start", help="arm a ticket or pull request (the poller starts it)")
    s.add_argument("ref", help="the work item: local:acme/app#1, or just its number")
    s.add_argument("--actor", default=None, metavar="LOGIN",
                   help="the person you arm it for (default: $USER, else operator)")
    s.set_defaults(func=cmd_start)

    r = sub.add_parser("reply", help="answer, comment or send /approve, /reject, /stop")
    r.add_argument("ref", help="the work item: local:acme/app#1, or just its number")
    r.add_argument("text", help="an answer, a comment, or /approve, /reject REASON, /stop")
    r.add_argument("--actor", default=None, metavar="LOGIN",
                   help="the person you write for (default: $USER, else operator)")
    r.add_argument("--wait", nargs="?", type=seconds, const=60.0, default=0.0, metavar="S",
                   help="wait (up to S seconds, default 60) for the loop to deliver it and "
                        "print what happened")
    r.set_defaults(func=cmd_reply)

    p = sub.add_parser("poll", help="the poller daemon: start armed items, read input")
    p.add_argument("--once", action="store_true", help="run one cycle and exit")
    p.add_argument("--interval", type=positive_seconds, default=5.0, metavar="S",
                   help="seconds between cycles (default: %(default)s)")
    p.add_argument("--quiet", action="store_true", help="no line per thing the loop does")
    add_host_id(p)
    add_json(p)
    p.set_defaults(func=cmd_poll)

    a = sub.add_parser("ask", help="(inside a session) ask a person a question")
    a.add_argument("text", help="the question, as the person will read it")
    a.add_argument("--summary", default="",
                   help="what you did so far, shown above the question (default: none)")
    a.add_argument("--work-item", default="", metavar="REF",
                   help="default: $THE_LOOP_WORK_ITEM, the session's own item")
    a.set_defaults(func=cmd_ask)

    g = sub.add_parser("graph", help="(inside a session) the phase graph")
    gs = g.add_subparsers(dest="graph_command", metavar="SUBCOMMAND", required=True)
    gc = gs.add_parser("complete", help="the agent's node is done: advance the graph")
    gc.add_argument("--work-item", default="", metavar="REF",
                    help="default: $THE_LOOP_WORK_ITEM, the session's own item")
    gc.add_argument("--summary", default="",
                    help="what the node produced, posted with the phase change (default: none)")
    gc.set_defaults(func=cmd_graph_complete)


def add_host_id(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host-id", default="", metavar="ID",
                   help="this host's id in a loop shared by several (default: "
                        "$THE_LOOP_HOST_ID, else the host's name)")


def _work_item(args: argparse.Namespace, caller: Caller | None = None) -> str:
    env = caller.env if caller is not None else os.environ
    ref = args.work_item or env.get("THE_LOOP_WORK_ITEM", "")
    if not ref:
        raise UsageError("no work item: pass --work-item REF (inside a session "
                         "$THE_LOOP_WORK_ITEM is set)")
    return str(ref)


def _operator() -> str:
    return os.environ.get("USER", "") or "operator"


def one_shot(args: argparse.Namespace, source: str) -> Loop:
    """A loop for a one-shot command, which writes a durable step for a daemon and never
    loads a hook, fires a point, delivers input nor launches a session."""
    from the_loop.runtime.service import Loop

    return Loop(config_of(args), strict_hooks=False, source=source)


def unmended(loop: Loop, what: str) -> bool:
    """Whether the hooks declaration fails to load, so no daemon can start to act on `what`
    (said on stderr with the error, and recorded as hooks.load_failed: R3.6, abuse case 6).
    Loads it as a daemon would, firing nothing; a load that works records nothing. A config
    that declares no hook has nothing to load (nor to import the loader for)."""
    if loop.config.data.get("hooks", []) == []:
        return False
    from the_loop.events import EventLog
    from the_loop.hooks.declaring.loading import chain_from_config

    try:
        chain_from_config(loop.config, log=EventLog(keep=0))
    except HooksConfigError as exc:
        loop.log.emit("hooks.load_failed", error=str(exc), config=str(loop.config.path or ""))
        print(f"the-loop: nothing will act on {what} until the hooks declaration is mended: "
              f"no daemon can start on it ({exc}); a daemon started before the edit keeps "
              "the hooks it loaded", file=sys.stderr)
        return True
    return False


def daemon(args: argparse.Namespace, source: str) -> Loop:
    """A loop for a daemon: the hooks load now and a bad declaration refuses the start."""
    from the_loop.runtime.identity import agent_session
    from the_loop.runtime.lease import set_host_id
    from the_loop.runtime.service import Loop
    from the_loop.sqldb import retrying

    if getattr(args, "host_id", ""):
        set_host_id(args.host_id)
    config = config_of(args)
    # A database away while the daemon starts (a machine booting the loop and PostgreSQL at
    # once, a restart, a connection ended mid-migration) is waited for as a one-shot waits;
    # a SIGTERM meanwhile ends it as it ends the running daemon, said and with 0.
    _stop_on_sigterm(source)
    loop = retrying(lambda: Loop(config, strict_hooks=True, source=source),
                    f"{source}: starting")
    sid = agent_session(loop.db, loop.settings.state_dir / "sessions")
    if sid:
        loop.db.close()
        raise UsageError(f"refusing to start: the {source} daemon is the operator's, and this "
                         f"runs inside agent session {sid}")
    try:
        _ = loop.chain
    except HooksConfigError as exc:
        loop.db.close()
        raise LoopError(f"refusing to start: {exc}") from None
    _not_dumpable()
    return loop


def _stop_on_sigterm(source: str) -> None:
    """Until the daemon's own handlers take over (the poller's `Wakeup`, serve's), a SIGTERM
    (when nothing else handles it) stops the start wherever it is, in the start's waits for
    the database (its schema, its heartbeat's first beat) and between them: one line on
    stderr and exit 0, as the running daemon stops (`poller stopped (SIGTERM)`), not a
    silent death by the signal. It is SystemExit, so psycopg cancels a query it interrupts
    and rolls back; a second SIGTERM while it ends is the same stop (ignored)."""
    import signal

    line = f"the-loop: {source}: stopped (SIGTERM) while starting\n".encode()
    stopping: list[bool] = []

    def stop(signum: int, frame: object) -> None:
        if stopping:  # one caught before the block below, run after it
            return
        stopping.append(True)
        # Later SIGTERMs are blocked, not ignored: in a storm, a SIGTERM caught before an
        # ignore took effect was said as "Signal 15 ignored due to race condition" with a
        # traceback; and the handler itself goes at exit, where a pending one killed.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        os.write(2, line)  # not print: this may run inside a write to stderr
        raise SystemExit(0)

    stop.until_started = True  # type: ignore[attr-defined]  # (wakeup.Wakeup.close)
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, stop)


def _not_dumpable() -> None:
    """A daemon holds every token in its environment: make /proc/<pid>/environ (and
    ptrace) unavailable to other processes of the same user, such as a harness. (Root can
    still read it: run harnesses as another user, see docs/security.md.)"""
    import contextlib
    import ctypes

    if sys.platform != "linux":
        return
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0


def cmd_start(args: argparse.Namespace) -> int:
    from the_loop.runtime.identity import acting_as

    loop = one_shot(args, "start")
    try:
        ref = loop.tracker.resolve(args.ref)
        actor = acting_as(loop.db, loop.settings.state_dir, args.actor, _operator())
        if loop.arm(ref, actor=actor, source="command"):
            print(f"{ref} armed; the poller starts it (`the-loop poll`)")
        else:
            state = (loop.work(ref) or {}).get("state", "")
            print(f"{ref} is already armed ({state})")
    finally:
        loop.close()
    return 0


def cmd_reply(args: argparse.Namespace) -> int:
    """Write the input on the work item; the daemon holding the hooks delivers it. A
    database that is away for a moment is retried (sqldb.retrying), the comment written
    once."""
    from the_loop.sqldb import retrying

    since = time.time()
    posted = retrying(lambda: _post_reply(args, since), "reply")
    if posted is None or not args.wait:
        return 0
    ref, cid = posted

    def wait() -> int:
        from the_loop.runtime.stepactions import StepAction

        loop = one_shot(args, "reply")
        try:
            return _wait_for(loop, StepAction.INPUT.key(ref, cid), ref, args.wait)
        finally:
            loop.close()

    return retrying(wait, "reply --wait")


def _post_reply(args: argparse.Namespace, since: float) -> tuple[str, int] | None:
    """Post the reply (unless an earlier try of this command already did: `since`); the
    item and comment to wait for, or None when there is nothing to wait for (said)."""
    from the_loop.runtime.identity import acting_as
    from the_loop.runtime.input_bound import input_refusal
    from the_loop.runtime.poller import input_target
    from the_loop.runtime.store import ACTIVE

    loop = one_shot(args, "reply")
    try:
        ref = loop.tracker.resolve(args.ref)
        actor = acting_as(loop.db, loop.settings.state_dir, args.actor, _operator())
        too_long = input_refusal(args.text)
        if too_long:
            raise UsageError(f"{ref}: not posted: {too_long}")
        text = loop.redact(args.text) if actor.startswith("agent:") else args.text
        # A try that failed after its write reached the database has posted it already.
        cid = next((c.id for c in loop.tracker.get(ref).comments if c.author == actor
                    and c.body == text and c.created >= since), 0) or \
            loop.tracker.comment(ref, text, author=actor, source="reply")
        target, _ = input_target(loop, ref)
        if (loop.work(target) or {}).get("state") not in ACTIVE:
            print(f"{ref}: comment {cid} posted as {actor}; {target} is not an active work "
                  "item, so nothing acts on it")
            return None
        broken = unmended(loop, f"comment {cid}")  # a running daemon may still deliver it
        if not args.wait:
            then = ("no daemon can start to deliver it until the hooks declaration loads"
                    if broken else "the poller delivers it (--wait to see what happened)")
            print(f"{ref}: comment {cid} posted as {actor}; {then}")
        return ref, cid
    finally:
        loop.close()


def _wait_for(loop: Loop, key: str, ref: str, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while True:
        step = loop.store.step(key)
        if step is not None and step.state == "done":
            break
        if time.monotonic() > deadline:
            print(f"{ref}: not delivered within {timeout:g} s — is `the-loop poll` running? "
                  "It stays queued and is delivered when the poller runs.", file=sys.stderr)
            return 1
        time.sleep(0.1)
    line = f"{ref}: {step.outcome}"
    if step.outcome == "refused":
        hook, _, reason = step.detail.partition(": ")
        line += f" by hook `{hook}`: {reason}"
    elif step.outcome == "ignored" and step.detail:
        line += f" ({step.detail})"
    print(line)
    return 0


def cmd_poll(args: argparse.Namespace) -> int:
    import threading

    from the_loop.runtime.narrate import narrator
    from the_loop.runtime.poller import poll_once, run_forever

    loop = daemon(args, "poll")
    stop = threading.Event()
    loop.start_heartbeat(on_clash=stop.set)  # refuses while another instance has our host id
    try:
        if args.once:
            # Started: a one-shot cycle ends on SIGTERM as any command does, by the signal
            # (a visit cut off is a crash the next cycle redoes), not as "while starting".
            import signal

            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            report = poll_once(loop)
            if args.json:
                print_json(report.to_json())
            else:
                print(f"started {len(report.started)}, inputs {report.inputs}, refused "
                      f"{report.refused}, launched {report.launched}, closed "
                      f"{len(report.closed)}, sessions ended {len(report.exited)}")
            return 0
        if not args.quiet:
            loop.log.on_emit = narrator(sys.stdout)
        from the_loop.cli.door import opened
        from the_loop.cli.quick import agent_args

        # Its sessions' graph complete and ask are answered here (agentdoor.py).
        door = opened(loop, {"ask": ask_line, "graph": complete_line}, agent_args)
        try:
            why = run_forever(loop, args.interval, stop, started=lambda: print(
                f"polling every {args.interval:g} s (Ctrl-C to stop)", flush=True))
        finally:
            if door is not None:
                door.close()
        if loop.heartbeat is not None and loop.heartbeat.clash:
            return 1  # said on stderr when it was found
        print(f"poller stopped ({why})", file=sys.stderr)
        return 0
    finally:
        loop.stop_heartbeat()
        loop.db.close()


def cmd_ask(args: argparse.Namespace) -> int:
    print(ask_line(args))
    return 0


def ask_line(args: argparse.Namespace, caller: Caller | None = None,
             loop_of: Callable[[str], Loop] | None = None) -> str:
    """Queue the question; the daemon runs waiting_for_input and posts the final text. A
    database that is away for a moment is retried (sqldb.retrying). Returns the line to
    print. `caller` and `loop_of`: the agent door's (cli/door.py) — whose command it is,
    and the door's loop, whose daemon acts on the question (its hooks loaded at its start)."""
    from the_loop.runtime.identity import SELF, agent_session
    from the_loop.sqldb import retrying

    who = caller or SELF

    def ask() -> tuple[str, bool]:
        loop = one_shot(args, "ask") if loop_of is None else loop_of("ask")
        try:
            ref = loop.tracker.resolve(_work_item(args, who))
            loop.ask(ref, args.text, summary=args.summary,
                     session_id=agent_session(loop.db, loop.settings.state_dir / "sessions",
                                              who))
            return ref, loop_of is None and unmended(loop, "your question")
        finally:
            if loop_of is None:
                loop.close()

    ref, broken = retrying(ask, "ask")
    if broken:
        return (f"asked: your question on {ref} is queued; no daemon can start to post it "
                "until the hooks declaration loads")
    return f"asked: the loop posts your question on {ref}; answers resume this work"


def cmd_graph_complete(args: argparse.Namespace) -> int:
    print(complete_line(args))
    return 0


def complete_line(args: argparse.Namespace, caller: Caller | None = None,
                  loop_of: Callable[[str], Loop] | None = None) -> str:
    """Queue the node's completion; the daemon follows the `done` edge of its graph. A
    database that is away for a moment is retried (sqldb.retrying): the completion is
    keyed by the node's epoch, so it is queued once however many tries reach it. Returns
    the line to print; `caller`, `loop_of`: as `ask_line`'s."""
    from the_loop.runtime.identity import SELF, agent_session, attributed
    from the_loop.sqldb import retrying

    who = caller or SELF

    def complete() -> tuple[str, str, bool]:
        loop = one_shot(args, "graph") if loop_of is None else loop_of("graph")
        try:
            ref = loop.tracker.resolve(_work_item(args, who))
            sid = agent_session(loop.db, loop.settings.state_dir / "sessions", who)
            actor = attributed(sid, None, "agent")
            node = loop.graph_complete(ref, summary=args.summary, actor=actor, session_id=sid)
            return ref, node, loop_of is None and unmended(loop, f"{node}'s completion")
        finally:
            if loop_of is None:
                loop.close()

    ref, node, broken = retrying(complete, "graph complete")
    if broken:
        return (f"{node} done; nothing moves {ref} on until the hooks declaration loads (no "
                "daemon can start on it)")
    return f"{node} done; the loop moves {ref} on"
