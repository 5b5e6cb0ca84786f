"""Reloading what a hook server serves, without a restart and without a half-loaded policy.

`Reloader.reload()` builds the new executor aside (the policy folder checked and compiled,
or the declared chain loaded, exactly as at start); if it loads, every core swaps to it
between two calls (`Core.swap`: a call reads its executor once, so no answer comes from two
revisions); if it does not, the last good one keeps serving, the failure is written to
stderr with every error, counted (`the_loop_served_reloads_failed_total`) and shown by
`/health` (`reload.failed`; its errors only to a caller with the token) until a later reload
succeeds. `hooks serve` reloads on SIGHUP and, with `--watch`, when `changed()` sees a file
the loader reads change (`signature`: stamps of the rule and data files, polled; no
dependency); each WSGI/ASGI worker does the same with THE_LOOP_HOOK_WATCH
(`watch_in_thread`).
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from the_loop.errors import LoopError
from the_loop.hooks.policy.files import DATA_FOLDER
from the_loop.hooks.serving.core import Core
from the_loop.hooks.serving.jsonrpc import AnyExecutor
from the_loop.hooks.serving.operations import Operations
from the_loop.util import say

#: How often `--watch` looks at the files (seconds), unless told otherwise.
WATCH_EVERY = 1.0

#: One file a look saw: its path, and its mtime, ctime, size and inode (-1s: unreadable).
Seen = tuple[str, int, int, int, int]
_GONE = (-1, -1, -1, -1)


def signature(roots: Iterable[Path]) -> tuple[Seen, ...]:
    """What a reload would read under `roots`, as a look sees it: a file root as itself;
    a policy folder as the folder it resolves to (a symlink flipped to another release
    changes it), its rule files and its data/ files. Nothing else of the folder is looked
    at (a `.git` of any size, `tests/`, an editor's dot-folders): a look costs two folder
    listings per policy, whatever sits beside the rules (issue 31, item 9). Any edit,
    addition, removal or in-place copy (`cp -p` keeps the mtime, never the ctime) changes
    it; a look that cannot read something records that it could not."""
    out: list[Seen] = []
    for root in roots:
        out.extend(_look(root))
    return tuple(out)


def _look(root: Path) -> list[Seen]:
    try:
        st = root.stat()
    except OSError:
        return [(str(root), *_GONE)]
    if not stat.S_ISDIR(st.st_mode):
        return [(str(root), *_stamp(st))]
    real = Path(os.path.realpath(root))
    out: list[Seen] = [(f"{root} -> {real}", *_GONE)]
    for folder, keep in ((real, (DATA_FOLDER,)), (real / DATA_FOLDER, ())):
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    name = entry.name
                    if name.startswith(".") or not (name.endswith((".yaml", ".yml"))
                                                    or name in keep):
                        continue
                    try:
                        out.append((entry.path, *_stamp(entry.stat())))
                    except OSError:
                        out.append((entry.path, *_GONE))
        except OSError:
            out.append((str(folder), *_GONE))
    return sorted(out)


def _stamp(st: os.stat_result) -> tuple[int, int, int, int]:
    return st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino


class Reloader:
    """Reloads `build()` into `cores` (see the module doc).

    `build` raises `LoopError` (every error listed) when the new revision does not load;
    `roots` gives the files to watch; `revision_of_files` the revision a failed load would
    have had; `on_swap` hears each executor swapped in (the masker reads its `mask:`).
    """

    def __init__(self, cores: list[Core], build: Callable[[], AnyExecutor], *,
                 roots: Callable[[], list[Path]], revision_of_files: Callable[[], str],
                 ops: Operations | None = None,
                 on_swap: Callable[[AnyExecutor], None] = lambda e: None) -> None:
        self.cores = cores
        self.build = build
        self.roots = roots
        self.revision_of_files = revision_of_files
        self.ops = ops
        self.on_swap = on_swap
        self._lock = threading.Lock()
        self._seen = self._look()
        self._settling: tuple[Seen, ...] | None = None

    @property
    def serving(self) -> str:
        return str(getattr(self.cores[0].executor, "revision", ""))

    def changed(self) -> bool:
        """Whether a watched file changed since the last reload, and the change has settled:
        a look that finds a change waits for the next look to find the same files (a file
        an editor is writing in place, caught half written, may load: its first rules
        alone would serve until the next look)."""
        now = self._look()
        if now == self._seen:
            self._settling = None
            return False
        if now != self._settling:  # new since the last look: look again before loading
            self._settling = now
            return False
        self._seen, self._settling = now, None
        return True

    def _look(self) -> tuple[Seen, ...]:
        """The signature now; a look that fails (a folder swapped away under it) is one
        that saw nothing settled, never an error out of the watch."""
        try:
            return signature(self.roots())
        except Exception as exc:  # never let a bad moment on disk end the server
            return ((f"(a look failed: {type(exc).__name__})", *_GONE),)

    def reload(self, why: str = "SIGHUP") -> bool:
        """Load the files as they are now; swap on success. True when the new one serves.

        Whatever goes wrong while the files are looked at or loaded (a policy error, but
        also a file that vanished mid-read, a name that is not UTF-8, an I/O error) is a
        refused reload: reported, counted, and the last good revision keeps serving
        (issue 31, item 1)."""
        with self._lock:
            self._seen = self._look()
            try:
                executor = self.build()
            except LoopError as exc:
                self._failed(why, exc)
                return False
            except Exception as exc:  # anything else a load can raise is refused the same
                self._failed(why, LoopError(f"{type(exc).__name__} while loading: {exc}"))
                return False
            old = self.serving
            for core in self.cores:
                core.swap(executor)
            self.on_swap(executor)
            new = self.serving
            if self.ops is not None:
                self.ops.reload_failure = None
                self.ops.metrics.reloaded(changed=new != old)
            say(f"the-loop: reloaded ({why}): revision {new} serves"
                 f"{' (unchanged)' if new == old else f' (was {old})'}")
            return True

    def _failed(self, why: str, exc: LoopError) -> None:
        try:
            revision = self.revision_of_files()
        except Exception:  # the revision is for the report; the report must still happen
            revision = "(unreadable)"
        errors = list(getattr(exc, "errors", [])) or str(exc).splitlines()
        if self.ops is not None:
            self.ops.metrics.reloads_failed.inc()
            self.ops.reload_failure = {"failed": revision, "serving": self.serving,
                                       "at": round(time.time(), 3), "errors": errors}
        say(f"the-loop: reload ({why}) refused: revision {revision} does not load; "
             f"revision {self.serving} keeps serving:\n{exc}")

    def watch_in_thread(self, every: float = WATCH_EVERY) -> threading.Thread:
        """Poll the files every `every` seconds in a daemon thread; reload when they change.
        A process forked afterwards (gunicorn --preload builds the app in its master, then
        forks the workers) starts a watch of its own: no thread survives a fork."""
        def watch() -> None:
            while True:
                time.sleep(every)
                try:
                    if self.changed():
                        self.reload("a file changed")
                except Exception as exc:  # the watch must outlive a bad moment on disk
                    say(f"the-loop: watch: {type(exc).__name__}: {exc}")

        def start() -> threading.Thread:
            thread = threading.Thread(target=watch, name="policy-watch", daemon=True)
            thread.start()
            return thread

        def forked() -> None:
            self._lock = threading.Lock()  # the parent's watch may have held it at the fork
            start()

        os.register_at_fork(after_in_child=forked)
        return start()
