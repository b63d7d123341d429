"""The dashboard (`pip install pgworkerd[web]`): `pgworkerd web`, or `create_app(...)` to
mount in a host application's ASGI app. Importing this package imports Starlette and
Jinja2; nothing outside it does."""

from pgworkerd.web.app import create_app
from pgworkerd.web.serve import serve

__all__ = ["create_app", "serve"]
