"""Reload under attack (issue 31, items 1, 2, 7, 9, 12; issue 30, items 6 and 14), run as the
hostile tester ran it: real `hooks serve` processes, real files and symlinks, real signals,
callers on keep-alive connections; every soak is bounded to a few seconds.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from serving_helpers import RELOAD_CALL as CALL
from serving_helpers import Callers, Served, get
from serving_helpers import tagged_rules as rules
from the_loop.errors import LoopError
from the_loop.hooks.policy.files import revision
from the_loop.hooks.serving.core import Core
from the_loop.hooks.serving.reload import Reloader, signature

SERVE = ["hooks", "serve", "--port", "0", "--quiet", "--decision-log", "off"]


def release(folder: Path, tag: str) -> str:
    """A policy release in `folder` (rules and data with the same tag); its revision."""
    (folder / "data").mkdir(parents=True, exist_ok=True)
    (folder / "data" / "tag.yaml").write_text(f"tag: {tag}\n", encoding="utf-8")
    (folder / "rules.yaml").write_text(rules(tag, data=True), encoding="utf-8")
    return revision(folder)


def _answers_now(url: str) -> tuple[str, str]:
    host, port = url.split("/")[2].rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request("POST", "/", body=CALL, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        body = json.loads(resp.read())
        return resp.getheader("X-Policy-Revision") or "", body["result"]["prompt"]
    finally:
        conn.close()


def _until(what: str, ok: Any, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


# ------------------------------------------------------------------ item 1: never an exit


def test_i31_1_a_rule_file_named_in_bytes_that_are_not_utf8_reloads_and_the_server_lives(
        tmp_path: Path) -> None:
    """`b'odd\\xff.yaml'` then SIGHUP ended the server ("UnicodeEncodeError … This is a
    bug", exit 1). A file name is bytes: the folder reloads with it and keeps serving."""
    folder = tmp_path / "rules"
    folder.mkdir()
    (folder / "rules.yaml").write_text(rules("one"), encoding="utf-8")
    served = Served([*SERVE, "--policy", "rules"], tmp_path)
    try:
        odd = Path(os.fsdecode(bytes(folder) + b"/odd\xff.yaml"))
        odd.write_text(rules("two").replace("name: ", "name: odd-"), encoding="utf-8")
        served.proc.send_signal(signal.SIGHUP)
        _until("the odd file served", lambda: _answers_now(served.url)[1].count("[") == 4)
        assert served.proc.poll() is None
        assert _answers_now(served.url)[0] == revision(folder)
    finally:
        code, err = served.stop()
    assert code == 0, err
    assert "reloaded (SIGHUP)" in err and "bug" not in err


def test_i31_1_a_load_that_raises_anything_is_a_refused_reload_never_an_exit(
        tmp_path: Path) -> None:
    """`Reloader` caught only `LoopError`: a FileNotFoundError out of a look, or a
    UnicodeEncodeError out of a load, went up and ended the server."""
    from the_loop.hooks.serving.hosted import policy_executor

    folder = tmp_path / "rules"
    folder.mkdir()
    (folder / "rules.yaml").write_text(rules("one"), encoding="utf-8")
    good = policy_executor(folder)
    core = Core(good)
    errors: list[BaseException] = [FileNotFoundError(2, "No such file or directory", "x/.git"),
                                    UnicodeEncodeError("utf-8", "\udcff", 0, 1, "surrogates"),
                                    LoopError("a policy error")]

    def build() -> Any:
        raise errors.pop(0)

    reloader = Reloader([core], build, roots=lambda: [folder], revision_of_files=lambda: "x")
    assert [reloader.reload("test") for _ in range(3)] == [False, False, False]
    assert core.executor is good


def test_i31_1_soak_subfolders_made_and_removed_during_looks_never_end_the_server(
        tmp_path: Path) -> None:
    """A `.git`, an editor's folders and an `rm -rf && cp -r` deploy churn inside the folder
    while --watch looks every 50 ms and SIGHUPs come every 20 ms: the server keeps answering
    from a whole revision, and SIGTERM still stops it with exit 0 (2 s, bounded)."""
    folder = tmp_path / "rules"
    folder.mkdir()
    (folder / "rules.yaml").write_text(rules("one"), encoding="utf-8")
    served = Served([*SERVE, "--policy", "rules", "--watch", "0.05"], tmp_path)
    callers = Callers(served.url, n=2)
    stop = threading.Event()

    def churn() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            for top in (".git", "tmp", "data-old"):
                deep = folder / top / "a" / "b" / str(n % 3)
                deep.mkdir(parents=True, exist_ok=True)
                (deep / "x.yaml").write_text("x: 1\n", encoding="utf-8")
            for top in (".git", "tmp", "data-old"):
                shutil.rmtree(folder / top, ignore_errors=True)

    churner = threading.Thread(target=churn, daemon=True)
    churner.start()
    try:
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline and served.proc.poll() is None:
            served.proc.send_signal(signal.SIGHUP)
            time.sleep(0.02)
        assert served.proc.poll() is None, "the server ended"
        assert _answers_now(served.url)[1] == "[one] p [one]"
    finally:
        stop.set()
        churner.join(10)
        callers.finish()
        code, err = served.stop()
    assert code == 0, err[-2000:]
    assert callers.failures == [] and len(callers.answers) > 20
    assert {prompt for _, prompt in callers.answers} == {"[one] p [one]"}


# ------------------------------------------------------------------ item 2: a SIGHUP storm


def test_i31_2_soak_5000_sighups_at_half_a_millisecond_with_callers_running(
        tmp_path: Path) -> None:
    """The handlers called `threading.Event.set()` (a lock that is not reentrant): a storm
    hung the server (even SIGTERM did nothing), or nested until RecursionError, or killed it
    once the handler was reset. Handlers now only set a flag: through 5,000 SIGHUPs 0.5 ms
    apart the server answers, and SIGTERM then stops it cleanly."""
    folder = tmp_path / "rules"
    folder.mkdir()
    (folder / "rules.yaml").write_text(rules("one"), encoding="utf-8")
    served = Served([*SERVE, "--policy", "rules"], tmp_path)
    callers = Callers(served.url, n=2)
    pid = served.proc.pid
    try:
        for _ in range(5000):
            os.kill(pid, signal.SIGHUP)
            time.sleep(0.0005)
        assert served.proc.poll() is None, "the storm ended the server"
        assert _answers_now(served.url)[1] == "[one] p [one]"
        status, health = get(served.url + "health")
        assert status == 200 and health["ok"] is True
    finally:
        callers.finish()
        code, err = served.stop()  # SIGTERM, with 10 s to exit
    assert code == 0, err[-2000:]
    assert callers.failures == [] and len(callers.answers) > 20
    assert "reloaded (SIGHUP)" in err and "Traceback" not in err


POLLER_STORM = """
import os, signal, sys, threading
from types import SimpleNamespace
from the_loop.runtime import poller

stop = threading.Event()
log = SimpleNamespace(emit=lambda *a, **k: None)

def cycle(loop):
    # a signal that lands while the main thread holds the stop event's lock (as it does in
    # every wait): a handler that sets that event waits on it forever
    with stop._cond:
        os.kill(os.getpid(), signal.SIGTERM)
        sum(range(1000))  # bytecodes for the handler to run in
    return poller.Report()

poller.poll_once = cycle
print(poller.run_forever(SimpleNamespace(log=log), 0.01, stop), flush=True)
"""


def test_i31_2_the_pollers_sigterm_handler_only_sets_a_flag(tmp_path: Path) -> None:
    """The poller's SIGTERM handler set a `threading.Event`: a SIGTERM landing while the
    main thread held that event's lock hung the poller for good. It stops now."""
    script = tmp_path / "storm.py"
    script.write_text(POLLER_STORM, encoding="utf-8")
    assert _run_bounded(script) == (0, "SIGTERM")


def _run_bounded(script: Path) -> tuple[int, str]:
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        out, err = proc.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return -1, "hung"
    return proc.returncode, out.strip() or err[-500:]


# ---------------------------------------------------- item 7: a symlink-swap deploy racing


def _swap(link: Path, target: Path) -> None:
    """Point `link` at `target` atomically, as a deploy does (`ln -s new tmp && mv -T`)."""
    tmp = link.with_name(link.name + ".new")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(target)
    os.replace(tmp, link)


def _swap_soak(tmp_path: Path, extra: list[str]) -> None:
    releases = {tag: release(tmp_path / "releases" / tag, tag) for tag in ("a", "b")}
    link = tmp_path / "current"
    link.symlink_to(tmp_path / "releases" / "a")
    served = Served([*SERVE, "--policy", "current", *extra], tmp_path)
    callers = Callers(served.url, n=2)
    try:
        n = 0
        for burst in range(3):  # 0.5 s of swaps every 3 ms, then the link rests on one
            deadline = time.monotonic() + 0.5
            while time.monotonic() < deadline:
                n += 1
                _swap(link, tmp_path / "releases" / ("b" if n % 2 else "a"))
                if not extra:
                    served.proc.send_signal(signal.SIGHUP)
                time.sleep(0.003)
            _swap(link, tmp_path / "releases" / ("b" if burst % 2 == 0 else "a"))
            if not extra:
                served.proc.send_signal(signal.SIGHUP)
            time.sleep(0.5)  # a settled link is served (the watch needs two looks)
    finally:
        callers.finish()
        code, err = served.stop()
    assert code == 0, err[-2000:]
    assert callers.failures == []
    by_revision = {rev: tag for tag, rev in releases.items()}
    seen = set()
    for rev, prompt in callers.answers:
        assert rev in by_revision, f"a revision that never existed: {rev}"
        tag = by_revision[rev]
        assert prompt == f"[{tag}] p [{tag}]", f"a mix under revision {tag}: {prompt}"
        seen.add(tag)
    assert seen == {"a", "b"}, seen


def test_i31_7_soak_symlink_swaps_racing_sighup_never_serve_a_mix_or_an_unknown_revision(
        tmp_path: Path) -> None:
    """Two releases (rules and data tagged a, b) and a `current` link swapped every 3 ms,
    each swap followed by SIGHUP, in three bursts of 0.5 s: every answer names release a's
    or b's revision and comes wholly from that release (before: 99 answers mixed A's data
    with B's rules and 976 carried the other folder's revision)."""
    _swap_soak(tmp_path, [])


def test_i31_7_soak_symlink_swaps_under_the_watch_never_serve_a_mix(tmp_path: Path) -> None:
    """The same deploy under `--watch 0.05` (before: 12,030 mixed answers and a revision
    that never existed)."""
    _swap_soak(tmp_path, ["--watch", "0.05"])


# -------------------------------------------------------- item 9: what the watch looks at


def test_i31_9_the_watch_sees_a_data_edit_beside_a_big_git_folder(tmp_path: Path) -> None:
    """The look kept the first 10,000 paths of a walk, so a `.git` of more files pushed
    `data/` out and a data edit was never served; it walked everything each look, too. It
    looks only at the rule files and data/ now."""
    # the 10,050 files on tmpfs where there is one (a disk under load takes seconds)
    shm = Path("/dev/shm")
    base = Path(tempfile.mkdtemp(dir=shm)) if shm.is_dir() and os.access(shm, os.W_OK) \
        else tmp_path
    try:
        folder = base / "rules"
        release(folder, "one")
        objects = folder / ".git" / "objects"
        objects.mkdir(parents=True)
        for n in range(10_050):
            os.close(os.open(objects / f"{n:05d}", os.O_CREAT | os.O_WRONLY, 0o644))
        seen = signature([folder])
        assert not any("/.git" in path for path, *_ in seen)  # never looked at
        served = Served([*SERVE, "--policy", str(folder), "--watch", "0.1"], tmp_path)
        try:
            (folder / "data" / "tag.yaml").write_text("tag: two\n", encoding="utf-8")
            _until("the data edit served",
                   lambda: _answers_now(served.url) == (revision(folder), "[one] p [two]"))
        finally:
            code, err = served.stop()
        assert code == 0, err
    finally:
        if base != tmp_path:
            shutil.rmtree(base, ignore_errors=True)


# ------------------------------------------- item 12: a refused reload on the open /health


def test_i31_12_a_refused_reload_shows_its_errors_only_with_the_token(tmp_path: Path) -> None:
    """The open /health quoted the refused file (a data file holding a key showed it) and
    absolute paths. Without the token it says how many errors; with it, which."""
    folder = tmp_path / "rules"
    release(folder, "one")
    env = {"HOOK_TOKEN": "t0ken-for-the-test"}
    served = Served([*SERVE, "--policy", "rules", "--token-env", "HOOK_TOKEN"], tmp_path, env)
    try:
        (folder / "data" / "tag.yaml").write_text("tag: [sk-live-SECRET\n", encoding="utf-8")
        served.proc.send_signal(signal.SIGHUP)
        _until("the refusal", lambda: "reload" in get(served.url + "health")[1])
        _, open_health = get(served.url + "health")
        assert open_health["reload"]["error_count"] == 1
        assert "errors" not in open_health["reload"]
        shown = json.dumps(open_health)
        assert "sk-live" not in shown and str(tmp_path) not in shown
        conn = http.client.HTTPConnection(*served.url.split("/")[2].rsplit(":", 1),
                                          timeout=10)
        conn.request("GET", "/health", headers={"Authorization": f"Bearer {env['HOOK_TOKEN']}"})
        with_token = json.loads(conn.getresponse().read())
        conn.close()
        [error] = with_token["reload"]["errors"]
        assert "tag.yaml" in error and with_token["reload"]["error_count"] == 1
    finally:
        code, err = served.stop()
    assert code == 0 and "tag.yaml" in err  # the operator's stderr has it whole


# ------------------------------------------------ issue 30 item 14: lints at start, reload


LINTED = """\
rules:
  - name: reversed-regex
    on: input_received
    when: "regex_match(text, '^/approve')"
    set: {proceed: false, reason: "x"}
"""


def test_i30_14_hooks_serve_prints_the_lints_policy_check_prints_at_start_and_on_reload(
        tmp_path: Path) -> None:
    folder = tmp_path / "rules"
    folder.mkdir()
    (folder / "rules.yaml").write_text(rules("one"), encoding="utf-8")
    (folder / "lint.yaml").write_text(LINTED, encoding="utf-8")
    checked = subprocess.run([sys.executable, "-m", "the_loop", "policy", "check", "rules"],
                             cwd=tmp_path, capture_output=True, text=True, timeout=60,
                             check=False)
    # what policy check warns, after the file's path (it names it as it was given)
    warnings = [line.split("lint.yaml: ", 1)[1] for line in checked.stderr.splitlines()
                if "warning:" in line]
    assert warnings, checked.stderr
    served = Served([*SERVE, "--policy", "rules"], tmp_path)
    try:
        (folder / "lint.yaml").write_text(LINTED.replace('"x"', '"y"'), encoding="utf-8")
        served.proc.send_signal(signal.SIGHUP)
        _until("the reload", lambda: _answers_now(served.url)[0] == revision(folder))
    finally:
        code, err = served.stop()
    assert code == 0
    for warning in warnings:
        assert err.count(warning) == 2, err  # at start, and for the new revision


# ------------------------------------- issue 30 item 6: a declared chain's revision


def test_i30_6_the_declared_revision_covers_a_path_hooks_source(tmp_path: Path) -> None:
    """The revision hashed only cli-config.yaml: after a hook's code changed and SIGHUP
    reloaded it, one revision stood for two behaviours."""
    hook = tmp_path / "hooks" / "prefix.py"
    hook.parent.mkdir()
    code_of = ("from the_loop.sdk.hooks import LifecycleHooks\n\n"
               "class Prefix(LifecycleHooks):\n"
               "    def session_spawn(self, ctx):\n"
               "        ctx.prompt = '{tag} ' + ctx.prompt\n        return ctx\n")
    hook.write_text(code_of.format(tag="one"), encoding="utf-8")
    (tmp_path / "cli-config.yaml").write_text(
        "loop: acme\nhooks:\n  - name: prefix\n    path: hooks/prefix.py\n", encoding="utf-8")
    served = Served([*SERVE, "--declared", "--config", "cli-config.yaml"], tmp_path)
    try:
        first, prompt = _answers_now(served.url)
        assert prompt == "one p"
        hook.write_text(code_of.format(tag="two"), encoding="utf-8")
        served.proc.send_signal(signal.SIGHUP)
        _until("the new code", lambda: _answers_now(served.url)[1] == "two p")
        second, _ = _answers_now(served.url)
    finally:
        code, err = served.stop()
    assert code == 0, err
    assert first and second and first != second
