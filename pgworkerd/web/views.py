"""The dashboard's routes: three pages and the actions, each action a POST that carries
the page's CSRF token and goes through the same client functions the CLI calls.

The CSRF token is a double submit: a random cookie (HttpOnly, SameSite=Strict) and the
same value in each form. Another site can make a browser send the cookie but cannot
read it to put it in the form; no server-side secret, so every process of a host app
that forks accepts the tokens of the others. A request the browser marks cross-site is
refused as well.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import secrets
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlencode

import jinja2
import psycopg
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

import pgworkerd
from pgworkerd.client.operations import Operations
from pgworkerd.errors import DatabaseURLError, InvalidJob
from pgworkerd.storage import connections, migrations
from pgworkerd.storage.dashboard import (
    LAST_ERROR_TAIL,
    PAUSED_KEYS_SHOWN,
    SCAN_WINDOW,
    DashboardReads,
)
from pgworkerd.storage.limits import LimitReads
from pgworkerd.storage.states import STATES
from pgworkerd.web import overview
from pgworkerd.web.headers import SECURITY_HEADERS
from pgworkerd.web.settings import Settings

log = logging.getLogger(__name__)

CSRF_COOKIE = "pgworkerd_csrf"
# Where the app's root path is kept in the scope (app._AppRoot): links, redirects and the
# cookie's path start there, whatever mount (`/static`) the request went through.
ROOT_PATH_KEY = "pgworkerd.root_path"
MAX_FORM_BYTES = 16_384  # an action's form is a token and a name: well under this
# A page waits for no lock (a migration's, a VACUUM FULL) or slow statement longer than
# these: it answers 503 and its thread and connection are free again.
STATEMENT_TIMEOUT_MS = 15_000
LOCK_TIMEOUT_MS = 3_000
PAGE_SIZE = 50
RELATED_SHOWN = 200  # the jobs a job's page lists that it runs after, or before
# A payload or result is shown indented up to this many characters, then cut: indenting
# a deeply nested value multiplies its size (an 800 kB payload became a 50 MB page).
MAX_SHOWN_CHARS = 262_144
# The jobs list shows each job's last error as its last line, cut at this many characters
# (its cell shows less: the rest is for a title to read in full, the job's page has it).
ERROR_LINE_CHARS = 200
MAX_FILTER_CHARS = 255  # as long as a queue name may be
REFRESH_S = 5  # how often an open page reloads its content (static/refresh.js)
# The migration that brings the starts ledger limits_sample reads (0007_limits.sql).
LIMITS_VERSION = 7

# What the page says after an action; the redirect carries only the code, so nothing a
# request sends is reflected into the page.
NOTICES = {
    "retried": "Job queued again.",
    "not_retried": (
        "Not retried: the job is not dead or cancelled, its unique key is live, or its "
        "cancelled handler is still running (try again in a few seconds)."
    ),
    "cancelled": "Job cancelled.",
    "not_cancelled": "Not cancelled: the job is no longer queued or running.",
    "paused": "Queue paused: no daemon claims its jobs; running jobs finish.",
    "resumed": "Queue resumed.",
    "retried_dead": "Dead jobs of the queue queued again: {n}.",
    "key_resumed": "Key resumed: its jobs start again.",
    "key_not_resumed": "Not resumed: the key's pause had already ended.",
}

_templates = jinja2.Environment(
    loader=jinja2.PackageLoader("pgworkerd.web", "templates"),
    autoescape=True,  # every value is escaped: a payload holding <script> is text
    undefined=jinja2.StrictUndefined,
)
_templates.filters.update(overview.FILTERS)


def routes(settings: Settings) -> list[Route]:
    pages = _Pages(settings)
    return [
        Route("/", pages.overview, name="overview"),
        Route("/jobs", pages.jobs, name="jobs"),
        # The id is read by _job_id, not by Starlette's int convertor, whose int() raised
        # past 4,300 digits (a 500 and a logged traceback).
        Route("/jobs/{job_id:str}", pages.job, name="job"),
        Route("/jobs/{job_id:str}/{action:str}", pages.job_action, methods=["POST"]),
        # A GET there is no page: 404, not the 405 of the route above. An id holding a
        # %2F reaches the routes decoded (`/jobs/1%2Fx` is `/jobs/1/x`) and was a 405.
        Route("/jobs/{job_id:str}/{action:str}", _no_page, methods=["GET"]),
        Route("/queues/{action:str}", pages.queue_action, methods=["POST"]),
        Route("/keys/resume", pages.key_resume, methods=["POST"]),
    ]


async def _no_page(request: Request) -> Response:
    raise HTTPException(404, "There is no such page.")


def exception_handlers() -> dict[Any, Callable[..., Any]]:
    return {HTTPException: _http_error, 500: _server_error}


async def _server_error(request: Request, exc: Exception) -> Response:
    """A fault of ours: the error page, with the security headers, which the middleware
    that adds them does not give a response made outside it (the traceback is logged
    by the server, not shown)."""
    context = {"title": "Error", "message": "Something went wrong; the server's log says what."}
    response = _render(request, "error.html", {**context, "refresh_s": 0}, status=500)
    response.headers.update({k.decode(): v.decode() for k, v in SECURITY_HEADERS})
    return response


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    titles = {
        400: "Bad request",
        403: "Forbidden",
        404: "Not found",
        405: "Method not allowed",
        413: "Too large",
        503: "Database unavailable",
    }
    title = titles.get(exc.status_code, "Error")
    context = {"title": title, "message": exc.detail, "refresh_s": 0}
    return _render(request, "error.html", context, status=exc.status_code)


class _Pages:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.reads = DashboardReads(settings.schema)
        self.ops = Operations(settings.schema)
        self.limit_reads = LimitReads(settings.schema)
        # Whether the jobs have a `key` column: asked at the first jobs page, as the
        # column comes with a migration that a running dashboard sees at its next start.
        self._key_column: bool | None = None
        # Whether the schema has the limits' tables: asked at the first overview, as above.
        self._limits_schema: bool | None = None

    # -- pages ------------------------------------------------------------------------------

    async def overview(self, request: Request) -> Response:
        parts = await asyncio.gather(
            self._db(self._overview_live),
            self._db(self._overview_dead_and_keys),
            self._db(self.reads.overview_finished),
        )
        rows = {key: value for part in parts for key, value in part.items()}
        periodic = self.settings.periodic
        data = overview.build(rows, self.settings.queues, periodic, rows["periodic_last"])
        data["limits"] = overview.limits(rows["limits"], self.settings.limits)
        data["paused_keys_shown"] = PAUSED_KEYS_SHOWN
        return _render(request, "overview.html", {**data, "title": "Overview"}, self.settings)

    def _overview_live(self, conn: psycopg.Connection[Any]) -> dict[str, Any]:
        keys = [entry.key for entry in self.settings.periodic]
        last = self.reads.periodic_last(conn, keys) if keys else {}
        return {**self.reads.overview_live(conn), "periodic_last": last}

    def _overview_dead_and_keys(self, conn: psycopg.Connection[Any]) -> dict[str, Any]:
        # The paused keys ride with the dead count: both are quick next to the last
        # hour's pass, and a fourth connection would cost more than either.
        dead = {**self.reads.overview_dead(conn), "limits": self._limits(conn)}
        if not self._has_key(conn):  # a schema from before flow control: no key pauses
            return {**dead, "paused_keys": None}
        return {**dead, **self.reads.overview_paused_keys(conn)}

    def _limits(self, conn: psycopg.Connection[Any]) -> list[dict[str, Any]] | None:
        """What `pgworkerd status` shows of the config's limited queues (the same
        statement, limits_sample); [] without limits, None on a schema from before them."""
        limits = self.settings.limits
        if not limits:
            return []
        if self._limits_schema is None:
            version = migrations.current_version(conn, self.settings.schema)
            self._limits_schema = version is not None and version >= LIMITS_VERSION
        if not self._limits_schema:
            return None
        return self.limit_reads.sample(conn, limits)

    async def jobs(self, request: Request) -> Response:
        filters = _filters(request)
        before = _positive_int(request.query_params.get("before"))
        data = await self._db(lambda conn: self._jobs(conn, filters, before))
        context = {**data, "title": "Jobs", "filters": filters, "states": STATES}
        return _render(request, "jobs.html", context, self.settings)

    def _jobs(
        self, conn: psycopg.Connection[Any], filters: dict[str, str], before: int | None
    ) -> dict[str, Any]:
        has_key = self._has_key(conn)
        start = before if before is not None else self.reads.max_id(conn) + 1
        floor = max(1, start - SCAN_WINDOW)
        rows = self.reads.jobs_page(
            conn,
            state=filters.get("state"),
            queue=filters.get("queue"),
            kind=filters.get("kind"),
            key=filters.get("key") if has_key else None,
            keyed=has_key,
            before=start,
            floor=floor,
            limit=PAGE_SIZE + 1,  # one more than shown: is there an older page?
        )
        jobs = [
            {**row, "error_line": _error_line(row["last_error_tail"])} for row in rows[:PAGE_SIZE]
        ]
        # Older: below the page's last job, or, when the window held fewer matches than a
        # page, below the window (the page names the range it searched).
        searched = None
        older_than = jobs[-1]["id"] if len(rows) > PAGE_SIZE else None
        if older_than is None and floor > 1:
            older_than, searched = floor, (floor, start - 1)
        older = None if older_than is None else "?" + urlencode({**filters, "before": older_than})
        return {
            "jobs": jobs,
            "older": older,
            "searched": searched,
            "has_key": has_key,
            "first_page": before is None,
        }

    def _has_key(self, conn: psycopg.Connection[Any]) -> bool:
        if self._key_column is None:
            self._key_column = self.reads.has_key_column(conn)
        return self._key_column

    async def job(self, request: Request) -> Response:
        job_id = _job_id(request)
        detail = await self._db(lambda conn: self.ops.show(conn, job_id))
        if detail is None:
            raise HTTPException(404, f"There is no job {job_id}.")
        context = {
            "title": f"Job {job_id}",
            "job": detail,
            "payload": _shown_json(detail["payload"], job_id),
            "result": None if detail["result"] is None else _shown_json(detail["result"], job_id),
            "errors": _shown_errors(detail["errors"], job_id),
            "last_error": detail["last_error"] and _shown_text(detail["last_error"], job_id),
            "related_shown": RELATED_SHOWN,
        }
        return _render(request, "job.html", context, self.settings)

    # -- actions ----------------------------------------------------------------------------

    async def job_action(self, request: Request) -> Response:
        form = await self._checked_form(request)
        job_id = _job_id(request)
        action = request.path_params["action"]
        perform: dict[str, Callable[[psycopg.Connection[Any]], bool]] = {
            "retry": lambda c: pgworkerd.retry(c, job_id, schema=self.settings.schema),
            "cancel": lambda c: pgworkerd.cancel(c, job_id, schema=self.settings.schema),
        }
        if action not in perform:
            raise HTTPException(404, "No such action.")
        if form.get("confirmed") != "1":
            return _confirm(request, f"{action.capitalize()} job {job_id}?", form)
        done = await self._db(perform[action])
        notice = {"retry": "retried", "cancel": "cancelled"}[action]
        return _redirect(request, f"/jobs/{job_id}", notice if done else f"not_{notice}")

    async def queue_action(self, request: Request) -> Response:
        form = await self._checked_form(request)
        queue, action = form.get("queue", ""), request.path_params["action"]
        schema = self.settings.schema
        perform: dict[str, Callable[[psycopg.Connection[Any]], Any]] = {
            "pause": lambda c: pgworkerd.pause_queue(c, queue, schema=schema),
            "resume": lambda c: pgworkerd.resume_queue(c, queue, schema=schema),
            # What `pgworkerd jobs retry --dead --queue Q` runs.
            "retry-dead": lambda c: self.ops.retry(c, queue=queue),
        }
        if action not in perform or not queue:
            raise HTTPException(404, "No such action.")
        if form.get("confirmed") != "1":
            label = {"retry-dead": "Retry every dead job of"}.get(action, action.capitalize())
            return _confirm(request, f"{label} queue {queue}?", form)
        done = await self._db(perform[action])
        if action == "retry-dead":
            return _redirect(request, "/", "retried_dead", n=len(done))
        return _redirect(request, "/", {"pause": "paused", "resume": "resumed"}[action])

    async def key_resume(self, request: Request) -> Response:
        form = await self._checked_form(request)
        key = form.get("key", "")
        if not key:
            raise HTTPException(404, "No such action.")
        if form.get("confirmed") != "1":
            return _confirm(request, f"Resume key {key}?", form)
        schema = self.settings.schema
        done = await self._db(lambda c: pgworkerd.resume_key(c, key, schema=schema))
        return _redirect(request, "/", "key_resumed" if done else "key_not_resumed")

    async def _checked_form(self, request: Request) -> dict[str, str]:
        """The POSTed form, once the token and origin are checked (else 403); and 403 in
        read-only mode, whatever the form."""
        if self.settings.read_only:
            raise HTTPException(403, "This dashboard is read-only.")
        stale = HTTPException(403, "The form's token is missing or stale: reload the page.")
        cookie = request.cookies.get(CSRF_COOKIE, "")
        # Before the body is read: another site's request is refused unread, whatever
        # it sends.
        if not cookie or not _same_origin(request):
            raise stale
        body = (await _bounded_body(request)).decode("utf-8", "replace")
        try:
            form = {k: v[0] for k, v in parse_qs(body, max_num_fields=20).items()}
        except ValueError:
            raise HTTPException(400, "Too many form fields.") from None
        if not secrets.compare_digest(cookie.encode(), form.get("csrf_token", "").encode()):
            raise stale
        if any("\x00" in value for value in form.values()):
            raise HTTPException(400, "A form value holds a NUL character.")
        return form

    async def _db(self, work: Callable[[psycopg.Connection[Any]], Any]) -> Any:
        return await run_in_threadpool(functools.partial(_with_connection, self.settings, work))


async def _bounded_body(request: Request) -> bytes:
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_FORM_BYTES:
        raise HTTPException(413, "The form is too large.")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise HTTPException(413, "The form is too large.")
    return bytes(body)


def _with_connection(settings: Settings, work: Callable[[psycopg.Connection[Any]], Any]) -> Any:
    try:
        connect = connections.connect(settings.dsn, application_name="pgworkerd web")
        with connect as conn, conn.transaction():
            connections.bound_transaction(
                conn, statement_timeout_ms=STATEMENT_TIMEOUT_MS, lock_timeout_ms=LOCK_TIMEOUT_MS
            )
            return work(conn)
    except InvalidJob as exc:  # a queue name that enqueue would refuse
        raise HTTPException(400, str(exc)) from None
    except (psycopg.errors.QueryCanceled, psycopg.errors.LockNotAvailable) as exc:
        log.warning("database too slow for a page: %s", " ".join(str(exc).split()))
        message = "The database did not answer in time (a lock held, or a slow query)."
        raise HTTPException(503, message) from None
    except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName) as exc:
        log.warning("schema %s not there: %s", settings.schema, " ".join(str(exc).split()))
        message = (
            f"The schema {settings.schema!r} has no pgworkerd tables: run `pgworkerd migrate`, "
            "or check database.schema."
        )
        raise HTTPException(503, message) from None
    except (psycopg.OperationalError, DatabaseURLError) as exc:
        # The page says only that: libpq's message names the host, port, user and
        # database. The log has it, without a password (connections.describe_error).
        log.warning("database unavailable: %s", connections.describe_error(exc, settings.dsn))
        message = "The database is unavailable; the server's log says why."
        raise HTTPException(503, message) from None


# -- rendering ---------------------------------------------------------------------------------


def _render(
    request: Request,
    template: str,
    context: dict[str, Any],
    settings: Settings | None = None,
    *,
    status: int = 200,
) -> HTMLResponse:
    token = request.cookies.get(CSRF_COOKIE) or secrets.token_urlsafe(32)
    root = _root(request)
    notice = NOTICES.get(request.query_params.get("notice", ""))
    if notice and "{n}" in notice:
        notice = notice.format(n=_positive_int(request.query_params.get("n")) or 0)
    html = _templates.get_template(template).render(
        request_path=request.url.path[len(root) :] or "/",
        root=root,
        csrf_token=token,
        read_only=settings.read_only if settings else False,  # error pages offer no action
        notice=notice,
        **{"refresh_s": REFRESH_S, **context},
    )
    response = HTMLResponse(html, status_code=status, headers={"cache-control": "no-store"})
    if CSRF_COOKIE not in request.cookies:
        response.set_cookie(CSRF_COOKIE, token, path=root or "/", httponly=True, samesite="strict")
    return response


def _confirm(request: Request, question: str, form: dict[str, str]) -> HTMLResponse:
    """Without script (no dialog asked), the action asks on a page of its own."""
    fields = {k: v for k, v in form.items() if k in ("queue", "key")}
    context = {"title": "Confirm", "question": question, "fields": fields, "refresh_s": 0}
    context["action"] = request.url.path[len(_root(request)) :]
    return _render(request, "confirm.html", context, None)


def _redirect(request: Request, path: str, notice: str, **extra: int) -> RedirectResponse:
    query = urlencode({"notice": notice, **extra})
    return RedirectResponse(f"{_root(request)}{path}?{query}", 303)


def _root(request: Request) -> str:
    """The app's root path: where a host mounted it, or ""."""
    scope = request.scope
    return str(scope.get(ROOT_PATH_KEY, scope.get("root_path", "")))


def _filters(request: Request) -> dict[str, str]:
    filters = {}
    for name in ("state", "queue", "kind", "key"):
        value = request.query_params.get(name, "").strip()
        if "\x00" in value:  # no name holds one, and the server refuses it in text
            raise HTTPException(400, f"The {name} filter holds a NUL character.")
        if value:
            filters[name] = value[:MAX_FILTER_CHARS]
    if filters.get("state") not in (None, *STATES):
        raise HTTPException(404, "No such state.")
    return filters


def _same_origin(request: Request) -> bool:
    """False for a request another site made. Browsers say so in Sec-Fetch-Site; an older
    one may send only Origin. The page's no-referrer policy makes browsers send
    `Origin: null` on the page's own forms, so "null" (or none) leaves it to the token."""
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        return site == "same-origin"
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        return True
    return origin.split("://", 1)[-1] == request.headers.get("host", "")


def _job_id(request: Request) -> int:
    """The path's job id; 404 for anything no job's id can be: not digits, 0, or past
    bigint, which the server could not read (a 500 and a logged traceback)."""
    job_id = _positive_int(request.path_params["job_id"])
    if job_id is None:
        raise HTTPException(404, "There is no such job.")
    return job_id


def _positive_int(text: str | None) -> int | None:
    # ASCII first: "²" and other Unicode digits pass isdigit, and int() refuses some.
    if text is None or not text.isascii() or not text.isdigit() or len(text) > 19:
        return None
    value = int(text)
    return value if 0 < value < 2**63 else None


def _error_line(tail: str | None) -> str:
    """The last line of a last error, from its last LAST_ERROR_TAIL characters (a
    traceback's last line names the exception), cut at ERROR_LINE_CHARS."""
    if not tail:
        return ""
    text = tail.rstrip()
    start = text.rfind("\n") + 1
    line = text[start:].strip()
    if start == 0 and len(tail) >= LAST_ERROR_TAIL:
        line = "…" + line  # the tail began inside the line: its start is not shown
    return line if len(line) <= ERROR_LINE_CHARS else line[:ERROR_LINE_CHARS] + "…"


def _shown_errors(errors: Any, job_id: int) -> list[dict[str, str]]:
    """The job's `errors`, newest first, each as the texts its page shows: "—" for an
    attempt or time it cannot read, an entry that is not an object shown as its JSON. The
    writer stores objects with `attempt`, `at` and `error`; a row written by SQL, another
    tool or an older version may hold anything (the page was a 500). Their texts share
    one MAX_SHOWN_CHARS, newest first: the writer keeps 20 of 4,000 characters, and 20
    tracebacks of 10,000 lines written by hand made a 6.7 MB page."""
    if not errors:
        return []
    entries = errors if isinstance(errors, list) else [errors]
    shown = []
    left = MAX_SHOWN_CHARS
    for entry in reversed(entries):
        if isinstance(entry, dict):
            attempt, at, error = entry.get("attempt"), entry.get("at"), entry.get("error")
        else:
            attempt, at, error = None, None, entry
        text = "" if error is None else _text(error)
        shown.append(
            {
                "attempt": "—" if attempt is None else _text(attempt),
                "at": overview.when_or_dash(at),
                "error": _shown_text(text, job_id, max(left, 0)),
            }
        )
        left -= len(text)
    return shown


def _shown_text(text: str, job_id: int, limit: int = MAX_SHOWN_CHARS) -> str:
    """`text` (an error, a traceback, a payload's indented JSON) up to `limit`
    characters, then a line saying where it is whole."""
    if len(text) <= limit:
        return text
    cut = f"… cut here: `pgworkerd jobs show {job_id} --json` has it whole"
    return f"{text[:limit]}\n{cut}" if limit else cut


def _text(value: Any) -> str:
    """A string as it is, anything else as its JSON (a number, an object)."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False)
    except RecursionError:
        return "(nested too deeply to show here)"


def _shown_json(value: Any, job_id: int) -> str:
    """`value` as indented JSON, cut at MAX_SHOWN_CHARS: encoded piece by piece, so the
    work stops there too."""
    pieces: list[str] = []
    size = 0
    try:
        for piece in json.JSONEncoder(indent=2, ensure_ascii=False).iterencode(value):
            pieces.append(piece)
            size += len(piece)
            if size > MAX_SHOWN_CHARS:
                return _shown_text("".join(pieces), job_id)  # cut as an error's text is
    except RecursionError:
        # Decoded (a value too deep to decode comes as the marker json_loads makes, its
        # text in it) but too deep to indent here, a frame or more a level: a row
        # written by SQL, or by a version that did not bound the depth.
        return f"(nested too deeply to show indented: `pgworkerd jobs show {job_id} --json` has it)"
    return "".join(pieces)
