"""The WSGI app's old address, kept so gunicorn command lines written before the move still work.

`gunicorn 'the_loop.hooks.wsgi:app_from_env()'` is `the_loop.hooks.serving.wsgi` under the
name the docs gave it first; new command lines name `the_loop.hooks.serving.wsgi`.
"""

from the_loop.hooks.serving.wsgi import app_from_env, make_wsgi_app

__all__ = ["app_from_env", "make_wsgi_app"]
