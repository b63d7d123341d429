"""`pgworkerd web`: the dashboard under uvicorn, in the foreground.

A listen address beyond loopback without `web.auth` is refused before anything binds:
the dashboard can retry and cancel jobs, so it is never open to a network by default.
"""

from __future__ import annotations

import contextlib
import signal
import socket
from collections.abc import Iterator

import psycopg
import uvicorn
from starlette.types import ASGIApp

from pgworkerd.config import Config, ConfigError, host_port
from pgworkerd.errors import SchemaError
from pgworkerd.listening import listening_socket
from pgworkerd.storage import connections, migrations
from pgworkerd.storage.connections import parsed_conninfo
from pgworkerd.web.app import LoopbackHostGuard, create_app, web_password


def serve(config: Config, *, listen: str | None = None, read_only: bool = False) -> int:
    """Runs until SIGINT/SIGTERM; returns the exit status. ConfigError (exit 2) for a
    listen address that needs auth and has none, or auth without a password."""
    # `is None`, not `or`: an empty --listen is the option's value to refuse, not a
    # fallback (it reached the loopback check below unparsed: a traceback, exit 1).
    address = config.web.listen if listen is None else listen
    try:
        host, port = host_port(address)
    except ValueError as exc:
        raise ConfigError([f"--listen: {exc}"]) from None
    unguarded = None if listen is None else config.web.unguarded(listen, "--listen")
    if unguarded is not None:  # the config's web.listen was checked with the config
        raise ConfigError([unguarded])
    if config.web.auth is not None:
        web_password()  # ConfigError (exit 2) when unset or blank
    if config.database.url is not None:  # DatabaseURLError (exit 2), not a 500 a page
        parsed_conninfo(config.database.url.get_secret_value())
    app: ASGIApp = create_app(config, read_only=read_only)
    _check_schema(config)
    if config.web.auth is None:  # on loopback, then: see LoopbackHostGuard
        app = LoopbackHostGuard(app)
    # Bound here, not by uvicorn: a taken port is one line and exit 2 as `run`'s
    # http.listen is, where uvicorn logged it after our "serving" line and exited 3.
    sock = bound_socket(host, port, "web.listen" if listen is None else "--listen", address)
    mode = " (read-only)" if read_only or config.web.read_only else ""
    print(f"pgworkerd web: serving the dashboard on http://{address}/{mode}", flush=True)
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level="warning",
            access_log=False,
            server_header=False,
            proxy_headers=False,  # the client's address is the socket's, not a header's
        )
    )
    with _stop_signals_end_cleanly():
        server.run(sockets=[sock])
    return 0 if server.started else 1


# uvicorn catches these, shuts down gracefully, then restores the handlers it found and
# raises the signal again, for a program that embeds it to see. With Python's own
# handlers that made a TERM the process's death by signal and a Ctrl-C "interrupted"
# (exit 1); `pgworkerd web` owns its process, and a stop it was asked for is exit 0,
# as `pgworkerd run`'s drain is.
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def _stop_signals_end_cleanly() -> Iterator[None]:
    def already_stopped(signum: int, frame: object) -> None:
        """uvicorn's own raise after its shutdown: nothing left to do."""

    previous = {sig: signal.signal(sig, already_stopped) for sig in _STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _check_schema(config: Config) -> None:
    """SchemaError (one line, exit 1, as `run`) for a reachable database without the
    schema: every page would answer 503. A database down now is not refused: the pages
    say so until it is back. An older schema is served (the pages adapt to it)."""
    schema = config.database.schema_name
    try:
        with connections.connect(
            connections.database_url(config), application_name="pgworkerd web"
        ) as conn:
            version = migrations.current_version(conn, schema)
    except psycopg.OperationalError:
        return
    if version is None:
        raise SchemaError(f"schema {schema!r} is not set up: run `pgworkerd migrate`")


def bound_socket(host: str, port: int, setting: str, address: str) -> socket.socket:
    """The dashboard's listening socket; ConfigError (one line, exit 2) when the address
    cannot be listened on, as `run`'s http.listen."""
    try:
        # uvicorn's backlog, which its own bind would have used.
        return listening_socket(host, port, backlog=2048)
    except OSError as exc:
        raise ConfigError([f"{setting}: cannot listen on {address}: {exc.strerror}"]) from None
