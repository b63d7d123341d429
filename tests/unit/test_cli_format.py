"""The human output of the operator's commands: pure formatting."""

from __future__ import annotations

from pgworkerd.cli import formatting
from pgworkerd.cli.formatting import age, cut, first_line, table, when


def test_table_aligns_numbers_right_and_text_left() -> None:
    out = table(["NAME", "N"], [["a", "1"], ["bbb", "22"]]).splitlines()
    assert out == ["NAME   N", "a      1", "bbb   22"]


def test_a_wide_table_is_cut_to_80_columns_at_its_widest_text_column() -> None:
    rows = [["x" * 60, "12345", "y" * 40]]
    out = table(["A", "NUMBER", "B"], rows).splitlines()
    assert all(len(line) <= 80 for line in out)
    assert out[1].startswith("x") and "…" in out[1] and "12345" in out[1]


def test_cut_age_when_first_line() -> None:
    assert cut("abcdef", 4) == "abc…" and cut("abc", 4) == "abc"
    assert [age(None), age(5.9), age(125), age(7260), age(3 * 86400 + 4 * 3600)] == [
        "-",
        "5s",
        "2m05s",
        "2h01m",
        "3d04h",
    ]
    assert when(None) == "-"
    assert when("2026-11-23T16:50:01.123+00:00") == "2026-11-23 16:50:01"
    assert first_line("Traceback...\n  File x\nValueError: no\n") == "ValueError: no"
    assert first_line(None) == ""


def _queue(name: str, **counts: int) -> dict[str, object]:
    states = ("waiting", "queued", "running", "succeeded", "dead", "cancelled")
    return {
        "queue": name,
        "counts": {s: counts.get(s, 0) for s in states},
        "oldest_ready_age_s": 61.0,
        "finished_per_minute": 1.4,
        "paused": name == "mail",
        "paused_at": "2026-11-23T16:40:00+00:00" if name == "mail" else None,
    }


def test_status_fits_80_columns_with_long_names() -> None:
    report = {
        "at": "2026-11-23T16:50:01+00:00",
        "queues": [_queue("q" * 50, queued=12345678, dead=3), _queue("mail")],
        "daemons": [
            {
                "id": "a-very-long-host-name.example.internal:123456:1763916601",
                "hostname": "a-very-long-host-name.example.internal",
                "pid": 123456,
                "started_at": "2026-11-23T16:50:01+00:00",
                "heartbeat_at": "2026-11-23T16:50:31+00:00",
                "heartbeat_age_s": 3.2,
                "state": "running",
                "workers": 4,
                "jobs_running": None,
            }
        ],
    }
    out = formatting.status(report)
    assert all(len(line) <= 80 for line in out.splitlines()), out
    assert "12345678" in out and "1m01s" in out and "3s ago" in out and "123456" in out
    lines = out.splitlines()
    assert lines[0].split()[-1] == "PAUSED"
    assert [line.split()[-1] for line in lines[1:3]] == ["no", "yes"]


def test_queues_fit_80_columns_and_say_paused_and_configured() -> None:
    listing = [
        {**_queue("q" * 60, queued=12345678, succeeded=987654321), "configured": True},
        {**_queue("mail", running=2), "configured": False},
    ]
    out = formatting.queues(listing)
    lines = out.splitlines()
    assert all(len(line) <= 80 for line in lines), out
    assert lines[0].split() == [
        *("QUEUE", "PAUSED", "CONFIG", "QUEUED", "RUNNING", "SUCCEEDED", "DEAD", "CANCELLED")
    ]
    assert lines[1].startswith("qqqq") and "…" in lines[1]
    assert lines[1].split()[1:] == ["no", "yes", "12345678", "0", "987654321", "0", "0"]
    assert lines[2].split() == ["mail", "yes", "no", "0", "2", "0", "0", "0"]
    assert formatting.queues([]) == "no queues"


def test_periodic_entries_fit_80_columns_the_schedule_cut_first() -> None:
    entry = {
        "kind": "nightly_inventory_report",
        "schedule": "0 8 * * mon-fri America/Argentina/Buenos_Aires",
        "queue": "reports",
        "last_slot_at": "2026-11-23T08:00:00+01:00",
        "next_slot_at": "2026-11-24T07:00:00+00:00",
    }
    never = {**entry, "kind": "sync", "schedule": "every 30s", "last_slot_at": None}
    named = {**never, "name": "morning_sync"}
    report = {"at": "x", "queues": [], "daemons": [], "periodic": [entry, never, named]}
    out = formatting.status(report)
    lines = out.splitlines()
    assert lines[-4].split() == ["PERIODIC", "SCHEDULE", "QUEUE", "LAST", "(UTC)", "NEXT", "(UTC)"]
    assert all(len(line) <= 80 for line in lines), out
    assert lines[-3].startswith("nightly_inventory_report  0 8 * * mon"), "the kind kept whole"
    assert "…" in lines[-3].split("  ")[1], "the schedule cut"
    assert "11-23 07:00:00  11-24 07:00:00" in lines[-3], "in UTC"
    assert lines[-2].split()[:4] == ["sync", "every", "30s", "reports"] and " - " in lines[-2]
    assert lines[-1].split()[0] == "morning_sync", "an entry's name rather than its kind"


def test_status_and_lists_when_empty() -> None:
    out = formatting.status({"at": "x", "queues": [], "daemons": []})
    assert out == "no jobs\n\nno live daemons"
    assert formatting.job_list([]) == "no jobs"


def test_job_shows_every_error_with_its_traceback() -> None:
    detail = {
        "id": 7,
        "queue": "default",
        "kind": "k",
        "state": "running",
        "priority": 0,
        "payload": {"a": 1},
        "attempt": 2,
        "max_attempts": 5,
        "max_runtime_s": 900.0,
        "unique_key": None,
        "worker": "default#0",
        "lease_expires_at": "2026-11-23T16:51:00+00:00",
        "created_at": "2026-11-23T16:50:00+00:00",
        "run_at": "2026-11-23T16:50:00+00:00",
        "started_at": "2026-11-23T16:50:30+00:00",
        "finished_at": None,
        "last_error": "Traceback\nValueError: x",
        "errors": [
            {"attempt": 1, "at": "2026-11-23T16:50:10+00:00", "error": "Traceback\nValueError: x"}
        ],
        "result": None,
    }
    out = formatting.job(detail)
    assert "attempt:     2 of 5" in out
    assert "held by:     default#0 until 2026-11-23 16:51:00" in out
    assert '{"a": 1}' in out and "900s" in out
    assert "--- attempt 1 at 2026-11-23 16:50:10" in out and "    ValueError: x" in out


def test_columns_named_are_cut_first() -> None:
    rows = [["x" * 40, "y" * 40, "z" * 10]]
    out = table(["A", "B", "C"], rows, cut_first=[1]).splitlines()
    assert len(out[1]) == 80 and out[1].startswith("x" * 40) and out[1].endswith("z" * 10)


def test_job_list_keeps_times_whole_and_cuts_the_error() -> None:
    job = {
        "id": 12,
        "queue": "images",
        "kind": "resize_image_thumbnails",
        "state": "dead",
        "attempt": 1,
        "max_attempts": 5,
        "run_at": "2026-11-23T16:52:15+00:00",
        "last_error": "Traceback\nValueError: " + "very long " * 10,
    }
    out = formatting.job_list([job]).splitlines()
    assert all(len(line) <= 80 for line in out)
    assert "2026-11-23 16:52:15" in out[1] and "resize_image" in out[1]
    assert out[1].endswith("…")


def test_status_lists_running_jobs_progress_within_80_columns() -> None:
    progress = [
        {
            "id": 123456789,
            "queue": "reports-" + "x" * 30,
            "kind": "nightly_" + "y" * 40,
            "progress": 42.5,
            "progress_stage": "rendering page 3 of 12 " + "z" * 40,
            "progress_at": "2026-11-23T16:50:31+00:00",
            "started_at": "2026-11-23T16:50:01+00:00",
        },
        {
            "id": 8,
            "queue": "default",
            "kind": "k",
            "progress": 100.0,
            "progress_stage": None,
            "progress_at": "2026-11-23T16:50:32+00:00",
            "started_at": "2026-11-23T16:50:02+00:00",
        },
    ]
    out = formatting.status({"at": "x", "queues": [], "daemons": [], "progress": progress})
    assert all(len(line) <= 80 for line in out.splitlines()), out
    lines = out.splitlines()
    assert lines[4].split()[:4] == ["RUNNING", "JOB", "QUEUE", "KIND"]
    assert "123456789" in lines[5] and "42.5%" in lines[5] and "2026-11-23 16:50:31" in lines[5]
    assert lines[6].split()[:4] == ["8", "default", "k", "100%"] and " - " in lines[6]


def test_job_shows_progress() -> None:
    base = {
        "id": 7,
        "queue": "default",
        "kind": "k",
        "state": "running",
        "priority": 0,
        "payload": {},
        "attempt": 1,
        "max_attempts": 5,
        "max_runtime_s": None,
        "unique_key": None,
        "worker": None,
        "lease_expires_at": None,
        "created_at": None,
        "run_at": None,
        "started_at": None,
        "finished_at": None,
        "last_error": None,
        "errors": [],
        "result": None,
        "progress": 12.0,
        "progress_stage": "download",
        "progress_at": "2026-11-23T16:50:31+00:00",
    }
    assert "progress:    12% (download) at 2026-11-23 16:50:31" in formatting.job(base)
    none = {**base, "progress": None, "progress_stage": None, "progress_at": None}
    assert "progress:    -" in formatting.job(none)


def test_the_vacuum_warning_names_the_holder_within_80_columns() -> None:
    horizon = {
        "describe": "transaction pid 51514 (a-rather-long-application-name), idle in "
        "transaction, open 612s, 48211 transactions behind",
        "warning": "held over 10 x lease_ttl (300s): vacuum cannot remove the jobs "
        "finished since it began, and claims walk past them; end it: SELECT "
        "pg_terminate_backend(51514)",
    }
    table = {"live_tuples": 1204, "dead_tuples": 91630, "last_vacuum_at": None}
    lines = formatting.vacuum(table, horizon).splitlines()
    assert lines[0] == "jobs table: 1,204 live, 91,630 dead rows"
    assert lines[1].startswith("warning: oldest transaction: transaction pid 51514")
    assert all(len(line) <= 80 for line in lines), lines
    said = " ".join(line.strip() for line in lines[1:])
    assert "pid 51514 (a-rather-long-application-name), idle in transaction" in said
    assert said.endswith("SELECT pg_terminate_backend(51514)")
    assert formatting.vacuum(table, {**horizon, "warning": None}).count("\n") == 0
