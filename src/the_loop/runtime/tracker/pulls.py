"""A new work item's fields, checked: from the CLI's flags, the JSON API or a webhook event.

`pull_request(...)` checks a pull request's branches and head repository (an empty head
repository is the tracker's own: a pull request from a branch of the same repository);
`new_item(data, repository)` reads a JSON object into `LocalTracker.add`'s keywords, naming
the key, what it expected and what it got. `fork` is never accepted: it is derived from
`head_repository`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from the_loop.errors import quote
from the_loop.runtime.tracker.base import PullRequest, TrackerError

# What git's check-ref-format refuses anywhere in a branch name (and a leading '-').
_BRANCH = re.compile(r"^(?!-)[^\s~^:?*\[\\\x00-\x1f\x7f]+$")
_REPOSITORY = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
PULL_KEYS = ("base", "head", "head_repository", "draft")
_KEYS = ("title", "body", "kind", "for", "labels", "author", *PULL_KEYS)


def pull_request(repository: str, *, base: str = "", head: str = "",
                 head_repository: str = "", draft: bool = False) -> PullRequest:
    """A checked `PullRequest` into `repository`; a `TrackerError` naming a bad value."""
    for flag, value in (("base", base), ("head", head)):
        if value and (not _BRANCH.match(value) or ".." in value):
            raise TrackerError(f"--{flag} {quote(value)} is not a branch name (no spaces, "
                               "no ~ ^ : ? * [ \\ or '..', not starting with '-')")
    if head_repository and not _REPOSITORY.match(head_repository):
        repo = repository.split("/")[-1]
        raise TrackerError(f"--head-repository {quote(head_repository)} is not owner/repo "
                           f"(e.g. {repository}, or a fork such as someone/{repo})")
    return PullRequest(repository, base, head, head_repository or repository, draft)


def new_item(data: Any, repository: str) -> dict[str, Any]:
    """`LocalTracker.add`'s keywords from a JSON object; `TrackerError` on a bad key or type."""
    if not isinstance(data, Mapping):
        raise TrackerError("a new work item is a JSON object: {\"title\": …, \"kind\": …}")
    if "fork" in data:
        raise TrackerError("fork is derived (the head repository is not this repository), "
                           "never sent: send head_repository instead")
    unknown = sorted(str(k) for k in data if k not in _KEYS)
    if unknown:
        raise TrackerError(f"unknown key(s) {', '.join(unknown)}; a new work item takes "
                           f"{', '.join(_KEYS)}")
    for key in _KEYS:
        want: type = bool if key == "draft" else list if key == "labels" else str
        if key in data and type(data[key]) is not want:
            raise TrackerError(f"{key} must be {want.__name__} (got {quote(data[key])})")
    labels = data.get("labels", [])
    if not all(isinstance(label, str) for label in labels):
        raise TrackerError("labels must be a list of strings")
    kind = data.get("kind", "issue")
    given = [k for k in PULL_KEYS if k in data]
    if given and kind != "pull-request":
        raise TrackerError(f"{', '.join(given)}: only a pull request has them; send "
                           "\"kind\": \"pull-request\"")
    pull = pull_request(repository, **{k: data[k] for k in given}) if (
        kind == "pull-request") else None
    return {"title": data.get("title", ""), "body": data.get("body", ""), "kind": kind,
            "parent": data.get("for", ""), "labels": list(labels),
            "author": data.get("author", ""), "pull": pull}
