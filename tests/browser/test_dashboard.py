"""The dashboard in Chromium: pages, the actions through their confirmation dialog with
a real daemon running the jobs, read-only mode, the CSRF refusal, and a payload holding
a script that must not run."""

from __future__ import annotations

import re
from typing import Any

import psycopg
from playwright.sync_api import expect

import pgworkerd
from pgworkerd.client.pausing import QueuePauses
from pgworkerd.storage.limits import QueueLimits
from pgworkerd.storage.store import JobStore
from tests.daemon import job, wait_until

Conn = psycopg.Connection[Any]
ONE_WORKER = {"workers": [{"queues": ["default"], "concurrency": 1}]}


def test_overview_and_a_job_page(dashboards, page, conn: Conn):
    job_id = pgworkerd.enqueue(conn, "send_email", {"to": "a@example.com"}, queue="mail")
    dashboard = dashboards()

    page.goto(dashboard.url + "/")
    expect(page).to_have_title("Overview · pgworkerd")
    row = page.locator('tr[data-queue="mail"]')
    expect(row.get_by_role("link", name="1", exact=True).first).to_be_visible()
    expect(row.locator("svg[role=img]")).to_have_count(1)

    row.get_by_role("link", name="mail").click()
    expect(page).to_have_url(re.compile(r"/jobs\?queue=mail$"))
    page.get_by_role("link", name=str(job_id), exact=True).click()

    expect(page.get_by_role("heading", level=1)).to_contain_text(f"Job {job_id}")
    expect(page.locator("pre.payload")).to_contain_text('"to": "a@example.com"')
    expect(page.get_by_role("button", name="Cancel")).to_be_visible()
    assert page.console_errors == [], "no script error, no CSP violation"


def test_retry_a_dead_job_and_see_it_succeed(dashboards, page, start_daemon, history_conn):
    # Its one attempt asks for another: the job is dead; a retry gives it attempt 2.
    dead = pgworkerd.enqueue(history_conn, "fail_then_succeed", {}, max_attempts=1)
    start_daemon(**ONE_WORKER)
    wait_until(lambda: job(history_conn, dead)["state"] == "dead", what="the job to die")
    dashboard = dashboards()

    page.goto(f"{dashboard.url}/jobs/{dead}")
    expect(page.locator("h1 .state")).to_have_text("dead")
    page.get_by_role("button", name="Retry").click()  # the dialog is accepted

    expect(page.get_by_role("status")).to_have_text("Job queued again.")
    # The page refreshes itself while the daemon runs the job.
    expect(page.locator("h1 .state")).to_have_text("succeeded", timeout=30_000)
    row = job(history_conn, dead)
    assert (row["state"], row["attempt"], row["result"]) == ("succeeded", 2, "finally")
    assert page.console_errors == []


def test_cancel_a_running_job(dashboards, page, start_daemon, history_conn):
    running = pgworkerd.enqueue(history_conn, "until_cancelled", {})
    start_daemon(**ONE_WORKER)
    wait_until(lambda: job(history_conn, running)["state"] == "running", what="the job to start")
    dashboard = dashboards()

    page.goto(f"{dashboard.url}/jobs/{running}")
    expect(page.locator("h1 .state")).to_have_text("running")
    page.get_by_role("button", name="Cancel").click()

    expect(page.get_by_role("status")).to_have_text("Job cancelled.")
    expect(page.locator("h1 .state")).to_have_text("cancelled")
    expect(page.get_by_role("button", name="Retry")).to_be_visible()
    wait_until(
        lambda: (
            ("cancelled",)
            in history_conn.execute(
                "SELECT event FROM history WHERE job_id = %s", [running]
            ).fetchall()
        ),
        what="the handler to be told",
    )


def test_pause_and_resume_a_queue(dashboards, page, conn: Conn):
    pgworkerd.enqueue(conn, "k", {}, queue="mail")
    dashboard = dashboards()
    page.goto(dashboard.url + "/")
    row = page.locator('tr[data-queue="mail"]')

    row.get_by_role("button", name="Pause").click()
    expect(row.locator(".queue-state")).to_contain_text("paused")
    assert "mail" in QueuePauses().paused(conn)

    row.get_by_role("button", name="Resume").click()
    expect(row.locator(".queue-state")).to_have_text("active")
    assert "mail" not in QueuePauses().paused(conn)


def test_a_dismissed_dialog_changes_nothing(dashboards, browser, conn: Conn):
    pgworkerd.enqueue(conn, "k", {}, queue="mail")
    dashboard = dashboards()
    context = browser.new_context()
    page = context.new_page()
    asked: list[str] = []

    def dismiss(dialog: Any) -> None:
        asked.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", dismiss)
    page.goto(dashboard.url + "/")
    row = page.locator('tr[data-queue="mail"]')
    row.get_by_role("button", name="Pause").click()
    wait_until(lambda: asked, what="the dialog")
    expect(row.get_by_role("button", name="Pause")).to_be_visible()
    expect(page.get_by_role("status")).to_have_count(0)  # no action's notice
    context.close()
    assert asked == ["Pause queue mail? Running jobs finish; no new job starts."]
    assert QueuePauses().paused(conn) == {}


def test_read_only_shows_no_buttons(dashboards, page, conn: Conn, store):
    queued = pgworkerd.enqueue(conn, "k", {}, queue="mail")
    dashboard = dashboards("--read-only")

    for path in ("/", "/jobs", f"/jobs/{queued}"):
        page.goto(dashboard.url + path)
        expect(page.get_by_text("read-only")).to_be_visible()
        expect(page.locator("form[method=post]")).to_have_count(0)
        for label in ("Retry", "Cancel", "Pause", "Resume", "Retry all dead"):
            expect(page.get_by_role("button", name=label, exact=True)).to_have_count(0)


def test_a_post_without_the_token_is_refused(dashboards, page, conn: Conn):
    queued = pgworkerd.enqueue(conn, "k", {})
    dashboard = dashboards()
    page.goto(f"{dashboard.url}/jobs/{queued}")  # the browser now holds the token cookie

    # The page's own origin, its cookie sent, but no token in the form.
    status = page.evaluate(
        """async (path) => (await fetch(path, {method: "POST",
               headers: {"content-type": "application/x-www-form-urlencoded"},
               body: "confirmed=1"})).status""",
        f"/jobs/{queued}/cancel",
    )

    assert status == 403
    assert job(conn, queued)["state"] == "queued"


def test_a_script_payload_does_not_run(dashboards, page, conn: Conn):
    attack = '<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">'
    job_id = pgworkerd.enqueue(conn, "note", {"text": attack}, queue="mail")
    conn.execute("UPDATE pgworkerd.jobs SET last_error = %s WHERE id = %s", [attack, job_id])
    dashboard = dashboards()

    for path in (f"/jobs/{job_id}", "/jobs", "/"):
        page.goto(dashboard.url + path)
        page.wait_for_load_state("load")
        assert page.evaluate("window.pwned") is None, path
    page.goto(f"{dashboard.url}/jobs/{job_id}")
    expect(page.locator("pre.payload")).to_contain_text("<script>window.pwned = 1</script>")
    assert page.locator("img").count() == 0


def test_resume_a_paused_key_and_see_its_job_run(dashboards, page, start_daemon, history_conn):
    held = pgworkerd.enqueue(history_conn, "record", {}, key="tenant:42")
    pgworkerd.pause_key(history_conn, "tenant:42", 3600)
    other = pgworkerd.enqueue(history_conn, "record", {}, key="tenant:7")
    start_daemon(**ONE_WORKER)
    # Another key's job runs: the daemon claims, and passes the paused key's job over.
    wait_until(lambda: job(history_conn, other)["state"] == "succeeded", what="tenant:7's job")
    dashboard = dashboards()

    page.goto(dashboard.url + "/")
    row = page.locator('tr[data-key="tenant:42"]')
    expect(row.get_by_role("cell").nth(2)).to_contain_text(re.compile(r"^(59|60) min$"))
    expect(row.get_by_role("link", name="1", exact=True)).to_be_visible()  # held back
    assert job(history_conn, held)["state"] == "queued"

    row.get_by_role("button", name="Resume").click()  # the dialog is accepted

    expect(page.get_by_role("status")).to_have_text("Key resumed: its jobs start again.")
    expect(page.get_by_text("No key is paused.")).to_be_visible()
    wait_until(lambda: job(history_conn, held)["state"] == "succeeded", what="tenant:42's job")
    assert page.console_errors == []


def test_a_paused_key_links_to_its_jobs(dashboards, page, conn: Conn):
    held = pgworkerd.enqueue(conn, "k", {}, key="tenant:42")
    pgworkerd.enqueue(conn, "k", {}, key="tenant:7")
    pgworkerd.pause_key(conn, "tenant:42", 600)
    dashboard = dashboards()

    page.goto(dashboard.url + "/")
    page.locator('tr[data-key="tenant:42"]').get_by_role("link", name="tenant:42").click()

    expect(page).to_have_url(re.compile(r"/jobs\?key=tenant%3A42$"))
    expect(page.get_by_label("Key")).to_have_value("tenant:42")
    expect(page.locator("table.jobs tbody tr")).to_have_count(1)
    expect(page.get_by_role("link", name=str(held), exact=True)).to_be_visible()


def test_the_limits_section_shows_a_limited_queue(dashboards, page, conn: Conn):
    queues = {"default": {}, "payments": {"concurrency": 1, "rate": "10/m"}}
    pgworkerd.enqueue_many(conn, [{"kind": "k", "payload": {}, "queue": "payments"}] * 3)
    store = JobStore(limits={"payments": QueueLimits(concurrency=1, rate=(10, 60.0))})
    [running] = store.claim(conn, limit=5, queues=["payments"], lease_ttl_s=60, worker="t:1")
    dashboard = dashboards(extra={"queues": queues})

    page.goto(dashboard.url + "/")
    section = page.get_by_role("region", name="Limits")
    expect(section).to_be_visible()
    row = section.locator('tr[data-limited-queue="payments"]')
    # queue, concurrency, rate, per key, fair, running, starts in window, ready, held back
    expect(row.get_by_role("rowheader")).to_have_text("payments")
    expect(row.get_by_role("cell")).to_have_text(["1", "10/m", "—", "no", "1", "1", "2", "2"])
    assert running.queue == "payments"
    assert page.console_errors == []
