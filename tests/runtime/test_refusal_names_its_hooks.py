"""Issue 30 item 3 through a real poll: a refusal whose reason another hook gave names both
hooks in the comment and in `hooks.refused`."""

from __future__ import annotations

from runtime_helpers import LoopDir

TWO_HOOKS = '''
from the_loop.sdk.hooks import LifecycleHooks, WorkItemStart


class Note(LifecycleHooks):
    def work_item_start(self, ctx: WorkItemStart) -> WorkItemStart:
        ctx.reason = "just a note"
        return ctx


class Refuse(LifecycleHooks):
    def work_item_start(self, ctx: WorkItemStart) -> WorkItemStart:
        ctx.proceed = False
        return ctx
'''


def test_r2_3_refusal_comment_names_the_refusing_hook_and_the_one_whose_reason_it_is(
        ld: LoopDir) -> None:
    ld.write("hooks/two.py", TWO_HOOKS)
    ld.write_config("hooks:\n"
                    "  - {name: a, path: hooks/two.py, executor: Note}\n"
                    "  - {name: b, path: hooks/two.py, executor: Refuse}\n")
    ref = ld.add()
    ld.start(ref)
    ld.poll()
    assert ld.work(ref)["state"] == "refused"
    assert ld.comments(ref) == [
        "The start of this work item was refused by hook `b` at `work_item_start` (the "
        "reason is hook `a`'s): just a note"]
    [refused] = ld.events("hooks.refused")
    assert (refused["hook"], refused["reason_by"]) == ("b", "a")
