"""The hook server: one executor over JSON-RPC 2.0 (httptools+uvloop, ASGI, WSGI), any dialect."""
