"""The SDK names hook files written for the open-source the-loop use (issue 14.4)."""

from __future__ import annotations

import dataclasses
import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from any_loop_data import EXPECTED, THEIR_STYLE_HOOK, VALUES
from the_loop.hooks import load_chain
from the_loop.hooks.engine.dialect import read_params
from the_loop.hooks.engine.points import POINTS, SPECS
from the_loop.sdk.hooks import (
    Context,
    DecisionTypeError,
    HookServer,
    LifecycleHooks,
    SessionSpawn,
    WorkItem,
    WorkItemStart,
)


@pytest.mark.parametrize(("ref", "kind", "fields"), [
    ("local:acme/app#12", "", {"tracker": "local", "host": "", "owner": "acme", "repo": "app",
                               "repository": "acme/app", "number": 12, "kind": "issue",
                               "url": "local://acme/app/12"}),
    ("github:acme/app#7", "pull-request",
     {"tracker": "github", "host": "github.com", "repository": "acme/app", "number": 7,
      "kind": "pull-request", "url": "https://github.com/acme/app/pull/7"}),
    ("github:git.acme.example/acme/app#3", "",
     {"tracker": "github", "host": "git.acme.example", "owner": "acme", "repo": "app",
      "repository": "git.acme.example/acme/app",
      "url": "https://git.acme.example/acme/app/issues/3"}),
    ("github:github.com/acme/app#4", "",
     {"host": "github.com", "repository": "acme/app",
      "url": "https://github.com/acme/app/issues/4"}),
    ("issue-9", "", {"tracker": "", "number": 0, "kind": "issue", "url": ""}),
])
def test_from_ref_takes_our_ref_formats_apart(
    ref: str, kind: str, fields: dict[str, object]
) -> None:
    item = WorkItem.from_ref(ref, kind=kind, id="x")
    assert item.ref == ref and item.id == "x"
    for key, value in fields.items():
        assert getattr(item, key) == value, key


def test_provider_is_a_read_only_alias_of_tracker_and_to_params_carries_both() -> None:
    item = WorkItem(tracker="local")
    assert item.provider == "local"
    with pytest.raises(dataclasses.FrozenInstanceError):
        item.provider = "github"  # type: ignore[misc]
    params = SessionSpawn(work_item=item).to_params()["work_item"]
    assert (params["tracker"], params["provider"]) == ("local", "local")


@pytest.mark.parametrize(("ref", "kind", "expected"), [
    ("github:acme/app#7", "", "issue-7"),
    ("github:acme/app#8", "pull-request", "issue-8"),
    ("github:git.acme.example/acme/app#3", "", "issue-3"),
    ("local:acme/app#12", "", "local:acme/app#12"),
    ("issue-9", "", "issue-9"),
])
def test_from_ref_without_an_id_gives_the_id_the_other_loop_gives(
    ref: str, kind: str, expected: str
) -> None:
    assert WorkItem.from_ref(ref, kind=kind).id == expected


def test_context_itself_cannot_be_built_only_a_points_context() -> None:
    with pytest.raises(TypeError, match="build a point's context instead"):
        Context()
    assert WorkItemStart().POINT == "work_item_start"


def test_hook_server_points_are_the_points_its_health_check_lists() -> None:
    class Only(LifecycleHooks):
        def session_spawn(self, ctx: SessionSpawn) -> None:
            return None

        def phase_changed(self, ctx: Any) -> None:
            return None

    with HookServer(Only()) as server:
        assert server.points == ("session_spawn", "phase_changed")
        with urllib.request.urlopen(server.url + "health", timeout=10) as answer:
            assert json.loads(answer.read())["points"] == list(server.points)


def test_handles_is_what_the_class_overrides() -> None:
    class Only(LifecycleHooks):
        def session_spawn(self, ctx: SessionSpawn) -> None:
            return None

    assert [p for p in POINTS if Only().handles(p)] == ["session_spawn"]
    assert Only().handles("no_such_point") is False


def test_to_params_is_every_field_as_json_and_reads_back() -> None:
    ctx = SessionSpawn(prompt="p", command=["a"], work_item=WorkItem.from_ref("local:a/b#1"))
    params = ctx.to_params()
    assert set(params) == {f.name for f in SPECS["session_spawn"].fields}
    assert params["work_item"]["repository"] == "a/b"
    assert read_params("session_spawn", params)[0] == ctx


def test_decisions_and_facts_name_the_fields() -> None:
    assert WorkItemStart.decisions() == ("proceed", "reason")
    assert "actor" in WorkItemStart.facts() and "proceed" not in WorkItemStart.facts()
    assert issubclass(WorkItemStart, Context)


def test_apply_sets_decisions_checked_first_and_refuses_a_wrong_type() -> None:
    ctx = WorkItemStart()
    assert ctx.apply({"proceed": False, "reason": "no", "actor": "x", "other": 1}) == (
        "proceed", "reason")
    assert (ctx.proceed, ctx.reason, ctx.actor) == (False, "no", "")
    with pytest.raises(DecisionTypeError, match="decision 'proceed' must be bool"):
        ctx.apply({"reason": "changed", "proceed": "yes"})
    assert ctx.reason == "no"  # nothing was set
    assert issubclass(DecisionTypeError, TypeError)


@pytest.mark.parametrize("point", list(POINTS))
def test_a_hook_file_in_their_style_runs_declared_by_path(tmp_path: Path, point: str) -> None:
    (tmp_path / "house_rules.py").write_text(THEIR_STYLE_HOOK, encoding="utf-8")
    config = tmp_path / "cli-config.yaml"
    config.write_text("hooks:\n  - name: house\n    path: house_rules.py\n", encoding="utf-8")
    ctx, _ = read_params(point, VALUES[point])
    out = load_chain(config).run(ctx)
    changed = {d.name: getattr(out, d.name) for d in SPECS[point].decisions
               if getattr(out, d.name) != getattr(ctx, d.name)}
    assert changed == EXPECTED[point]


def test_an_empty_work_item_is_false_so_if_endpoint_asks_whether_there_is_one() -> None:
    """Issue 30.10: as there, `bool(WorkItem())` is false and a record with a ref is true."""
    assert not WorkItem()
    assert not SessionSpawn().endpoint
    assert WorkItem(ref="local:acme/app#1")
    assert WorkItem.from_ref("issue-9")  # an opaque ref is still a ref


ALLOW_LIST = """\
rules:
  - name: enterprise-repos-only
    on: work_item_start
    when: "!contains(['ghe.corp.example/octo/repo'], work_item.repository)"
    set:
      proceed: false
      reason: "{{ work_item.repository }} is not on the allow-list"
"""


def test_an_allow_list_reads_the_same_host_qualified_repository_from_either_loop(
    tmp_path: Path
) -> None:
    """Issue 30.11: our record of an enterprise ref and the other loop's (which sends
    `repository` host-qualified) are the same string, so one rule matches both callers."""
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "allow.yaml").write_text(ALLOW_LIST, encoding="utf-8")
    config = tmp_path / "cli-config.yaml"
    config.write_text("hooks:\n  - name: allow\n    policy: rules\n", encoding="utf-8")
    chain = load_chain(config)
    ref = "github:ghe.corp.example/octo/repo#3"
    ours = WorkItemStart(work_item=WorkItem.from_ref(ref))
    theirs, _ = read_params("work_item_start", {"work_item": {
        "ref": ref, "provider": "github", "host": "ghe.corp.example", "owner": "octo",
        "repo": "repo", "repository": "ghe.corp.example/octo/repo", "number": 3,
        "kind": "", "url": "https://ghe.corp.example/octo/repo/issues/3", "id": "issue-3"}})
    assert ours.work_item.repository == theirs.work_item.repository
    assert chain.run(ours).proceed is True
    assert chain.run(theirs).proceed is True
    other = WorkItemStart(work_item=WorkItem.from_ref("github:ghe.corp.example/octo/other#3"))
    assert chain.run(other).reason == "ghe.corp.example/octo/other is not on the allow-list"
