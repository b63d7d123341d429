"""The overview's shaping and formatting, and the chart: pure functions of their input."""

from __future__ import annotations

from datetime import UTC, datetime

from pgworkerd.storage.limits import QueueLimits
from pgworkerd.web.chart import throughput_svg
from pgworkerd.web.overview import age, build, limits, thousands

NOW = datetime(2026, 11, 24, 6, 0, tzinfo=UTC)


def test_age_reads_at_a_glance() -> None:
    assert [age(s) for s in (None, 0, 59.9, 119, 120, 3599, 3600, 3900, 86400 + 7200)] == [
        "—",
        "0 s",
        "59 s",
        "119 s",
        "2 min",
        "59 min",
        "1 h 0 min",
        "1 h 5 min",
        "1 d 2 h",
    ]
    assert thousands(1234567) == "1\u202f234\u202f567"


def test_build_merges_every_source_of_queue_names_and_places_minutes() -> None:
    rows = {
        "now": NOW,
        "live": [
            {"queue": "mail", "state": "queued", "n": 3, "oldest_ready_age_s": 12.0},
            {"queue": "mail", "state": "running", "n": 1, "oldest_ready_age_s": None},
        ],
        "dead": [{"queue": "reports", "n": 2}],
        "finished": [
            {"queue": "mail", "state": "succeeded", "minutes_ago": 0, "n": 5},
            {"queue": "mail", "state": "dead", "minutes_ago": 59, "n": 1},
        ],
        "estimate": 1000,
        "paused": [{"queue": "idle", "paused_at": NOW}],
        "daemons": [],
    }

    page = build(rows, ["default"], [], {})

    by_name = {q["name"]: q for q in page["queues"]}
    assert list(by_name) == ["default", "idle", "mail", "reports"]
    mail = by_name["mail"]
    assert (mail["queued"], mail["running"], mail["oldest_ready_age_s"]) == (3, 1, 12.0)
    assert mail["finished_1h"] == {"succeeded": 5, "dead": 1, "cancelled": 0}
    assert mail["per_minute"][-1] == 5 and mail["per_minute"][0] == 1
    assert by_name["reports"]["dead"] == 2 and by_name["idle"]["paused_at"] == NOW


def test_the_chart_draws_a_bar_a_busy_minute_and_escapes_the_queue_name() -> None:
    svg = str(throughput_svg([0] * 57 + [10, 0, 1], '<q"&>'))

    assert svg.count("<rect") == 2
    assert 'height="40"' in svg and 'height="4"' in svg  # scaled to the busiest minute
    assert "<q" not in svg and "&lt;q&#34;&amp;&gt;" in svg


def test_build_passes_paused_keys_through_and_none_for_a_schema_without_them() -> None:
    rows = {
        "now": NOW,
        "live": [],
        "dead": [],
        "finished": [],
        "estimate": None,
        "paused": [],
        "daemons": [],
        "paused_keys": [
            {"key": "tenant:42", "until": NOW, "paused_at": NOW, "left_s": 90.5, "ready": 3}
        ],
    }

    [paused] = build(rows, [], [], {})["paused_keys"]

    assert (paused["key"], paused["ready"], age(paused["left_s"])) == ("tenant:42", 3, "90 s")
    assert build({**rows, "paused_keys": None}, [], [], {})["paused_keys"] is None


def test_limits_rows_as_status_shows_them_and_none_before_the_migration() -> None:
    configured = {"crawl": QueueLimits(key_concurrency=1, key_rate=(20, 30.0), fair=True)}
    row = {"queue": "crawl", "running": 3, "window_starts": 0, "ready": 7, "held_back": 2}
    assert limits([row], configured) == [
        {
            "queue": "crawl",
            "concurrency": None,
            "rate": None,
            "per_key": {"concurrency": 1, "rate": "20/30s"},
            "fair": True,
            "running": 3,
            "starts_in_window": 0,
            "ready": 7,
            "held_back": 2,
        }
    ]
    assert limits(None, configured) is None  # the page says to migrate
    assert limits([], {}) == []
