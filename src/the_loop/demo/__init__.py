"""The scripted demo: an agent harness, a reviewer, and the `the-loop demo` scenario."""
