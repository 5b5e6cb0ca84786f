"""The executor kinds (`registry.KINDS`: local, remote, policy), each in its own module."""
