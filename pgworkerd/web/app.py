"""`create_app`: the dashboard as an ASGI app, and the layers around its routes: security
headers, basic auth, and the settings every request reads.

The app holds no connection between requests: a page opens one (the overview three, read
at once), each in a thread of Starlette's pool (anyio's 40 threads bound them), and
closes it, so the app can be mounted in a host that forks its workers, and a database
restart costs one failed page, not a broken pool.
"""

from __future__ import annotations

import base64
import hmac
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pgworkerd.config import DATABASE_URL_ENV, Config, ConfigError
from pgworkerd.config.units import is_loopback
from pgworkerd.storage import connections
from pgworkerd.storage.store import DEFAULT_SCHEMA
from pgworkerd.web import views
from pgworkerd.web.headers import SECURITY_HEADERS
from pgworkerd.web.settings import Settings

PASSWORD_ENV = "PGWORKERD_WEB_PASSWORD"
STATIC_DIR = Path(__file__).parent / "static"


@dataclass(frozen=True)
class BasicAuth:
    username: str
    password: str


def create_app(
    config: Config | None = None,
    *,
    dsn: str | None = None,
    schema: str = DEFAULT_SCHEMA,
    read_only: bool = False,
) -> Starlette:
    """The dashboard. With `config`: its database (unless `dsn` is given), schema,
    queues, periodic entries, limited queues, `web.read_only` and `web.auth` (the password from
    $PGWORKERD_WEB_PASSWORD). Without: `dsn` (else $PGWORKERD_DATABASE_URL), `schema`,
    and no auth of its own: a host application puts its own in front."""
    auth = None
    if config is not None:
        dsn = dsn or connections.database_url(config)
        schema = config.database.schema_name
        read_only = read_only or config.web.read_only
        auth = _basic_auth(config)
    dsn = dsn or os.environ.get(DATABASE_URL_ENV)
    if not dsn:
        raise ConfigError([f"the dashboard needs a database: pass dsn= or set {DATABASE_URL_ENV}"])
    settings = Settings(
        dsn=dsn,
        schema=schema,
        read_only=read_only,
        queues=tuple(config.queues) if config is not None else (),
        periodic=tuple(config.periodic) if config is not None else (),
        limits=config.queue_limits() if config is not None else {},
    )
    routes = [
        *views.routes(settings),
        Mount("/static", app=StaticFiles(directory=STATIC_DIR), name="static"),
    ]
    app = Starlette(routes=routes, exception_handlers=views.exception_handlers())
    app.add_middleware(_AppRoot)
    app.add_middleware(_SecurityHeaders)
    if auth is not None:
        app.add_middleware(_BasicAuthGuard, auth=auth)
    return app


def _basic_auth(config: Config) -> BasicAuth | None:
    if config.web.auth is None:
        return None
    return BasicAuth(config.web.auth.username, web_password())


def web_password() -> str:
    """The password from $PGWORKERD_WEB_PASSWORD; ConfigError when it is unset, empty or
    only whitespace (a blank line of a secrets file is no password to guard a page)."""
    password = os.environ.get(PASSWORD_ENV, "")
    if not password.strip():
        raise ConfigError([f"web.auth: set the password in {PASSWORD_ENV} (not blank)"])
    return password


class _SecurityHeaders:
    """Adds SECURITY_HEADERS to every response, static files and errors included."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        await self.app(scope, receive, send_with_headers)


class _AppRoot:
    """Keeps the app's own root path (where a host mounted it, or "") in the scope as
    views.ROOT_PATH_KEY: the `/static` mount sets `root_path` to `.../static` in the same
    scope, and its 404 page built its links and cookie path from that (`/static/static/`,
    `Path=/static`)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scope[views.ROOT_PATH_KEY] = scope.get("root_path", "")
        await self.app(scope, receive, send)


class _BasicAuthGuard:
    """Refuses (401) a request without the configured user and password."""

    def __init__(self, app: ASGIApp, auth: BasicAuth) -> None:
        self.app = app
        self._expected = (auth.username.encode(), auth.password.encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self._allowed(scope):
            await self.app(scope, receive, send)
            return
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"www-authenticate", b'Basic realm="pgworkerd", charset="UTF-8"'),
                    (b"content-type", b"text/plain; charset=utf-8"),
                    *SECURITY_HEADERS,
                ],
            }
        )
        await send({"type": "http.response.body", "body": b"authentication required\n"})

    def _allowed(self, scope: Scope) -> bool:
        given = _credentials(scope)
        if given is None:
            return False
        # Both compared, always, in constant time: neither the length of a common prefix
        # nor which of the two was wrong shows in the response time.
        user_ok = hmac.compare_digest(given[0], self._expected[0])
        password_ok = hmac.compare_digest(given[1], self._expected[1])
        return user_ok & password_ok


class LoopbackHostGuard:
    """Refuses (421) a request whose Host header names anything but a loopback address
    or `localhost`. `pgworkerd web` without auth listens on loopback only, and a page of
    any site could otherwise reach it by DNS rebinding (its own name resolved to
    127.0.0.1): its requests would carry its own Host, which the origin check alone
    takes for this server's. Used by `serve`; an app mounted elsewhere has its host's
    own rules."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or _loopback_host(scope):
            await self.app(scope, receive, send)
            return
        await send(
            {
                "type": "http.response.start",
                "status": 421,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"), *SECURITY_HEADERS],
            }
        )
        await send(
            {"type": "http.response.body", "body": b"this server answers to loopback names only\n"}
        )


def _loopback_host(scope: Scope) -> bool:
    header: Any = dict(scope.get("headers", [])).get(b"host")
    if header is None:
        return False
    host = bytes(header).decode("latin-1").strip().lower()
    if host.startswith("["):  # [::1]:9188
        host = host[1 : host.find("]")] if "]" in host else ""
    else:
        host = host.rpartition(":")[0] if ":" in host else host
    return is_loopback(host)


def _credentials(scope: Scope) -> tuple[bytes, bytes] | None:
    header: Any = dict(scope.get("headers", [])).get(b"authorization", b"")
    scheme, _, encoded = bytes(header).partition(b" ")
    if scheme.lower() != b"basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True)
    except ValueError:
        return None
    user, sep, password = decoded.partition(b":")
    return (user, password) if sep else None
