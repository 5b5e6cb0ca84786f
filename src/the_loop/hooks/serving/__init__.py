"""The hook server: one executor hosted over JSON-RPC 2.0 (httptools on uvloop, ASGI or WSGI), any dialect."""
