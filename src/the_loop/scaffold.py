"""The files `the-loop init` writes: a config, one commented rule per common need, a test
case for each, and an example hook class. Every file here is loaded and tested as written."""

from __future__ import annotations

CONFIG = """\
# Written by `the-loop init`. The CLI finds this file from the folder that holds .the-loop/
# (or from this folder); elsewhere pass --config PATH or set $THE_LOOP_CLI_CONFIG.
# Every key: docs/declaring-hooks.md (hooks) and docs/runtime.md (the rest).
loop: my-loop                  # the fact `loop` every hook and rule sees
stateDir: state                # event log, tracker database, workspaces (beside this file)
tracker: {kind: local, repository: acme/app}

hooks:
  # YAML rules: policies/*.yaml, tested by policies/tests/*.yaml (`the-loop policy test`).
  - name: house-rules
    policy: policies
    required: true             # if the policy itself fails, a point with `proceed` refuses
  # A Python class, imported from this folder (never from a checkout).
  - name: example
    path: hooks/example.py
    with: {tag: "my-loop"}     # keyword arguments for the class
"""

STARTS = """\
# Which work items may start. A rule is: a name, the point(s) it runs at (`on`), an optional
# condition (`when`, JMESPath over the point's facts: `the-loop hooks points`), and the
# decisions it sets. Strings in JMESPath take single quotes: 'do-not-automate'.
rules:
  - name: refuse-by-label
    description: a work item labelled do-not-automate never starts
    on: work_item_start
    when: "contains(labels, 'do-not-automate')"
    set:
      proceed: false           # a policy may only refuse; a refusal sticks
      reason: "{{ work_item.ref }} is labelled do-not-automate"

  - name: allowed-repositories
    description: starts only for repositories on the allow list (data/repositories.yaml)
    on: work_item_start
    when: "!contains(data.allowed_repositories, work_item.repository)"
    set:
      proceed: false
      reason: "{{ work_item.repository }} is not on the allow list in data/repositories.yaml"
"""

PEOPLE = """\
# Named values the rules read as data.<name>: keep a list here once instead of in every rule.
maintainers: [alice, bob]
"""

REPOSITORIES = """\
# The repositories this loop starts work on (owner/name), read as data.allowed_repositories.
allowed_repositories: [acme/app]
"""

SESSIONS = """\
# What an agent session is told. prompt_prefix and prompt_suffix compose around the prompt
# in rule order; `{{ expression }}` inside a string is filled from the facts.
rules:
  - name: prefix-for-repository
    description: sessions on acme/app start with the house rules
    on: session_spawn
    when: "work_item.repository == 'acme/app'"
    set:
      prompt_prefix: "Follow CONTRIBUTING.md of {{ work_item.repository }}.\\n\\n"

  # A pull request from a fork is how a stranger's text reaches an agent's prompt. `fork` is
  # the tracker's (head repository is not this one); `endpoint` is the item the session is
  # for (a pull request's own session). A caller that does not send `fork` is not guessed:
  # the rule fails that call (required: true above then refuses it).
  - name: forks-need-ok-to-test
    description: a pull request from a fork gets a session only with the ok-to-test label
    on: session_spawn
    when: "(work_item.fork || endpoint.fork) && !contains(labels, 'ok-to-test')"
    set:
      proceed: false
      reason: "pull requests from forks need the ok-to-test label \\
        ({{ endpoint.head_repository || work_item.head_repository }})"
"""

NOTIFICATIONS = """\
# Quieter channels: `notify: false` keeps a phase change off the channels. `mode: audit`
# would only record (in hooks.audit) what the rule would decide, to try a rule out first.
rules:
  - name: quiet-notifications
    description: no phase messages for items labelled quiet, except when they finish
    on: phase_changed
    when: "contains(labels, 'quiet') && !terminal"
    set:
      notify: false
"""

INPUT = """\
# What a person's input may do. `control` is a command without its slash (approve, stop).
rules:
  - name: approve-only-by-maintainers
    description: only maintainers may /approve a gate
    on: input_received
    when: "control == 'approve' && !contains(data.maintainers, actor)"
    set:
      proceed: false
      reason: "only maintainers ({{ join(', ', data.maintainers) }}) may approve; \\
        {{ actor }} is not one"
"""

TEST_STARTS = """\
# Each case: a point, the facts as they enter the chain, the final decisions expected and
# (optionally) exactly the rules that applied. `the-loop policy test --explain` shows why.
cases:
  - name: a do-not-automate item is refused
    point: work_item_start
    facts:
      work_item: {ref: "local:acme/app#1", repository: acme/app}
      labels: [do-not-automate]
    expect:
      proceed: false
      reason: "local:acme/app#1 is labelled do-not-automate"
    rules: [refuse-by-label]

  - name: any other item of an allowed repository starts
    point: work_item_start
    facts:
      work_item: {repository: acme/app}
      labels: [bug]
    expect: {proceed: true}
    rules: []

  - name: an item of another repository is refused
    point: work_item_start
    facts:
      work_item: {repository: evil/fork}
    expect:
      proceed: false
      reason: "evil/fork is not on the allow list in data/repositories.yaml"
    rules: [allowed-repositories]

  - name: a case may give its own data
    point: work_item_start
    data: {allowed_repositories: [evil/fork]}
    facts:
      work_item: {repository: evil/fork}
    expect: {proceed: true}
"""

TEST_SESSIONS = """\
cases:
  - name: a session on acme/app gets the prefix
    point: session_spawn
    facts:
      work_item: {repository: acme/app}
      prompt: "Write the design."
    expect:
      prompt: "Follow CONTRIBUTING.md of acme/app.\\n\\nWrite the design."
    rules: [prefix-for-repository]

  - name: another repository's prompt is left alone
    point: session_spawn
    facts:
      work_item: {repository: acme/docs}
      prompt: "Write the design."
    expect: {prompt: "Write the design."}
    rules: []

  - name: a fork's pull request without ok-to-test gets no session
    point: session_spawn
    facts:
      work_item: {repository: acme/docs, kind: pull-request, head_repository: eve/docs,
                  fork: true}
    expect:
      proceed: false
      reason: "pull requests from forks need the ok-to-test label (eve/docs)"
    rules: [forks-need-ok-to-test]

  - name: a review on a fork's pull request gets no session of its own
    point: session_spawn
    facts:
      work_item: {repository: acme/docs}
      endpoint: {repository: acme/docs, kind: pull-request, head_repository: eve/docs,
                 fork: true}
    expect:
      proceed: false
      reason: "pull requests from forks need the ok-to-test label (eve/docs)"
    rules: [forks-need-ok-to-test]

  - name: a fork's pull request labelled ok-to-test gets its session
    point: session_spawn
    facts:
      work_item: {repository: acme/docs, kind: pull-request, fork: true}
      labels: [ok-to-test]
    expect: {proceed: true}
    rules: []
"""

TEST_NOTIFICATIONS = """\
cases:
  - name: a quiet item's phase change is not announced
    point: phase_changed
    facts: {labels: [quiet], terminal: false}
    expect: {notify: false}
    rules: [quiet-notifications]

  - name: a quiet item that finishes is announced
    point: phase_changed
    facts: {labels: [quiet], terminal: true}
    expect: {notify: true}
    rules: []

  - name: an item not labelled quiet is announced
    point: phase_changed
    facts: {labels: [loop], terminal: false}
    expect: {notify: true}
    rules: []
"""

TEST_INPUT = """\
cases:
  - name: an /approve from someone else is dropped
    point: input_received
    facts: {kind: command, actor: mallory, control: approve, text: /approve}
    expect:
      proceed: false
      reason: "only maintainers (alice, bob) may approve; mallory is not one"
    rules: [approve-only-by-maintainers]

  - name: a maintainer's /approve goes through
    point: input_received
    facts: {kind: command, actor: alice, control: approve, text: /approve}
    expect: {proceed: true}
    rules: []

  - name: another command from anyone goes through
    point: input_received
    facts: {kind: command, actor: mallory, control: stop, text: /stop}
    expect: {proceed: true}
    rules: []
"""

HOOK = '''\
"""An example hook class, declared in cli-config.yaml as `example`. Edit it or delete it.

A hook class overrides the points it handles (`the-loop hooks points` lists them); each
method gets a typed context and returns None (change nothing) or the context with its
decisions changed. Anything it raises is recorded as hooks.failed and the loop goes on.
"""

from the_loop.sdk.hooks import LifecycleHooks, WaitingForInput


class Example(LifecycleHooks):
    """Tags every question an agent asks, so people see which loop asks."""

    def __init__(self, tag: str = "") -> None:
        self.tag = tag

    def waiting_for_input(self, ctx: WaitingForInput) -> WaitingForInput | None:
        if ctx.kind != "question" or not self.tag:
            return None
        ctx.question = f"[{self.tag}] {ctx.question}"
        return ctx
'''

#: Path (relative to the folder `init` writes) → text, in the order they are written.
FILES: dict[str, str] = {
    "cli-config.yaml": CONFIG,
    "policies/10-starts.yaml": STARTS,
    "policies/20-sessions.yaml": SESSIONS,
    "policies/30-notifications.yaml": NOTIFICATIONS,
    "policies/40-input.yaml": INPUT,
    "policies/data/people.yaml": PEOPLE,
    "policies/data/repositories.yaml": REPOSITORIES,
    "policies/tests/starts.yaml": TEST_STARTS,
    "policies/tests/sessions.yaml": TEST_SESSIONS,
    "policies/tests/notifications.yaml": TEST_NOTIFICATIONS,
    "policies/tests/input.yaml": TEST_INPUT,
    "hooks/example.py": HOOK,
}
