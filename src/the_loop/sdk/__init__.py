"""Public SDK namespace."""
