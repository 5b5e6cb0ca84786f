"""`the-loop policy replay` on a real run (issue 16): the decision log keeps each fired point's
whole context; the same declaration gives the same answers; a changed one shows each changed
decision, by rule; recorded points become `policy test` cases that pass.

One loop (module fixture) runs three work items end to end through real processes: the
scripted demo agent on a short graph, a policy, a local hook by path, and a remote hook served
by a real HookServer on 127.0.0.1 with a bearer token. One item is refused at its start.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from runtime_helpers import LoopDir
from the_loop.decisions.reads import read_points
from the_loop.demo.hooks import STAMP_HOOK, Compliance
from the_loop.hooks.engine.points import POINTS
from the_loop.hooks.serving.server import HookServer

TOKEN_ENV = "I16_COMPLIANCE_TOKEN"
TOKEN = "tok-i16-0123456789abcdef"

GRAPH = """\
start: requirements
nodes:
  - {name: requirements, phase: requirements, actor: agent,
     prompt: "Write the requirements for {title} ({ref}). Ask when you need a person."}
  - {name: review, phase: review, actor: human, request: "Review it: /approve or /reject."}
  - {name: done, phase: done, terminal: true}
edges:
  - {from: requirements, outcome: done, to: review}
  - {from: review, outcome: approved, to: done}
  - {from: review, outcome: rejected, to: requirements}
"""

POLICY = """\
rules:
  - name: frozen-items
    on: work_item_start
    when: "contains(labels, 'frozen')"
    set: {proceed: false, reason: "{{ work_item.ref }} is frozen"}
  - name: house-preamble
    on: session_spawn
    set: {prompt_prefix: "House rules apply to {{ work_item.ref }}.\\n\\n"}
  - name: long-prompts
    on: session_spawn
    when: "length(prompt) > `40`"
    set: {prompt_suffix: "\\n\\nKeep it short."}
  - name: trial-quiet
    on: phase_changed
    mode: audit
    set: {notify: false}
"""

HOOKS = """\
hooks:
  - {name: house-rules, policy: policies, required: true}
  - {name: stamp, path: hooks/stamp.py, with: {team: acme}}
  - {name: compliance, url: "URL", tokenEnv: I16_COMPLIANCE_TOKEN, timeoutSeconds: 5}
"""


class Run:
    """The finished run: its folder, the remote hook's server, the refs."""

    def __init__(self, ld: LoopDir, server: HookServer, refs: list[str]) -> None:
        self.ld = ld
        self.server = server
        self.refs = refs

    def replay(self, *args: str, config: Path | None = None) -> tuple[int, str, str]:
        cfg = config or self.ld.config
        from contextlib import redirect_stderr, redirect_stdout
        from io import StringIO

        from the_loop.cli import main

        out, err = StringIO(), StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            try:
                code = main(["--config", str(cfg), "policy", "replay", *args])
            except SystemExit as exc:
                code = int(exc.code or 0)
        return code, out.getvalue(), err.getvalue()

    def replay_json(self, *args: str, config: Path | None = None) -> dict[str, Any]:
        code, out, err = self.replay("--json", *args, config=config)
        assert code == 0, err
        data: dict[str, Any] = json.loads(out)
        return data

    def variant(self, name: str, edit: str = "", drop: str = "") -> Path:
        """A copy of the policy folder (`edit` appended to its rule file, rule `drop` removed)
        and a config next to the original that declares it; returns the config's path."""
        root = self.ld.root
        folder = root / f"policies-{name}"
        shutil.rmtree(folder, ignore_errors=True)
        shutil.copytree(root / "policies", folder)
        rules = folder / "rules.yaml"
        text = rules.read_text(encoding="utf-8")
        if drop:
            start = text.index(f"  - name: {drop}\n")
            end = text.find("  - name: ", start + 1)
            text = text[:start] + (text[end:] if end > 0 else "")
        rules.write_text(text + edit, encoding="utf-8")
        config = root / f"{name}.yaml"
        config.write_text(self.ld.config.read_text(encoding="utf-8").replace(
            "policy: policies,", f"policy: policies-{name},"), encoding="utf-8")
        return config

    def rows(self) -> list[dict[str, Any]]:
        """The decision log as `read_points` gives it back (every change in full)."""
        return [{"id": p.id, "point": p.point, "work_item": p.work_item, "record": {
                    "context": p.context, "steps": p.steps, "decisions": p.decisions,
                    "refused_by": p.refused_by}}
                for p in read_points(self.ld.state / "loop.db")]

    def raw(self) -> list[dict[str, Any]]:
        """The stored rows, as written."""
        return self.ld.query("SELECT * FROM decision_log ORDER BY id")


def drive(ld: LoopDir, ref: str, env: dict[str, str]) -> None:
    """The scripted reviewer: poll, answer the question (with a secret in it), approve."""
    for _ in range(20):
        state = ld.work(ref)["state"]
        if state in ("done", "refused"):
            return
        if state == "waiting":
            ld.cli("reply", ref, f"Admins first. token: {TOKEN}", "--actor", "alice", env=env)
        elif state == "gate":
            ld.cli("reply", ref, "/approve", "--actor", "alice", env=env)
        ld.cli("poll", "--once", env=env)  # the daemon delivers what `reply` wrote
        ld.wait_sessions()
    raise AssertionError(f"{ref} not finished: {ld.work(ref)}")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    root = tmp_path_factory.mktemp("replay")
    saved = os.environ.get(TOKEN_ENV)
    os.environ[TOKEN_ENV] = TOKEN
    server = HookServer(Compliance(), port=0, token_env=TOKEN_ENV)
    server.serve_in_thread()
    try:
        with LoopDir(root, harness="demo", graph="graph.yaml") as ld:
            ld.write("graph.yaml", GRAPH)
            ld.write("policies/rules.yaml", POLICY)
            ld.write("hooks/stamp.py", STAMP_HOOK)
            ld.write_config(HOOKS.replace("URL", server.url), harness="demo",
                            graph="graph.yaml")
            env = {TOKEN_ENV: TOKEN}
            refs = [ld.add("Add a login page"), ld.add("Export invoices"),
                    ld.add("Rewrite billing", "--label", "frozen")]
            for ref in refs:
                ld.start(ref)
                drive(ld, ref, env)
            yield Run(ld, server, refs)
    finally:
        server.shutdown()
        if saved is None:
            os.environ.pop(TOKEN_ENV, None)
        else:
            os.environ[TOKEN_ENV] = saved


def test_the_run_finished_as_the_policy_decided(run: Run) -> None:
    """The fixture's run is what the other tests rely on: two items done, one refused."""
    assert [run.ld.work(ref)["state"] for ref in run.refs] == ["done", "done", "refused"]


def test_every_fired_point_is_one_decision_log_row_with_its_whole_context(run: Run) -> None:
    rows = run.rows()
    events = run.ld.points()
    assert [(r["point"], r["work_item"]) for r in rows] == [
        (e["point"], e["work_item"]) for e in events]
    assert {r["point"] for r in rows} == set(POINTS)
    for row, event in zip(rows, events, strict=True):
        for key, value in row["record"]["decisions"].items():
            short = event["decisions"][key]
            assert value == short or (isinstance(short, str) and short.endswith(" chars)")
                                      and value.startswith(short.split("…")[0]))
    spawn = next(r["record"] for r in rows if r["point"] == "session_spawn")
    context = spawn["context"]
    # Every field of the context as it entered the chain: facts, and decisions' incoming values.
    assert context["prompt"].startswith("Write the requirements for Add a login page")
    assert context["proceed"] is True and context["reason"] == ""
    assert context["work_item"]["ref"] == run.refs[0] and context["harness"] == "demo"
    assert isinstance(context["command"], list) and context["cwd"]
    # Who changed what: the policy's rules, then the remote hook, each with its kind.
    assert [(s["hook"], s["kind"], s.get("rules")) for s in spawn["steps"]] == [
        ("house-rules", "policy", ["house-preamble", "long-prompts"]),
        ("compliance", "remote", None),
    ]
    assert spawn["decisions"]["prompt"].startswith(f"House rules apply to {run.refs[0]}.")
    assert spawn["decisions"]["prompt"].endswith("(compliance: keep customer data out of "
                                                 "documents)")
    # `the-loop events` keeps its short form: the event carries no prompt among its facts.
    event = next(e for e in run.ld.points("session_spawn"))
    assert "prompt" not in event["facts"]


def test_a_text_a_hook_edited_is_stored_once_with_the_edit(run: Run) -> None:
    """The log keeps a prompt once: each hook's edit is what it put around the text."""
    [spawn] = [json.loads(r["record"]) for r in run.raw()
               if r["point"] == "session_spawn"][:1]
    prompt = spawn["context"]["prompt"]
    assert json.dumps(spawn).count(prompt[:40]) == 1
    assert spawn["steps"][0]["edits"] == {"prompt": [
        f"House rules apply to {run.refs[0]}.\n\n", "\n\nKeep it short."]}
    assert spawn["steps"][1]["edits"] == {"prompt": [
        "", "\n\n(compliance: keep customer data out of documents)"]}
    assert spawn["decisions"] == {}  # the final prompt is the walk through the edits


def test_audit_findings_are_stored_with_the_step(run: Run) -> None:
    phase = [r["record"] for r in run.rows() if r["point"] == "phase_changed"]
    assert phase and all(r["steps"][0]["audit"] == ["trial-quiet"] for r in phase)
    assert all(r["steps"][0]["status"] == "unchanged" for r in phase)
    assert all(r["decisions"]["notify"] is True for r in phase)


def test_refusals_are_stored_with_the_refusing_hook(run: Run) -> None:
    [start] = [r["record"] for r in run.rows()
               if r["point"] == "work_item_start" and r["work_item"] == run.refs[2]]
    assert start["decisions"] == {"proceed": False, "reason": f"{run.refs[2]} is frozen"}
    assert start["refused_by"] == "house-rules"
    assert start["steps"][0]["rules"] == ["frozen-items"]


def test_no_secret_reaches_the_decision_log(run: Run) -> None:
    rows = run.rows()
    assert rows and not [r for r in run.raw() if TOKEN in json.dumps(r)]
    inputs = [r["record"] for r in rows if r["point"] == "input_received"
              and "Admins first" in r["record"]["context"]["text"]]
    assert inputs and all("token: [redacted]" in r["context"]["text"] for r in inputs)


def test_same_declaration_same_answers_on_the_real_run(run: Run) -> None:
    data = run.replay_json()
    assert data["replayed"] == len(run.rows()) > 20
    assert (data["changed"], data["differences"], data["by_rule"]) == (0, [], {})
    assert data["stand_ins"]["hooks"] == ["compliance"]
    code, out, _ = run.replay("--fail-on-change")
    assert code == 0
    assert f"replayed {data['replayed']} recorded point(s)" in out
    assert "0 would decide differently" in out
    assert ("not called: the recorded answers of compliance stand in for them "
            "(--call-all calls them)") in out


def test_same_answers_when_the_remote_hook_is_called(
        run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    data = run.replay_json("--call-all")
    assert data["changed"] == 0
    assert data["stand_ins"] == {"called": True, "hooks": ["compliance"], "unrecorded": {}}


def test_a_new_refusal_rule_is_reported_per_point_and_by_rule(run: Run) -> None:
    config = run.variant("freeze", edit="""\
  - name: freeze-all-sessions
    on: session_spawn
    set: {proceed: false, reason: "change freeze until Monday"}
""")
    data = run.replay_json(config=config)
    spawns = [r for r in run.rows() if r["point"] == "session_spawn"]
    assert data["changed"] == len(spawns) >= 2
    for diff, row in zip(data["differences"], spawns, strict=True):
        assert (diff["point"], diff["work_item"], diff["id"]) == (
            "session_spawn", row["work_item"], row["id"])
        assert diff["time"].endswith("Z")
        proceed, reason = diff["changes"]
        assert (proceed["decision"], proceed["before"], proceed["after"]) == (
            "proceed", True, False)
        assert proceed["before_by"] is None
        assert proceed["after_by"] == {"hook": "house-rules", "rules": ["freeze-all-sessions"],
                                       "error": ""}
        assert (reason["before"], reason["after"]) == ("", "change freeze until Monday")
    entry = data["by_rule"]["freeze-all-sessions"]
    items = sorted({r["work_item"] for r in spawns})
    assert (entry["hook"], entry["points"], sorted(entry["work_items"])) == (
        "house-rules", len(spawns), items)
    line = (f"freeze-all-sessions (house-rules) would have refused {len(spawns)} launches on "
            f"{len(items)} items")
    assert entry["effects"][0]["summary"] == line
    code, out, _ = run.replay("--fail-on-change", config=config)
    assert code == 1
    assert "  proceed: true → false" in out and "after:  house-rules rule freeze-all-sessions" \
        in out
    assert out.rstrip().endswith(line)


def test_a_removed_rule_is_named_on_the_before_side(run: Run) -> None:
    config = run.variant("thaw", drop="frozen-items")
    data = run.replay_json("--point", "work_item_start", config=config)
    assert data["replayed"] == 3 and data["changed"] == 1
    [diff] = data["differences"]
    assert diff["work_item"] == run.refs[2]
    assert [(c["decision"], c["before"], c["after"], c["before_by"], c["after_by"])
            for c in diff["changes"]] == [
        ("proceed", False, True, {"hook": "house-rules", "rules": ["frozen-items"],
                                  "error": ""}, None),
        ("reason", f"{run.refs[2]} is frozen", "", {"hook": "house-rules",
                                                     "rules": ["frozen-items"], "error": ""},
         None),
    ]
    assert data["by_rule"]["frozen-items"]["effects"][0]["summary"] == (
        "frozen-items (house-rules) would no longer refuse 1 start on 1 item")


def test_a_changed_prefix_keeps_the_remote_hooks_recorded_edit_around_it(run: Run) -> None:
    """The remote hook is not called; its recorded suffix is put after today's prompt."""
    config = run.variant("preamble", edit="")
    rules = run.ld.root / "policies-preamble" / "rules.yaml"
    rules.write_text(rules.read_text().replace("House rules apply", "New rules apply"))
    data = run.replay_json("--point", "session_spawn", config=config)
    assert data["changed"] == data["replayed"] >= 2
    for diff in data["differences"]:
        [change] = diff["changes"]
        assert change["decision"] == "prompt"
        assert change["after"] == change["before"].replace("House rules apply",
                                                           "New rules apply")
        assert change["after"].endswith("(compliance: keep customer data out of documents)")
        assert change["after_by"]["hook"] == "compliance"  # the last hook to set it


def test_filters_select_by_point_work_item_and_age(run: Run) -> None:
    rows = run.rows()
    mine = [r for r in rows if r["work_item"] == run.refs[1]]
    assert run.replay_json("--work-item", run.refs[1])["replayed"] == len(mine)
    number = run.refs[1].rsplit("#", 1)[1]
    assert run.replay_json("--work-item", number)["replayed"] == len(mine)
    gates = [r for r in rows if r["point"] == "phase_changed"]
    assert run.replay_json("--point", "phase_changed")["replayed"] == len(gates)
    assert run.replay_json("--since", "1h")["replayed"] == len(rows)
    assert run.replay_json("--since", "0s")["replayed"] == 0


def test_a_filter_that_matches_no_recorded_point_says_so(run: Run) -> None:
    """`--work-item 99` (no such item) says why nothing was replayed, on stderr."""
    code, out, err = run.replay("--work-item", "99", "--point", "session_spawn")
    assert code == 0 and out.startswith("replayed 0 recorded point(s)")
    assert err == (f"the-loop: no recorded point matches --point session_spawn and "
                   f"--work-item 99 in the decision log of {run.ld.state / 'loop.db'}; "
                   "widen or drop the filter\n")
    code, out, err = run.replay("--json", "--since", "0s")
    assert json.loads(out)["replayed"] == 0 and "matches --since 0s" in err


def test_replay_json_explains_the_null_value_of_a_text_effect(run: Run) -> None:
    """A text decision's by-rule effect has `"value": null` (its text differs point by
    point); docs/changing-policies.md says so, next to the --json shape."""
    data = run.replay_json(config=run.variant("freeze-texts", edit="""\
  - name: freeze-all-sessions
    on: session_spawn
    set: {proceed: false, reason: "change freeze until Monday"}
"""))
    effects = [e for entry in data["by_rule"].values() for e in entry["effects"]]
    assert {e["value"] for e in effects if e["decision"] == "reason"} == {None}
    docs = (Path(__file__).parents[2] / "docs" / "changing-policies.md").read_text("utf-8")
    assert ("`value` is the value a rule sets for a yes/no decision (`proceed`, `announce`, "
            "`notify`) and `null` for a text (`reason`, `prompt`, …)") in " ".join(docs.split())


def test_write_cases_then_policy_test_passes_and_catches_a_later_change(run: Run) -> None:
    config = run.variant("cases")
    folder = run.ld.root / "policies-cases"
    code, out, err = run.replay("--write-cases", str(folder), config=config)
    assert code == 0, err
    [written] = list((folder / "tests").glob("replay-*.yaml"))
    assert f"case(s) to tests/{written.name} in the policy folder {folder}; run " in out
    text = written.read_text(encoding="utf-8")
    assert "point: work_item_start" in text and "point: session_spawn" in text
    assert TOKEN not in text
    code, out, err = run.ld.run("policy", "test", str(folder))
    assert code == 0, out + err
    assert " 0 failed" in out
    # A later edit to a rule breaks the regression cases written from history.
    rules = folder / "rules.yaml"
    rules.write_text(rules.read_text().replace("is frozen", "is on ice"))
    code, out, _ = run.ld.run("policy", "test", str(folder))
    assert code == 1
    assert f'reason: expected "{run.refs[2]} is frozen", got "{run.refs[2]} is on ice"' in out


def test_write_cases_names_the_declared_policy_folders_on_a_wrong_dir(run: Run) -> None:
    code, _, err = run.replay("--write-cases", str(run.ld.root / "nowhere"))
    assert code == 1
    assert "not the folder of a declared policy entry; declared policy folders: " in err
    assert "(house-rules)" in err


@pytest.mark.parametrize(("args", "message"), [
    (["--since", "a week"], "--since: expected an age like 7d, 12h, 30m or 2w, got 'a week'"),
    (["--point", "session_spawnn"], "--point: "),
])
def test_bad_arguments_exit_2_with_one_sentence(run: Run, args: list[str], message: str) -> None:
    code, _, err = run.replay(*args)
    assert code == 2 and message in err and "Traceback" not in err


def test_write_cases_json_names_the_file_and_accepts_the_tests_folder(run: Run) -> None:
    config = run.variant("cases-json")
    tests = run.ld.root / "policies-cases-json" / "tests"
    data = run.replay_json("--point", "work_item_start", "--write-cases", str(tests),
                           config=config)
    cases = data["cases"]
    assert cases["written"] == 3 and cases["skipped"] == []
    assert Path(cases["file"]).parent == tests
    code, out, err = run.ld.run("policy", "test", str(tests.parent))
    assert code == 0, out + err
    assert "3 passed, 0 failed" in out


def test_written_cases_carry_only_the_facts_the_rules_at_their_point_read(run: Run) -> None:
    """A case keeps the fields its point's rules read (a work item's keys too), not the whole
    recorded context: frozen-items reads labels and work_item.ref, the session rules
    work_item.ref and prompt, the audit rule at phase_changed reads nothing."""
    config = run.variant("cases-small")
    folder = run.ld.root / "policies-cases-small"
    code, _, err = run.replay("--write-cases", str(folder), config=config)
    assert code == 0, err
    [written] = list((folder / "tests").glob("replay-*.yaml"))
    cases = yaml.safe_load(written.read_text(encoding="utf-8"))["cases"]
    read = {"work_item_start": {"labels", "work_item"}, "session_spawn": {"prompt", "work_item"},
            "phase_changed": set()}
    assert {c["point"] for c in cases} >= {"work_item_start", "session_spawn"}
    for case in cases:
        assert set(case["facts"]) <= read[case["point"]], case
        assert set(case["facts"].get("work_item", {})) <= {"ref"}, case
    assert any(c["facts"] == {} for c in cases if c["point"] == "phase_changed")
    starts = [c for c in cases if c["point"] == "work_item_start"]
    assert max(len(yaml.safe_dump(c).splitlines()) for c in starts) < 15
    code, out, err = run.ld.run("policy", "test", str(folder))
    assert code == 0 and " 0 failed" in out, out + err


def _reworded(run: Run) -> Path:
    """A copy of the declared policy folder whose frozen-items rule gives another reason."""
    run.variant("reword")
    folder = run.ld.root / "policies-reword"
    rules = folder / "rules.yaml"
    rules.write_text(rules.read_text("utf-8").replace(
        "is frozen\"", "is frozen until Monday\""), "utf-8")
    return folder


def test_i30_19_policy_dir_keeps_the_declared_hooks_name_so_a_rule_shows_once(run: Run) -> None:
    """`--policy DIR` replayed as hook `policy` while the log says `house-rules`: the one
    rule showed twice, "would no longer set" and "would have set"."""
    folder = _reworded(run)
    data = run.replay_json("--policy", str(folder), "--point", "work_item_start")
    [diff] = data["differences"]
    [change] = diff["changes"]
    assert change["decision"] == "reason"
    assert change["before_by"] == change["after_by"] == {
        "hook": "house-rules", "rules": ["frozen-items"], "error": ""}
    effects = data["by_rule"]["frozen-items"]["effects"]
    assert [e.get("side") for e in effects] == ["after"], effects
    assert data["baseline"] == {"choice": "recorded", "revisions": {"(not recorded)": 3}}
    code, out, _ = run.replay("--policy", str(folder), "--point", "work_item_start")
    assert code == 0
    assert f"through the policy folder {folder} (as hook 'house-rules')" in out
    assert "baseline: the decisions as recorded when each point fired, by revision " \
           "(not recorded) (3)" in out


def test_i30_19_baseline_current_compares_with_the_declared_folder_as_it_is_today(
    run: Run
) -> None:
    """Against the recorded decisions, everything the other hooks did shows as a change a
    folder alone cannot make; against the declared entry's folder today, only the edit."""
    folder = _reworded(run)
    recorded = run.replay_json("--policy", str(folder))
    current = run.replay_json("--policy", str(folder), "--baseline", "current")
    assert recorded["changed"] > 1  # the stamp and compliance hooks are not in the folder
    assert current["changed"] == 1
    [diff] = current["differences"]
    assert diff["point"] == "work_item_start" and diff["work_item"] == run.refs[2]
    assert current["baseline"]["choice"] == "current"
    assert "house-rules" in current["baseline"]["through"]
    code, _, err = run.replay("--baseline", "current")
    assert code == 2 and "--baseline current compares a --policy DIR" in err
