"""The dashboard mounted in a host Starlette (or FastAPI) application at /admin/jobs.

    PGWORKERD_DATABASE_URL=postgresql://... uvicorn examples.web_mount:app

`create_app` gives a plain ASGI app: it keeps its own links, static files and CSRF
cookie under the prefix it is mounted at. Authentication is the host's: wrap the mount
in the host's own middleware (here a header check stands in for it). FastAPI is the
same call: `api.mount("/admin/jobs", create_app(...))`.
"""

from __future__ import annotations

import os

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from pgworkerd.web import create_app


async def home(request: Request) -> Response:
    return PlainTextResponse("the host application; the jobs are at /admin/jobs/\n")


class StaffOnly:
    """Stands in for the host's own authentication: lets through a request that its
    reverse proxy marked as coming from staff."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (b"x-staff", b"yes") not in scope["headers"]:
            await PlainTextResponse("staff only\n", status_code=403)(scope, receive, send)
            return
        await self.app(scope, receive, send)


def build(dsn: str, *, read_only: bool = False) -> Starlette:
    dashboard = create_app(dsn=dsn, schema="pgworkerd", read_only=read_only)
    return Starlette(routes=[Route("/", home), Mount("/admin/jobs", app=StaffOnly(dashboard))])


# Built at import when the environment names the database, as uvicorn imports it.
app = (
    build(os.environ["PGWORKERD_DATABASE_URL"]) if "PGWORKERD_DATABASE_URL" in os.environ else None
)
