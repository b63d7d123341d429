"""The dashboard over HTTP (Starlette's TestClient) against a real PostgreSQL: every page,
the actions and their CSRF token, read-only mode, basic auth, escaping, and that no DSN
or password is ever shown."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import textwrap
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict
from starlette.testclient import TestClient

import pgworkerd
from pgworkerd import config as config_module
from pgworkerd.client.operations import Operations
from pgworkerd.client.pausing import QueuePauses
from pgworkerd.storage.store import JobStore
from pgworkerd.web import create_app
from tests.daemon import REPO
from tests.integration.store_helpers import claim

SCRIPT = "<script>document.title='pwned'</script>"
TOKEN = re.compile(r'name="csrf_token" value="([^"]+)"')


@pytest.fixture
def client(db_dsn):
    with TestClient(create_app(dsn=db_dsn)) as test_client:
        yield test_client


def dead_job(conn, store: JobStore, payload=None, queue="default") -> int:
    """A job that failed its one attempt, through the store as a worker ends one."""
    job_id = pgworkerd.enqueue(conn, "send_email", payload or {}, queue=queue, max_attempts=1)
    [job] = claim(store, conn, limit=1, queues=[queue])
    assert job.id == job_id
    store.fail(conn, job.lease, "Traceback (most recent call last):\nValueError: no such address")
    return job_id


def csrf_token(client: TestClient, path: str = "/") -> str:
    match = TOKEN.search(client.get(path).text)
    assert match, f"no action form on {path}"
    return match[1]


def state_of(conn, job_id: int) -> str:
    return conn.execute("SELECT state FROM pgworkerd.jobs WHERE id = %s", [job_id]).fetchone()[0]


def assert_no_secret(text: str, dsn: str) -> None:
    params = conninfo_to_dict(dsn)
    for secret in (dsn, f"dbname={params['dbname']}", str(params.get("password") or dsn)):
        assert secret not in text


def test_overview_shows_queues_daemons_and_the_chart(client, conn, store, db_dsn):
    pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}, "queue": "mail"}] * 3)
    dead_job(conn, store, queue="reports")
    pgworkerd.pause_queue(conn, "reports")
    conn.execute(
        "INSERT INTO pgworkerd.daemons (id, hostname, pid, info)"
        " VALUES ('d-1', 'host-a', 4242, '{\"running\": 2, \"state\": \"running\"}')"
    )

    page = client.get("/")

    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    mail = _row(page.text, "mail")
    assert re.search(r'state=queued">3<', mail), mail
    reports = _row(page.text, "reports")
    assert 'state=dead">1<' in reports and "paused" in reports
    assert "Retry all dead" in reports and "Resume" in reports
    # The chart is the dead job's minute: one bar, drawn as inline SVG.
    assert reports.count("<rect") == 1 and 'role="img"' in reports
    assert "host-a" in page.text and "4242" in page.text
    assert "planner estimate" not in page.text, "never analyzed: no estimate to show"
    conn.execute("ANALYZE pgworkerd.jobs")
    assert "about 4 jobs in the table (planner estimate)" in client.get("/").text
    assert_no_secret(page.text, db_dsn)


def test_security_headers_on_pages_and_assets(client):
    for path in ("/", "/jobs", "/static/dashboard.js", "/static/dashboard.css", "/jobs/999"):
        headers = client.get(path).headers
        csp = headers["content-security-policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp, path
        assert "frame-ancestors 'none'" in csp
        assert headers["x-frame-options"] == "DENY"
        assert headers["referrer-policy"] == "no-referrer"


def test_every_asset_is_served_by_the_app(client):
    page = client.get("/").text
    references = re.findall(r'(?:src|href)="([^"#]+)"', page)
    assert references, "the page links its stylesheet and script"
    for reference in references:
        assert reference.startswith("/"), f"{reference} is not served by the app"
        assert client.get(reference.split("?")[0]).status_code == 200, reference


def test_jobs_list_filters_newest_first_with_keyset_pages(client, conn, store):
    ids = pgworkerd.enqueue_many(conn, [{"kind": "a", "payload": {}}] * 60)
    dead = dead_job(conn, store, queue="mail")
    other = pgworkerd.enqueue(conn, "b", {}, queue="mail")

    first = client.get("/jobs")
    shown = [int(i) for i in re.findall(r'href="/jobs/(\d+)"', first.text)]
    assert shown == sorted([*ids, other, dead], reverse=True)[:50]
    older = re.search(r'href="/jobs(\?before=\d+)" rel="next"', first.text)
    assert older, "a link to the older page"
    second = client.get("/jobs" + older[1].replace("&amp;", "&"))
    rest = [int(i) for i in re.findall(r'href="/jobs/(\d+)"', second.text)]
    assert rest == sorted(ids, reverse=True)[48:]
    assert 'rel="next"' not in second.text

    for query, expected in (
        ("?queue=mail", [other, dead]),
        ("?kind=b", [other]),
        ("?state=dead", [dead]),
        ("?state=queued&queue=mail", [other]),
    ):
        page = client.get("/jobs" + query)
        assert [int(i) for i in re.findall(r'href="/jobs/(\d+)"', page.text)] == expected, query
    assert client.get("/jobs?state=nonsense").status_code == 404


def test_the_key_filter_is_offered_only_when_the_jobs_have_a_key_column(db_dsn, conn):
    tenant = pgworkerd.enqueue(conn, "k", {}, key="tenant:42")
    pgworkerd.enqueue(conn, "k", {}, key="tenant:7")
    with TestClient(create_app(dsn=db_dsn)) as keyed:
        page = keyed.get("/jobs?key=tenant:42")
        assert 'name="key"' in page.text
        assert re.findall(r'href="/jobs/(\d+)"', page.text) == [str(tenant)]
    # A schema from before flow control's migration has no `key` column.
    conn.execute("ALTER TABLE pgworkerd.jobs DROP COLUMN key")
    with TestClient(create_app(dsn=db_dsn)) as plain:
        assert 'name="key"' not in plain.get("/jobs").text


def test_job_page_shows_payload_errors_and_progress(client, conn, store, db_dsn):
    job_id = dead_job(conn, store, payload={"order": 42})
    conn.execute(
        "UPDATE pgworkerd.jobs SET progress = 40, progress_stage = 'sending' WHERE id = %s",
        [job_id],
    )

    page = client.get(f"/jobs/{job_id}")

    assert page.status_code == 200
    assert "&#34;order&#34;: 42" in page.text or '"order": 42' in page.text
    assert "ValueError: no such address" in page.text
    assert "Traceback (most recent call last)" in page.text
    assert '<progress max="100" value="40.0"' in page.text and "sending" in page.text
    assert ">Retry</button>" in page.text and ">Cancel</button>" not in page.text
    assert_no_secret(page.text, db_dsn)


def test_unknown_job_and_path_are_404_pages(client):
    # Ids past bigint were a 500 and a logged traceback: the server could not read them;
    # past 4,300 digits, neither could Starlette's int convertor.
    for path in (
        "/jobs/987654",
        "/nowhere",
        "/jobs/0",
        "/jobs/9223372036854775808",
        "/jobs/99999999999999999999",
        "/jobs/" + "1" * 5000,
        "/jobs/-1",
        "/jobs/abc",
        "/jobs/%C2%B2",
        # Decoded, these match the action route's path: they were a 405.
        "/jobs/1%2Fretry",
        "/jobs/1%2fcancel",
        "/jobs/1/retry",
    ):
        page = client.get(path)
        assert page.status_code == 404, path
        assert "<h1>Not found</h1>" in page.text
    # A trailing slash still goes to the page without it.
    assert client.get("/jobs/7/", follow_redirects=False).headers["location"].endswith("/jobs/7")


def test_numbers_in_the_query_string_out_of_range_or_not_ascii_are_ignored(client, conn):
    # "²" is a digit to str.isdigit, not to int(): a 500, as a bigint overflow was.
    job_id = pgworkerd.enqueue(conn, "k", {})
    for query in (
        "?before=9223372036854775808",
        "?before=99999999999999999999",
        "?before=0",
        "?before=-1",
        "?before=abc",
        "?before=%C2%B2",
        "?before=%D9%A1",
    ):
        page = client.get("/jobs" + query)
        assert page.status_code == 200, query
        assert f'href="/jobs/{job_id}"' in page.text, f"{query}: read as the first page"
    for n in ("%C2%B2", "99999999999999999999", "-3"):
        page = client.get(f"/?notice=retried_dead&n={n}")
        assert page.status_code == 200, n
        assert "Dead jobs of the queue queued again: 0." in page.text, n


def test_a_script_payload_is_shown_as_text(client, conn):
    job_id = pgworkerd.enqueue(conn, SCRIPT, {"note": SCRIPT}, queue="q<b>")

    for path in (f"/jobs/{job_id}", "/jobs", "/"):
        text = client.get(path).text
        assert "<script>document" not in text, path
        assert "<b>" not in text and "q&lt;b&gt;" in text, path
    for path in (f"/jobs/{job_id}", "/jobs"):
        assert "&lt;script&gt;document" in client.get(path).text, path


def test_retry_and_cancel_through_the_form(client, conn, store):
    dead = dead_job(conn, store)
    queued = pgworkerd.enqueue(conn, "k", {})
    token = csrf_token(client, f"/jobs/{dead}")

    retried = client.post(
        f"/jobs/{dead}/retry", data={"csrf_token": token, "confirmed": "1"}, follow_redirects=False
    )
    assert retried.status_code == 303
    assert retried.headers["location"] == f"/jobs/{dead}?notice=retried"
    assert state_of(conn, dead) == "queued"
    assert "Job queued again." in client.get(retried.headers["location"]).text

    cancelled = client.post(f"/jobs/{queued}/cancel", data={"csrf_token": token, "confirmed": "1"})
    assert cancelled.status_code == 200 and "Job cancelled." in cancelled.text
    assert state_of(conn, queued) == "cancelled"
    # A second cancel changes nothing and says so.
    again = client.post(f"/jobs/{queued}/cancel", data={"csrf_token": token, "confirmed": "1"})
    assert "Not cancelled" in again.text


def test_an_unconfirmed_action_asks_on_a_page_and_changes_nothing(client, conn, store):
    dead = dead_job(conn, store)
    token = csrf_token(client, f"/jobs/{dead}")

    page = client.post(f"/jobs/{dead}/retry", data={"csrf_token": token})

    assert page.status_code == 200 and f"Retry job {dead}?" in page.text
    assert 'name="confirmed" value="1"' in page.text
    assert state_of(conn, dead) == "dead"


def test_queue_actions_pause_resume_and_retry_all_dead(client, conn, store):
    first, second = dead_job(conn, store, queue="mail"), dead_job(conn, store, queue="mail")
    elsewhere = dead_job(conn, store, queue="reports")
    token = csrf_token(client)
    form = {"csrf_token": token, "confirmed": "1", "queue": "mail"}

    assert "Queue paused" in client.post("/queues/pause", data=form).text
    assert "mail" in QueuePauses().paused(conn)
    assert "Queue resumed." in client.post("/queues/resume", data=form).text
    assert "mail" not in QueuePauses().paused(conn)

    page = client.post("/queues/retry-dead", data=form)
    assert "Dead jobs of the queue queued again: 2." in page.text
    assert [state_of(conn, i) for i in (first, second, elsewhere)] == ["queued", "queued", "dead"]


@pytest.mark.parametrize(
    "form",
    [
        {"confirmed": "1"},
        {"confirmed": "1", "csrf_token": "forged"},
    ],
    ids=["no token", "wrong token"],
)
def test_a_post_without_the_page_token_is_refused(client, conn, store, form):
    dead = dead_job(conn, store)
    csrf_token(client)  # the client holds a token cookie: only the form lacks it

    refused = client.post(f"/jobs/{dead}/retry", data=form)

    assert refused.status_code == 403
    assert state_of(conn, dead) == "dead"


def test_a_queue_name_enqueue_would_refuse_is_a_400_page(client, conn):
    client.get("/")
    token = client.cookies.get("pgworkerd_csrf")
    form = {"csrf_token": token, "confirmed": "1", "queue": "bad\x00name"}

    page = client.post("/queues/pause", data=form)

    assert page.status_code == 400 and "<h1>Bad request</h1>" in page.text
    assert QueuePauses().paused(conn) == {}


@pytest.mark.parametrize(
    "headers",
    [{"origin": "https://evil.example"}, {"sec-fetch-site": "cross-site", "origin": "null"}],
    ids=["other origin", "marked cross-site"],
)
def test_a_cross_site_post_is_refused_even_with_the_token(client, conn, store, headers):
    dead = dead_job(conn, store)
    token = csrf_token(client)

    refused = client.post(
        f"/jobs/{dead}/retry", data={"csrf_token": token, "confirmed": "1"}, headers=headers
    )

    assert refused.status_code == 403
    assert state_of(conn, dead) == "dead"


def test_read_only_shows_no_action_and_refuses_posts(db_dsn, conn, store):
    dead = dead_job(conn, store, queue="mail")
    queued = pgworkerd.enqueue(conn, "k", {}, queue="mail")
    with TestClient(create_app(dsn=db_dsn, read_only=True)) as client:
        for path in ("/", "/jobs", f"/jobs/{dead}", f"/jobs/{queued}"):
            page = client.get(path)
            assert page.status_code == 200
            assert '<form method="post"' not in page.text, path
            for label in ("Retry", "Cancel", "Pause", "Resume", "Retry all dead"):
                assert f">{label}</button>" not in page.text, (path, label)
        assert "read-only" in client.get("/").text
        token = client.cookies.get("pgworkerd_csrf")
        refused = client.post(f"/jobs/{dead}/retry", data={"csrf_token": token, "confirmed": "1"})
    assert refused.status_code == 403
    assert state_of(conn, dead) == "dead"


def test_basic_auth_from_the_config_and_environment(db_dsn, monkeypatch):
    monkeypatch.setenv("PGWORKERD_WEB_PASSWORD", "s3cret-pw")
    config = config_module.parse(
        f"database: {{url: '{db_dsn}'}}\nweb: {{auth: {{username: admin}}}}\n"
    )
    with TestClient(create_app(config)) as client:
        refused = client.get("/")
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"].startswith("Basic")
        assert client.get("/", auth=("admin", "wrong")).status_code == 401
        assert client.get("/", auth=("root", "s3cret-pw")).status_code == 401
        assert client.get("/static/dashboard.js").status_code == 401
        page = client.get("/", auth=("admin", "s3cret-pw"))
        assert page.status_code == 200
        assert "s3cret-pw" not in page.text
        assert_no_secret(page.text, db_dsn)


def test_auth_without_a_password_is_refused_at_start(db_dsn, monkeypatch):
    monkeypatch.delenv("PGWORKERD_WEB_PASSWORD", raising=False)
    config = config_module.parse(f"database: {{url: '{db_dsn}'}}\nweb: {{auth: {{username: a}}}}")
    with pytest.raises(config_module.ConfigError, match="PGWORKERD_WEB_PASSWORD"):
        create_app(config)
    # Only whitespace (a blank line of a secrets file) was taken as the password.
    for blank in ("", " ", "\t\n"):
        monkeypatch.setenv("PGWORKERD_WEB_PASSWORD", blank)
        with pytest.raises(config_module.ConfigError, match="PGWORKERD_WEB_PASSWORD"):
            create_app(config)


def test_serve_refuses_a_blank_password_in_one_line_and_exit_2(tmp_path, db_dsn):
    config = tmp_path / "c.yaml"
    config.write_text(f"database: {{url: '{db_dsn}'}}\nweb: {{auth: {{username: a}}}}\n")
    for blank in ("", "   ", "\t"):
        env = {**os.environ, "PGWORKERD_WEB_PASSWORD": blank}
        # A port no one listens on: were the password taken, the server would start.
        done = run_cli("web", "-c", str(config), "--listen", f"127.0.0.1:{_free_port()}", env=env)

        assert done.returncode == 2, (blank, done.stderr)
        assert done.stderr.strip().splitlines() == [
            "pgworkerd: error: web.auth: set the password in PGWORKERD_WEB_PASSWORD (not blank)"
        ]
        assert done.stdout == ""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_database_error_page_shows_no_password(pg_admin_dsn):
    params = conninfo_to_dict(pg_admin_dsn)
    dsn = f"postgresql://nobody:hunter2-pw@{params['host']}:{params['port']}/nowhere"
    with TestClient(create_app(dsn=dsn)) as client:
        page = client.get("/")
    assert page.status_code == 503
    assert "Database unavailable" in page.text
    for secret in ("hunter2-pw", "nobody", "nowhere", str(params["port"])):
        assert secret not in page.text


# -- the command -------------------------------------------------------------------------------


def run_cli(*args, env=None, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "pgworkerd", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=cwd,
    )


def test_a_listen_beyond_loopback_without_auth_is_refused(tmp_path, db_dsn):
    config = tmp_path / "c.yaml"
    config.write_text(f"database: {{url: '{db_dsn}'}}\n")

    done = run_cli("web", "-c", str(config), "--listen", "0.0.0.0:9188")

    assert done.returncode == 2
    # The config validator's rule and words, naming the option.
    assert done.stderr.strip().splitlines() == [
        "pgworkerd: error: --listen: 0.0.0.0:9188 is beyond loopback and needs web.auth"
        " (a username, and the password in PGWORKERD_WEB_PASSWORD)"
    ]


def test_an_empty_or_malformed_listen_is_one_line_and_exit_2(tmp_path, db_dsn):
    # '' fell back to the config's web.listen for the address but not for the loopback
    # check, which then read '' itself: a ValueError traceback and exit 1.
    config = tmp_path / "c.yaml"
    config.write_text(f"database: {{url: '{db_dsn}'}}\n")
    for address in ("", "9188", "127.0.0.1:"):
        done = run_cli("web", "-c", str(config), "--listen", address)

        assert done.returncode == 2, (address, done.stderr)
        assert done.stderr.strip().splitlines() == [
            f"pgworkerd: error: --listen: must be host:port such as 127.0.0.1:9187, not {address!r}"
        ]
        assert done.stdout == ""


def test_a_taken_port_is_one_line_and_exit_2(tmp_path, db_dsn):
    # uvicorn bound it: it printed our "serving" line, then its own error, and exit 3.
    config = tmp_path / "c.yaml"
    config.write_text(f"database: {{url: '{db_dsn}'}}\n")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"

        done = run_cli("web", "-c", str(config), "--listen", address)

    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"pgworkerd: error: --listen: cannot listen on {address}: Address already in use"
    ]
    assert done.stdout == ""


def test_a_database_url_that_cannot_be_parsed_is_refused_at_start(tmp_path):
    # It served, each page a 500 whose logged traceback held the whole URL.
    config = tmp_path / "c.yaml"
    config.write_text("database: {url: 'postgres//u:s3cretpw@h/db'}\n")

    done = run_cli("web", "-c", str(config), "--listen", "127.0.0.1:9188")

    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "database.url is not a PostgreSQL URL" in lines[0], done.stderr
    assert "s3cret" not in done.stderr + done.stdout


def test_without_the_extra_the_command_says_how_to_install_it(tmp_path, db_dsn):
    # A package named starlette that cannot be imported stands in for a missing one.
    shadow = tmp_path / "shadow" / "starlette"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'starlette'\", name='starlette')\n"
    )
    env = {"PYTHONPATH": f"{shadow.parent}:{REPO}", "PATH": "/usr/bin:/bin"}

    done = run_cli("web", "--listen", "127.0.0.1:9", env=env, cwd=tmp_path)

    assert done.returncode == 2
    assert done.stderr.strip() == (
        "pgworkerd: error: web: the dashboard needs the web extra: pip install 'pgworkerd[web]'"
    )


def test_nothing_outside_the_web_package_imports_its_framework():
    code = textwrap.dedent(
        """
        import sys, pgworkerd, pgworkerd.cli.main, pgworkerd.client.operations
        import pgworkerd.storage.dashboard
        pgworkerd.cli.main.build_parser()
        print(sorted(m for m in ("starlette", "jinja2", "uvicorn") if m in sys.modules))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def _row(html: str, queue: str) -> str:
    match = re.search(rf'<tr data-queue="{re.escape(queue)}">(.*?)</tr>', html, re.S)
    assert match, f"no row for queue {queue}"
    return match[1]


def test_mounted_in_a_host_app_links_and_actions_stay_under_the_prefix(db_dsn, conn, store):
    from examples.web_mount import build

    dead = dead_job(conn, store)
    staff = {"x-staff": "yes"}
    with TestClient(build(db_dsn), headers=staff) as client:
        assert client.get("/").text.startswith("the host application")
        page = client.get(f"/admin/jobs/jobs/{dead}")
        assert page.status_code == 200
        assert 'href="/admin/jobs/static/dashboard.css"' in page.text
        assert f'action="/admin/jobs/jobs/{dead}/retry"' in page.text
        assert client.get("/admin/jobs/static/dashboard.js").status_code == 200
        assert client.cookies.jar and all(c.path == "/admin/jobs" for c in client.cookies.jar)
        token = TOKEN.search(page.text)[1]
        done = client.post(
            f"/admin/jobs/jobs/{dead}/retry",
            data={"csrf_token": token, "confirmed": "1"},
            follow_redirects=False,
        )
        assert done.headers["location"] == f"/admin/jobs/jobs/{dead}?notice=retried"
        assert client.get("/admin/jobs/", headers={"x-staff": "no"}).status_code == 403
    assert state_of(conn, dead) == "queued"


def test_a_rare_filter_walks_one_window_of_ids_a_page(client, conn, monkeypatch):
    from pgworkerd.web import views

    monkeypatch.setattr(views, "SCAN_WINDOW", 20)
    rare = pgworkerd.enqueue(conn, "rare", {})
    common = pgworkerd.enqueue_many(conn, [{"kind": "common", "payload": {}}] * 45)

    page = client.get("/jobs?kind=rare")
    pages = 1
    while f'href="/jobs/{rare}"' not in page.text:
        # A window of 20 ids a page, at most, and the page says which ids it searched.
        searched = re.search(r"Searched jobs (\d+) to (\d+)", page.text)
        assert searched and int(searched[2]) - int(searched[1]) == 19, page.text
        older = re.search(r'href="/jobs(\?[^"]+)" rel="next"', page.text)
        assert older, "a link to the next window"
        page = client.get("/jobs" + older[1].replace("&amp;", "&"))
        pages += 1
    assert pages == 3, "46 ids, 20 a page: the rare job is on the third"
    assert max(common) - rare == 45


def _key_row(html: str, key: str) -> str:
    match = re.search(rf'<tr data-key="{re.escape(key)}">(.*?)</tr>', html, re.S)
    assert match, f"no row for key {key}"
    return match[1]


def test_overview_lists_paused_keys_with_their_ready_jobs(client, conn, store):
    assert "No key is paused." in client.get("/").text
    # tenant:42 holds two ready jobs back (one scheduled for later and one running are
    # not ready); tenant:7 is paused with none; tenant:9's pause has ended.
    pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}, "key": "tenant:42"}] * 3)
    [running] = claim(store, conn, limit=1)
    pgworkerd.enqueue(conn, "k", {}, key="tenant:42", delay=3600)
    pgworkerd.enqueue(conn, "k", {}, key="tenant:8")
    pgworkerd.pause_key(conn, "tenant:42", 600)
    pgworkerd.pause_key(conn, "tenant:7", 90)
    pgworkerd.pause_key(conn, "tenant:9", 0)

    page = client.get("/")

    assert page.status_code == 200
    keys = re.findall(r'<tr data-key="([^"]+)">', page.text)
    assert keys == ["tenant:42", "tenant:7"]
    row = _key_row(page.text, "tenant:42")
    assert 'href="/jobs?key=tenant%3A42"' in row, "the jobs page's key filter"
    assert re.search(r'href="/jobs\?key=tenant%3A42&amp;state=queued">2<', row), row
    assert re.search(r"<td>(9 min|10 min)</td>", row), "how long is left"
    assert re.search(r'state=queued">0<', _key_row(page.text, "tenant:7"))
    assert 'name="key" value="tenant:42"' in row and ">Resume</button>" in row
    held = conn.execute("SELECT key FROM pgworkerd.jobs WHERE id = %s", [running.id])
    assert held.fetchone() == ("tenant:42",), "the running job is the key's: not counted"


def test_resume_a_key_from_the_overview(client, conn):
    pgworkerd.pause_key(conn, "tenant:42", 600)
    token = csrf_token(client)

    asked = client.post("/keys/resume", data={"csrf_token": token, "key": "tenant:42"})
    assert asked.status_code == 200 and "Resume key tenant:42?" in asked.text
    assert 'name="key" value="tenant:42"' in asked.text, "the confirm page carries the key"
    assert _paused(conn) == ["tenant:42"]

    form = {"csrf_token": token, "confirmed": "1", "key": "tenant:42"}
    done = client.post("/keys/resume", data=form, follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"] == "/?notice=key_resumed"
    assert _paused(conn) == []
    page = client.get(done.headers["location"]).text
    assert "Key resumed: its jobs start again." in page and "No key is paused." in page
    again = client.post("/keys/resume", data=form)
    assert "Not resumed: the key&#39;s pause had already ended." in again.text
    assert client.post("/keys/resume", data={**form, "key": ""}).status_code == 404


@pytest.mark.parametrize("form", [{}, {"csrf_token": "forged"}], ids=["no token", "wrong token"])
def test_resuming_a_key_without_the_page_token_is_refused(client, conn, form):
    pgworkerd.pause_key(conn, "tenant:42", 600)
    csrf_token(client)

    refused = client.post("/keys/resume", data={**form, "confirmed": "1", "key": "tenant:42"})

    assert refused.status_code == 403
    assert _paused(conn) == ["tenant:42"]


def test_read_only_lists_paused_keys_without_the_resume_action(db_dsn, conn):
    pgworkerd.pause_key(conn, "tenant:42", 600)
    with TestClient(create_app(dsn=db_dsn, read_only=True)) as client:
        page = client.get("/").text
        row = _key_row(page, "tenant:42")
        assert "<form" not in row and "Resume" not in row
        token = client.cookies.get("pgworkerd_csrf")
        form = {"csrf_token": token, "confirmed": "1", "key": "tenant:42"}
        assert client.post("/keys/resume", data=form).status_code == 403
    assert _paused(conn) == ["tenant:42"]


def test_the_overview_of_a_schema_without_key_pauses_has_no_keys_section(db_dsn, conn):
    conn.execute("ALTER TABLE pgworkerd.jobs DROP COLUMN key")
    conn.execute("DROP TABLE pgworkerd.paused_keys")
    with TestClient(create_app(dsn=db_dsn)) as client:
        page = client.get("/")
    assert page.status_code == 200 and "Paused keys" not in page.text


def _paused(conn) -> list[str]:
    rows = conn.execute("SELECT key FROM pgworkerd.paused_keys WHERE until > now()")
    return sorted(row[0] for row in rows.fetchall())


def test_the_jobs_list_and_a_job_page_show_the_job_key(client, conn):
    keyed = pgworkerd.enqueue(conn, "k", {}, key="tenant:42")
    plain = pgworkerd.enqueue(conn, "k", {})

    listing = client.get("/jobs").text
    rows = dict(re.findall(r'href="/jobs/(\d+)">\d+</a></td>(.*?)</tr>', listing, re.S))
    assert '<a href="/jobs?key=tenant%3A42">tenant:42</a>' in rows[str(keyed)]
    assert '<td class="key">—</td>' in rows[str(plain)]
    page = client.get(f"/jobs/{keyed}").text
    assert '<dt>Key</dt><dd><a href="/jobs?key=tenant%3A42">tenant:42</a></dd>' in page
    assert "<dt>Key</dt><dd>—</dd>" in client.get(f"/jobs/{plain}").text


def test_the_overview_counts_each_queues_waiting_jobs(client, conn):
    export = pgworkerd.enqueue(conn, "export", {}, queue="exports")
    pgworkerd.enqueue_many(
        conn, [{"kind": "email", "payload": {}, "queue": "mail", "after": [export]}] * 2
    )
    mail = _row(client.get("/").text, "mail")
    assert 'state=waiting">2<' in mail and 'state=queued">0<' in mail, mail
    assert 'state=waiting">0<' in _row(client.get("/").text, "exports")


def test_a_job_page_lists_what_it_runs_after_and_what_runs_after_it(client, conn):
    first = pgworkerd.enqueue(conn, "export", {})
    second = pgworkerd.enqueue(conn, "export", {})
    email = pgworkerd.enqueue(conn, "email", {}, after=[first, second])

    page = client.get(f"/jobs/{email}").text
    runs_after = page.split('<h2 id="dependencies-h">Runs after</h2>')[1].split("</section>")[0]
    for dependency in (first, second):
        assert f'<a href="/jobs/{dependency}">Job {dependency}</a> · export' in runs_after
    assert '<span class="state state-waiting">waiting</span>' not in runs_after
    assert runs_after.count('<span class="state state-queued">queued</span>') == 2
    assert 'id="dependents-h"' not in page, "nothing runs after the email"

    parent = client.get(f"/jobs/{first}").text
    run_after_it = parent.split('<h2 id="dependents-h">Run after it</h2>')[1]
    assert f'<a href="/jobs/{email}">Job {email}</a> · email' in run_after_it
    assert '<span class="state state-waiting">waiting</span>' in run_after_it
    assert 'id="dependencies-h"' not in parent
    assert 'id="dependencies-h"' not in client.get(f"/jobs/{second}").text


LIMITS_CONFIG = """
queues:
  payments: {concurrency: 2, rate: 10/m}
  crawl: {per_key: {concurrency: 1}, fair: true}
  feeds: {per_key: {rate: 1/h}}
  mail: {}
"""


def _limits_app(db_dsn: str, extra: str = LIMITS_CONFIG):
    return create_app(config_module.parse(f"database: {{url: '{db_dsn}'}}\n{extra}"))


def _limit_row(page: str, queue: str) -> list[str]:
    match = re.search(rf'<tr data-limited-queue="{queue}">(.*?)</tr>', page, re.S)
    assert match, f"no limits row for {queue}"
    return [
        re.sub(r"<[^>]+>", "", cell).strip()
        for cell in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", match[1], re.S)
    ]


def test_overview_shows_the_config_limits_and_what_they_do_now(db_dsn, conn):
    config = config_module.parse(f"database: {{url: '{db_dsn}'}}\n{LIMITS_CONFIG}")
    store = JobStore(limits=config.queue_limits())
    # payments: 2 of 5 start (its concurrency), the other 3 are ready and held back.
    pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}, "queue": "payments"}] * 5)
    assert len(claim(store, conn, limit=10, queues=["payments"])) == 2
    # crawl: tenant:1's first job runs; its second is held back by per_key concurrency 1,
    # tenant:2's is not; a job scheduled for later is not ready.
    pgworkerd.enqueue(conn, "k", {}, queue="crawl", key="tenant:1")
    assert len(claim(store, conn, limit=1, queues=["crawl"])) == 1
    pgworkerd.enqueue(conn, "k", {}, queue="crawl", key="tenant:1")
    pgworkerd.enqueue(conn, "k", {}, queue="crawl", key="tenant:2")
    pgworkerd.enqueue(conn, "k", {}, queue="crawl", key="tenant:3", delay=3600)
    # feeds: tenant:1 started once this hour (per_key rate 1/h): its next job is held back,
    # though nothing of the queue runs now.
    pgworkerd.enqueue(conn, "k", {}, queue="feeds", key="tenant:1")
    [started] = claim(store, conn, limit=1, queues=["feeds"])
    store.complete(conn, [(started.lease, None)])
    pgworkerd.enqueue(conn, "k", {}, queue="feeds", key="tenant:1")
    pgworkerd.enqueue(conn, "k", {}, queue="feeds", key="tenant:2")

    with TestClient(_limits_app(db_dsn)) as client:
        page = client.get("/")

    assert page.status_code == 200 and '<h2 id="limits-h">Limits</h2>' in page.text
    assert re.findall(r'<tr data-limited-queue="([^"]+)">', page.text) == [
        "crawl",
        "feeds",
        "payments",
    ]
    # queue, concurrency, rate, per key, fair, running, starts in window, ready, held back
    assert _limit_row(page.text, "payments") == [
        "payments",
        "2",
        "10/m",
        "—",
        "no",
        "2",
        "2",
        "3",
        "3",
    ]
    assert _limit_row(page.text, "crawl") == [
        "crawl",
        "—",
        "—",
        "concurrency 1",
        "yes",
        "1",
        "—",
        "2",
        "1",
    ]
    # The same numbers as `pgworkerd status` (one statement, limits_sample, for both).
    status = Operations().status(conn, limits=config.queue_limits())
    assert [(q["queue"], q["running"], q["ready"], q["held_back"]) for q in status["limits"]] == [
        ("crawl", 1, 2, 1),
        ("feeds", 0, 2, 1),
        ("payments", 2, 3, 3),
    ]
    assert_no_secret(page.text, db_dsn)


def test_no_limits_section_without_limits_in_the_config(db_dsn, conn):
    pgworkerd.enqueue(conn, "k", {}, queue="payments")
    with TestClient(create_app(dsn=db_dsn)) as client:  # no config: no limits known
        assert "Limits</h2>" not in client.get("/").text
    with TestClient(_limits_app(db_dsn, "queues: {payments: {}}")) as client:
        page = client.get("/")
        assert page.status_code == 200 and "Limits</h2>" not in page.text


def test_limits_on_a_schema_from_before_them_say_to_migrate(db_dsn, conn):
    conn.execute("DELETE FROM pgworkerd.migrations WHERE version >= 7")
    conn.execute("DROP TABLE pgworkerd.starts")
    with TestClient(_limits_app(db_dsn)) as client:
        page = client.get("/")
    assert page.status_code == 200
    assert "the schema predates them: run <code>pgworkerd migrate</code>" in page.text


# -- found by the round-21 review: bounds, bad input, the database's time zone ---------------


def test_a_deeply_nested_payload_is_shown_cut_not_multiplied(client, conn):
    # 800 kB nested 60 deep was indented into a 50 MB page (3.9 s).
    payload: Any = [0] * 40_000
    for _ in range(60):
        payload = [payload]
    job_id = pgworkerd.enqueue(conn, "k", payload)

    page = client.get(f"/jobs/{job_id}")

    assert page.status_code == 200
    assert len(page.content) < 400_000, len(page.content)
    assert f"cut here: `pgworkerd jobs show {job_id} --json` has it whole" in page.text
    small = pgworkerd.enqueue(conn, "k", {"to": "a@example.com"})
    assert "cut here" not in client.get(f"/jobs/{small}").text


def test_a_job_page_lists_a_bounded_number_of_dependents(client, conn):
    first = pgworkerd.enqueue(conn, "k", {})
    pgworkerd.enqueue_many(conn, [{"kind": "d", "payload": {}, "after": [first]}] * 250)

    page = client.get(f"/jobs/{first}").text

    section = page[page.index('class="dependents"') :]
    assert section.count("<li>") == 200
    assert "And 50 more" in section and f"pgworkerd jobs show {first} --json" in section


def test_the_overview_lists_a_bounded_number_of_queues_configured_ones_first(db_dsn, conn):
    config = config_module.parse(f"database: {{url: '{db_dsn}'}}\nqueues: {{zz-configured: {{}}}}")
    jobs = [{"kind": "k", "payload": {}, "queue": f"tenant-{n:03}"} for n in range(250)]
    pgworkerd.enqueue_many(conn, jobs + [{"kind": "k", "payload": {}, "queue": "tenant-249"}] * 5)

    with TestClient(create_app(config)) as client:
        page = client.get("/").text

    rows = re.findall(r'<tr data-queue="([^"]+)"', page)
    assert len(rows) == 200 and rows == sorted(rows)
    assert "zz-configured" in rows and "tenant-249" in rows, "configured, then busiest"
    assert "And 51 more queues" in page


@pytest.mark.parametrize("name", ["queue", "kind", "key"])
def test_a_nul_in_a_filter_is_a_400(client, name):
    # It reached the server, which refused it: a bare 500 and a logged traceback.
    page = client.get(f"/jobs?{name}=a%00b")
    assert page.status_code == 400
    assert "NUL character" in page.text
    assert "content-security-policy" in page.headers


def test_actions_on_ids_no_job_can_have_and_nul_queues_are_refused_cleanly(client, conn):
    pgworkerd.enqueue(conn, "k", {})  # a queue, and its forms
    token = csrf_token(client)
    for path in (
        "/jobs/99999999999999999999/cancel",
        "/jobs/9223372036854775808/retry",
        "/jobs/" + "1" * 5000 + "/retry",
        "/jobs/0/retry",
    ):
        refused = client.post(path, data={"csrf_token": token, "confirmed": "1"})
        assert refused.status_code == 404, (path, refused.status_code)
    nul = client.post(
        "/queues/retry-dead", data={"csrf_token": token, "confirmed": "1", "queue": "a\x00b"}
    )
    assert nul.status_code == 400


def test_a_form_over_the_limit_is_413_and_another_sites_is_refused_unread(client, conn):
    pgworkerd.enqueue(conn, "k", {})
    token = csrf_token(client)
    big = client.post(
        "/queues/pause", data={"csrf_token": token, "queue": "x" * 20_000, "confirmed": "1"}
    )
    assert big.status_code == 413
    cross = client.post(
        "/queues/pause",
        content=b"x" * 100_000,
        headers={"sec-fetch-site": "cross-site", "content-type": "text/plain"},
    )
    assert cross.status_code == 403


def test_far_timestamps_in_a_database_of_another_time_zone_are_shown(db_dsn, conn, pg_admin_dsn):
    # 9999-12-31T23:30Z is year 10000 in Berlin: psycopg could not read it, and the jobs
    # list, the job's page and (for a key paused until then) the overview were 500s.
    name = conninfo_to_dict(db_dsn)["dbname"]
    with psycopg.connect(pg_admin_dsn, autocommit=True) as admin:
        admin.execute(f"ALTER DATABASE \"{name}\" SET timezone = 'Europe/Berlin'")
    job_id = conn.execute(
        "INSERT INTO pgworkerd.jobs (queue, kind, payload, run_at)"
        " VALUES ('default', 'k', '{}', '9999-12-31T23:30:00Z') RETURNING id"
    ).fetchone()[0]
    conn.execute(
        "INSERT INTO pgworkerd.paused_keys (key, until) VALUES ('k1', '9999-12-31T23:30:00Z')"
    )

    with TestClient(create_app(dsn=db_dsn)) as client:
        for path in ("/jobs", f"/jobs/{job_id}", "/"):
            page = client.get(path)
            assert page.status_code == 200, (path, page.status_code)
        assert "9999-12-31 23:30:00+00:00" in client.get(f"/jobs/{job_id}").text


def test_a_payload_too_deep_to_decode_is_shown_on_its_page(db_dsn, conn):
    # Written by SQL (enqueue refuses it: review 24, F2): the page was a 500.
    deep = "[" * 5000 + "]" * 5000
    job_id = conn.execute(
        "INSERT INTO pgworkerd.jobs (queue, kind, payload) VALUES ('default', 'k', %s::jsonb)"
        " RETURNING id",
        (deep,),
    ).fetchone()[0]
    with TestClient(create_app(dsn=db_dsn)) as client:
        page = client.get(f"/jobs/{job_id}")
    assert page.status_code == 200
    assert "nested too deeply to decode here" in page.text
    assert "[" * 200 in page.text  # its text, as stored


def test_a_fault_of_ours_is_a_500_page_with_the_security_headers(db_dsn, conn):
    # A run_at past year 9999 in UTC (stored by hand: enqueue refuses it) is one psycopg
    # cannot read: the page fails, and the error page still carries the headers.
    job_id = conn.execute(
        "INSERT INTO pgworkerd.jobs (queue, kind, payload, run_at)"
        " VALUES ('default', 'k', '{}', '10000-06-01T00:00:00Z') RETURNING id"
    ).fetchone()[0]
    with TestClient(create_app(dsn=db_dsn), raise_server_exceptions=False) as client:
        page = client.get(f"/jobs/{job_id}")
    assert page.status_code == 500
    assert "Something went wrong" in page.text and "log says what" in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["x-frame-options"] == "DENY"


# -- found by the round-25 review ------------------------------------------------------------


def _dead_row(conn, queue: str = "default", **columns: Any) -> int:
    """A dead job written by SQL, as another tool or an older version might write it."""
    names = ", ".join(columns)
    marks = ", ".join(["%s"] * len(columns))
    return conn.execute(
        f"INSERT INTO pgworkerd.jobs (queue, kind, payload, state, finished_at, {names})"
        f" VALUES (%s, 'k', '{{}}', 'dead', now(), {marks}) RETURNING id",
        [queue, *columns.values()],
    ).fetchone()[0]


@pytest.mark.parametrize(
    "entry",
    [
        {"attempt": 1, "error": "boom-text"},
        {"attempt": 1, "at": "yesterday", "error": "boom-text"},
        {"attempt": 1, "at": 5, "error": "boom-text"},
        {"at": "2026-11-29T10:00:00+00:00", "error": "boom-text"},
        "boom-text",
    ],
    ids=["no at", "at not ISO", "numeric at", "no attempt", "bare string"],
)
def test_a_malformed_errors_entry_is_shown_not_a_500(db_dsn, conn, entry):
    # Written by SQL, another tool or an older version: the page was a 500.
    job_id = _dead_row(conn, errors=psycopg.types.json.Jsonb([entry]))
    with TestClient(create_app(dsn=db_dsn)) as client:
        page = client.get(f"/jobs/{job_id}")
    assert page.status_code == 200
    assert "boom-text" in page.text
    item = re.search(r'<ol class="errors" reversed>\s*<li><p>(.*?)</p>', page.text)
    assert item, page.text
    if entry == "boom-text" or "at" not in entry or entry["at"] in ("yesterday", 5):
        assert item[1].endswith("· —"), item[1]
    else:
        assert "2026-11-29 10:00:00+00:00" in item[1] and item[1].startswith("Attempt —")


def test_error_texts_are_cut_on_the_list_and_the_job_page(client, conn):
    # Written by SQL or an older version (the writer bounds them): 50 dead jobs of 1 MB
    # each made a 50 MB list page, 20 long tracebacks a 6.7 MB job page.
    huge = 300_000
    one_line = _dead_row(conn, queue="big", last_error="E" * huge)
    traceback = (
        "Traceback (most recent call last):\n" + "  x\n" * (huge // 4) + "RuntimeError: boom"
    )
    errors = [{"attempt": a, "at": "2026-11-29T10:00:00+00:00", "error": traceback} for a in (1, 2)]
    many = _dead_row(
        conn, queue="big", last_error=traceback, errors=psycopg.types.json.Jsonb(errors * 10)
    )
    only_last = _dead_row(conn, queue="big", last_error="L" * huge)

    listed = client.get("/jobs?queue=big")
    assert listed.status_code == 200
    assert len(listed.content) < 30_000, len(listed.content)
    cells = dict(
        re.findall(r'href="/jobs/(\d+)">.*?<td class="error-line">(.*?)</td>', listed.text, re.S)
    )
    assert cells[str(many)] == "RuntimeError: boom"
    assert cells[str(one_line)] == "…" + "E" * 199 + "…"

    cut = f"… cut here: `pgworkerd jobs show {many} --json` has it whole"
    page = client.get(f"/jobs/{many}")
    assert page.status_code == 200
    assert len(page.content) < 400_000, len(page.content)
    assert page.text.count("<li><p>Attempt") == 20
    assert page.text.count(cut) == 20  # the newest up to the bound, the others cut
    assert page.text.count("Traceback (most recent call last)") == 1
    page = client.get(f"/jobs/{only_last}")
    assert len(page.content) < 300_000, len(page.content)
    assert f"… cut here: `pgworkerd jobs show {only_last} --json` has it whole" in page.text
    assert "cut here" not in client.get(f"/jobs/{_dead_row(conn, last_error='short')}").text


def test_a_404_under_static_links_and_sets_its_cookie_from_the_apps_root(db_dsn):
    # The /static mount sets root_path to /static: the page linked /static/static/... and
    # set the CSRF cookie with Path=/static.
    from examples.web_mount import build

    for app, prefix, headers in (
        (create_app(dsn=db_dsn), "", {}),
        (build(db_dsn), "/admin/jobs", {"x-staff": "yes"}),
    ):
        with TestClient(app, headers=headers) as client:
            page = client.get(f"{prefix}/static/nope")
            assert page.status_code == 404, prefix
            assert "<h1>Not found</h1>" in page.text
            links = re.findall(r'(?:src|href)="([^"#]+)"', page.text)
            assert f"{prefix}/static/dashboard.css" in links, links
            assert all(link.startswith(f"{prefix}/") for link in links), links
            assert not any("/static/static/" in link for link in links), links
            for link in links:
                assert client.get(link.split("?")[0]).status_code == 200, link
            assert [c.path for c in client.cookies.jar] == [prefix or "/"], prefix
