"""Trackers: where work items live. The local SQLite tracker is the embedded default."""

from the_loop.runtime.tracker.base import Comment, Item, Tracker, TrackerError
from the_loop.runtime.tracker.local import LocalTracker

__all__ = ["Comment", "Item", "LocalTracker", "Tracker", "TrackerError"]
