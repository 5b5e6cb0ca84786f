"""The executors the chain runs besides a hook class: the remote JSON-RPC client and the policy."""
