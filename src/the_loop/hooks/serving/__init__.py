"""The hook server: one executor hosted over JSON-RPC 2.0 (http.server or WSGI), any dialect."""
