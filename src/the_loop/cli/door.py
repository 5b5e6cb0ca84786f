"""The poller's side of the agent door (the_loop/agentdoor.py says what it is for).

`Door.open(config_path)` makes a folder of its own (0700) holding a Unix socket (0600) and
answers it from one thread, one caller at a time: a caller is given `READ_SECONDS` to send
its line and at most `agentdoor.MAX_BYTES`. The caller must be of this user (SO_PEERCRED);
its process (the kernel's pid, not a claim) and the variables it claims are what the
one-shot would read of itself (`identity.Caller`). The line is read as the one-shot reads
it (cli/quick.py) and run by the one-shot's own function (cli/loop.py), on a loop of the
door's own — its own database connection, never the cycle's — made from the poller's
config and made again when that file changes. Anything else is declined and the command
runs as a one-shot: another config (the poller's environment holds its secrets, which a
config the agent names could put in a URL), a line of another command.

Through the door, `ask` and `graph complete` skip the one-shot's check that the hooks
declaration loads (`unmended`): the daemon answering holds the declaration it loaded at
its start and acts on what it is asked (R3.7).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import stat
import struct
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from the_loop import agentdoor
from the_loop.cli.guard import failure
from the_loop.config import ENV_VAR, read_config, stamp_of
from the_loop.runtime.identity import Caller
from the_loop.runtime.service import Loop

#: A command's line: (its parsed line, the caller, the door's loop for a source) → stdout.
Line = Callable[[Any, Caller, Callable[[str], Loop]], str]
#: How a one-shot reads its line: the parsed line, or None for one it leaves to the parser.
Read = Callable[[list[str]], Any]
#: Each door's folder in the temporary folder: PREFIX + random characters (mkdtemp).
PREFIX = "the-loop-door-"
#: Seconds after which a door's folder whose socket no one answers is a dead poller's.
STALE_SECONDS = 60.0
#: Seconds a caller has to send its whole line before it is dropped.
READ_SECONDS = 5.0
_PEER = struct.Struct("3i")  # struct ucred: pid, uid, gid


class Door:
    """The socket, the thread answering it, and the door's loops (one per command)."""

    def __init__(self, config_path: Path, folder: str, sock: socket.socket,
                 lines: Mapping[str, Line], read: Read) -> None:
        self.config_path = config_path
        self.lines = lines  # each command's function (cli/loop.py's)
        self.read = read  # how a one-shot reads its line (cli/quick.py's agent_args)
        self.folder = folder
        self.path = os.path.join(folder, "door.sock")
        self._sock = sock
        self._loops: dict[str, Loop] = {}
        self._stamp: tuple[int, ...] | None = None
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="agent-door", daemon=True)
        self.answered = 0

    @classmethod
    def open(cls, config_path: Path | None, lines: Mapping[str, Line], read: Read
             ) -> Door | None:
        """A door for the loop of `config_path`, reading each line with `read` and answering
        it with `lines` (each command's function); None where there cannot be one
        (no config file, no Unix sockets, a temporary folder that cannot be written): the
        sessions' commands then run as one-shots, as before."""
        if config_path is None or not hasattr(socket, "AF_UNIX"):
            return None
        _sweep()
        try:
            folder = tempfile.mkdtemp(prefix=PREFIX)  # 0700, a short path
        except OSError:
            return None
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            path = os.path.join(folder, "door.sock")
            sock.bind(path)
            os.chmod(path, 0o600)
            sock.listen(16)
        except OSError:
            sock.close()
            shutil.rmtree(folder, ignore_errors=True)
            return None
        door = cls(config_path.resolve(), folder, sock, lines, read)
        door._thread.start()
        return door

    def close(self) -> None:
        """Stop answering, remove the socket's folder, close the door's loops."""
        self._closed.set()
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        self._thread.join(10)
        shutil.rmtree(self.folder, ignore_errors=True)
        if not self._thread.is_alive():  # a loop in use by the thread is left to it
            self._forget()

    def _serve(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                if self._closed.is_set():
                    return
                continue
            with conn:
                try:
                    self._answer(conn)
                except Exception:
                    continue

    def _answer(self, conn: socket.socket) -> None:
        pid, uid, _ = _PEER.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                   _PEER.size))
        if uid != os.getuid():
            return  # another user's process: dropped (the folder is 0700 besides)
        conn.sendall(agentdoor.GREETING)
        request = _read(conn)
        if request is None:
            conn.sendall(b"2\0\0the-loop: the command's line is over "
                         + str(agentdoor.MAX_BYTES >> 20).encode() + b" MiB; shorten it\n")
            return
        try:  # what the one-shot reads of itself: a caller hiding it runs the one-shot
            os.listdir(f"/proc/{pid}/fd")
        except OSError:
            conn.sendall(f"{agentdoor.DECLINED}\0its process cannot be read\0".encode())
            return
        try:
            code, out, err = self.run(request, pid)
        except Exception:  # before its line ran (which answers its own errors): nothing done
            code, out, err = agentdoor.DECLINED, "a line the door cannot read", ""
        conn.sendall(b"\0".join((str(code).encode(), os.fsencode(out), os.fsencode(err))))
        self.answered += 1

    def run(self, request: list[str], pid: int) -> tuple[int | str, str, str]:
        """(exit code, stdout, stderr) for one request; (`DECLINED`, why, '') for one the
        caller runs itself."""
        n = len(agentdoor.CLAIMS)
        if len(request) < 2 + n or request[0] != agentdoor.HELLO:
            return agentdoor.DECLINED, "not a request of this version", ""
        cwd, claims, argv = request[1], request[2:2 + n], request[2 + n:]
        args = self.read(argv)
        if args is None:
            return agentdoor.DECLINED, "not a plain line of graph complete or ask", ""
        env = dict(zip(agentdoor.CLAIMS, claims, strict=True))
        if self._config_of(args.config, env, cwd) != self.config_path:
            return agentdoor.DECLINED, "another config", ""
        line = self.lines[args.command]
        try:
            out = line(args, Caller({k: v for k, v in env.items() if v}, pid), self._loop)
        except Exception as exc:
            code, said = failure(exc)
            if code == 1 and "unexpected error" in said:
                self._forget()  # a loop in an unknown state is made again
            return code, "", said + "\n"
        return 0, out + "\n", ""

    def _config_of(self, named: str | None, env: dict[str, str], cwd: str) -> Path | None:
        """The config the caller's one-shot would read (config.find_config, from its working
        directory and its environment), when it is named."""
        def at(value: str) -> Path:
            path = Path(value).expanduser()
            return (path if path.is_absolute() else Path(cwd) / path).resolve()

        if named:
            return at(named)
        if env.get(ENV_VAR):  # a session's is always set (harness.launch)
            return at(env[ENV_VAR])
        return None  # found in the caller's folders: a one-shot looks for itself

    def _loop(self, source: str) -> Loop:
        """The door's loop for a command: made once, and again when the config changed."""
        try:
            stamp: tuple[int, ...] | None = stamp_of(os.stat(self.config_path))
        except OSError:
            stamp = None
        if stamp != self._stamp:
            self._forget()
            self._stamp = stamp
        loop = self._loops.get(source)
        if loop is None:
            loop = self._loops[source] = Loop(read_config(self.config_path), strict_hooks=False,
                                              source=source)
        return loop

    def _forget(self) -> None:
        for loop in self._loops.values():
            with contextlib.suppress(Exception):
                loop.close()
        self._loops.clear()


def _sweep() -> None:
    """Remove the doors of this user's pollers that died without closing them (killed):
    folders older than `STALE_SECONDS` whose socket no one answers."""
    root = tempfile.gettempdir()
    try:
        names = [n for n in os.listdir(root) if n.startswith(PREFIX)]
    except OSError:
        return
    for name in names:
        folder = os.path.join(root, name)
        try:
            st = os.lstat(folder)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or \
                time.time() - st.st_mtime < STALE_SECONDS:
            continue  # another user's, or one that may still be opening
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(os.path.join(folder, "door.sock"))
        except (ConnectionRefusedError, FileNotFoundError):
            shutil.rmtree(folder, ignore_errors=True)  # its poller is gone
        except OSError:
            pass
        finally:
            probe.close()


def _read(conn: socket.socket) -> list[str] | None:
    """The request's fields; None when it is over the bound (what is left of it is read
    and dropped, so the caller reads the answer: a Unix socket closed with bytes unread
    resets the connection, and its answer with it). A caller gets `READ_SECONDS` in all,
    however slowly it sends (then `TimeoutError`: dropped)."""
    deadline = time.monotonic() + READ_SECONDS
    parts: list[bytes] = []
    size = 0
    while True:
        conn.settimeout(max(deadline - time.monotonic(), 0.001))
        got = conn.recv(65536)
        if not got:
            break
        size += len(got)
        if size <= agentdoor.MAX_BYTES:
            parts.append(got)
    if size > agentdoor.MAX_BYTES:
        return None
    return [os.fsdecode(f) for f in b"".join(parts).split(b"\0")]


def opened(loop: Any, lines: Mapping[str, Line], read: Read) -> Door | None:
    """Open the door for `loop`'s config and name it to the sessions it launches."""
    door = Door.open(loop.config.path, lines, read)
    loop.door = door.path if door is not None else ""
    return door


__all__ = ["Door", "opened"]
