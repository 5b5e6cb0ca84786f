"""A read-only console in the browser under /console/ on `the-loop serve` (see docs/console.md)."""
