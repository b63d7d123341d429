"""The overview's content from the rows of storage/dashboard.py, and the formatting the
templates use: plain functions of their input (the database clock's `now` included), so
what a page shows does not depend on the web server's clock."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from pgworkerd.client.operations import daemon_info
from pgworkerd.config.periodic import PeriodicEntry
from pgworkerd.storage.dashboard import CHART_MINUTES
from pgworkerd.storage.limits import QueueLimits, reported
from pgworkerd.web.chart import throughput_svg

FINAL_STATES = ("succeeded", "dead", "cancelled")
# Queues the overview lists (one per tenant makes thousands): the configured ones first,
# then the paused, then the busiest; the page says how many more there are.
QUEUES_SHOWN = 200


def build(
    rows: dict[str, Any],
    configured: Sequence[str],
    periodic: Sequence[PeriodicEntry],
    periodic_last: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    now: datetime = rows["now"]
    queues: dict[str, dict[str, Any]] = {}

    def queue(name: str) -> dict[str, Any]:
        if name not in queues:
            queues[name] = {
                "name": name,
                "waiting": 0,
                "queued": 0,
                "running": 0,
                "dead": 0,
                "oldest_ready_age_s": None,
                "finished_1h": dict.fromkeys(FINAL_STATES, 0),
                "per_minute": [0] * CHART_MINUTES,  # oldest minute first
                "paused_at": None,
            }
        return queues[name]

    for name in configured:
        queue(name)
    for row in rows["live"]:
        entry = queue(row["queue"])
        entry[row["state"]] = int(row["n"])
        if row["state"] == "queued":
            entry["oldest_ready_age_s"] = row["oldest_ready_age_s"]
    for row in rows["dead"]:
        queue(row["queue"])["dead"] = int(row["n"])
    for row in rows["finished"]:
        entry = queue(row["queue"])
        entry["finished_1h"][row["state"]] += int(row["n"])
        minute = CHART_MINUTES - 1 - int(row["minutes_ago"])
        if 0 <= minute < CHART_MINUTES:
            entry["per_minute"][minute] += int(row["n"])
    for row in rows["paused"]:
        queue(row["queue"])["paused_at"] = row["paused_at"]
    shown = _shown_queues(queues, set(configured))
    for entry in shown:
        entry["chart"] = throughput_svg(entry["per_minute"], entry["name"])
    return {
        "now": now,
        "queues": shown,
        "queues_not_shown": len(queues) - len(shown),
        "estimate": rows["estimate"],
        "daemons": [_daemon(row) for row in rows["daemons"]],
        "periodic": [_periodic(e, periodic_last.get(e.key), now) for e in periodic],
        # None: a schema without key pauses (before flow control's migration).
        "paused_keys": _paused_keys(rows.get("paused_keys")),
    }


def _shown_queues(queues: dict[str, dict[str, Any]], configured: set[str]) -> list[dict[str, Any]]:
    """At most QUEUES_SHOWN of them, by name."""
    if len(queues) > QUEUES_SHOWN:

        def rank(entry: dict[str, Any]) -> tuple[bool, bool, int, str]:
            busy = entry["waiting"] + entry["queued"] + entry["running"] + entry["dead"]
            busy += sum(entry["finished_1h"].values())
            unconfigured = entry["name"] not in configured
            return (unconfigured, entry["paused_at"] is None, -busy, entry["name"])

        kept = sorted(queues.values(), key=rank)[:QUEUES_SHOWN]
        return sorted(kept, key=lambda entry: entry["name"])
    return [queues[name] for name in sorted(queues)]


def _paused_keys(rows: Sequence[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    if rows is None:
        return None
    return [
        {
            "key": row["key"],
            "until": row["until"],
            "paused_at": row["paused_at"],
            "left_s": row["left_s"],
            "ready": int(row["ready"]),
        }
        for row in rows
    ]


def limits(
    rows: Sequence[dict[str, Any]] | None, configured: Mapping[str, QueueLimits]
) -> list[dict[str, Any]] | None:
    """The limited queues as `pgworkerd status` reports them (the same keys): their
    limits as the config writes them, and now running, starts in the rate's current
    window, ready and held back. None: the schema predates limits (not migrated)."""
    if rows is None:
        return None
    return [reported(row, configured) for row in rows]


def _daemon(row: dict[str, Any]) -> dict[str, Any]:
    info = daemon_info(row)
    return {
        "id": row["id"],
        "hostname": row["hostname"],
        "pid": row["pid"],
        "started_at": row["started_at"],
        "heartbeat_age_s": row["heartbeat_age_s"],
        "state": info["state"],
        "jobs_running": info["jobs_running"],
    }


def _periodic(entry: PeriodicEntry, last: dict[str, Any] | None, now: datetime) -> dict[str, Any]:
    schedule = entry.schedule()
    return {
        "name": entry.name or entry.kind,
        "kind": entry.kind,
        "queue": entry.queue,
        "schedule": schedule.describe(),
        "last_slot_at": last["last_slot_at"] if last else None,
        "last_job_id": last["last_job_id"] if last else None,
        "next_slot_at": schedule.next_after(now),
    }


# -- formatting, as template filters ----------------------------------------------------------


def age(seconds: float | None) -> str:
    """`42 s`, `7 min`, `3 h 5 min`, `2 d 4 h`; an em dash for none."""
    if seconds is None:
        return "—"
    s = max(0, int(seconds))
    if s < 120:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"


def when(value: datetime | str | None) -> str:
    """A time to the second, in the zone the database gave it."""
    if value is None:
        return "—"
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.isoformat(sep=" ", timespec="seconds")


def when_or_dash(value: Any) -> str:
    """`when` for a time read from a job's JSON (an `errors` entry's `at`), which a row
    written by SQL or another tool may hold as anything: "—" for what is not one."""
    if isinstance(value, datetime):
        return when(value)
    if not isinstance(value, str):
        return "—"
    try:
        return when(datetime.fromisoformat(value))
    except ValueError:
        return "—"


def thousands(value: int | None) -> str:
    return "—" if value is None else f"{value:,}".replace(",", "\u202f")


FILTERS = {"age": age, "when": when, "thousands": thousands}
