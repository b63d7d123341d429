"""Human output of the operator's commands: aligned tables that fit 80 columns, and the
long form of one job. Pure functions of the JSON values `operations` returns."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

WIDTH = 80
# The states `status` and `queues` count, in their columns' order; `waiting` only when a
# queue has waiting jobs (workflows), so the table of a fleet without them keeps its
# width.
COUNTED_STATES = ("waiting", "queued", "running", "succeeded", "dead", "cancelled")
# Dependencies or dependents `jobs show` lists (a batch's callback may have thousands).
RELATED_SHOWN = 20
ELLIPSIS = "…"


def table(
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    width: int = WIDTH,
    cut_first: Sequence[int] = (),
) -> str:
    """Columns separated by two spaces, numbers right-aligned (a column whose cells are
    all numbers or `-`); when too wide, text is cut (with `…`) until the table fits
    `width`: the columns `cut_first` in that order, then the widest text column, no
    column narrower than its header or 4 characters."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    numeric = [bool(cells) and all(_is_number(row[i]) for row in cells) for i in range(len(widths))]
    floors = [max(len(h), 4) for h in headers]
    while sum(widths) + 2 * (len(widths) - 1) > width:
        shrinkable = [i for i in range(len(widths)) if not numeric[i] and widths[i] > floors[i]]
        if not shrinkable:
            break
        first = [i for i in cut_first if i in shrinkable]
        widths[first[0] if first else max(shrinkable, key=lambda i: widths[i])] -= 1

    def line(row: Sequence[str]) -> str:
        parts = []
        for i, cell in enumerate(row):
            cell = cut(cell, widths[i])
            parts.append(cell.rjust(widths[i]) if numeric[i] else cell.ljust(widths[i]))
        return "  ".join(parts).rstrip()

    return "\n".join([line(list(headers)), *(line(row) for row in cells)])


def cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 0)] + ELLIPSIS


def age(seconds: float | None) -> str:
    """`-`, `42s`, `3m05s`, `2h07m`, `3d04h`."""
    if seconds is None:
        return "-"
    s = max(int(seconds), 0)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def when(iso: str | None) -> str:
    """An ISO 8601 time as `YYYY-MM-DD HH:MM:SS` in its own offset, `-` for none."""
    if iso is None:
        return "-"
    return datetime.fromisoformat(iso).strftime("%Y-%m-%d %H:%M:%S")


def first_line(text: str | None) -> str:
    if not text:
        return ""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    # A traceback's last line names the exception; a plain message has one line.
    return lines[-1].strip() if lines else ""


def counted_states(queues: Sequence[dict[str, Any]]) -> tuple[str, ...]:
    """The state columns of `status` and `queues` for these queues (see COUNTED_STATES)."""
    waiting = any(q["counts"].get("waiting") for q in queues)
    return COUNTED_STATES if waiting else COUNTED_STATES[1:]


def status(report: dict[str, Any]) -> str:
    # The waiting jobs go on a line of their own: a column would push the table past 80.
    states = COUNTED_STATES[1:]
    queue_rows = [
        [
            q["queue"],
            *(str(q["counts"][s]) for s in states),
            age(q["oldest_ready_age_s"]),
            f"{q['finished_per_minute']:.1f}",
            _yes_no(q["paused"]),
        ]
        for q in report["queues"]
    ]
    headers = [
        "QUEUE",
        *(state.upper() for state in states),
        *("OLDEST", "DONE/MIN"),
        "PAUSED",
    ]
    parts = [table(headers, queue_rows) if queue_rows else "no jobs"]
    waiting = [
        f"{q['counts']['waiting']} in {q['queue']}"
        for q in report["queues"]
        if q["counts"].get("waiting")
    ]
    if waiting:
        said = "waiting for the jobs they run after: " + ", ".join(waiting)
        parts[0] += "\n" + "\n".join(textwrap.wrap(said, WIDTH, subsequent_indent="  "))
    daemon_rows = [
        [
            d["id"],
            d["hostname"],
            str(d["pid"]),
            when(d["started_at"]),
            age(d["heartbeat_age_s"]) + " ago",
            "-" if d["jobs_running"] is None else str(d["jobs_running"]),
        ]
        for d in report["daemons"]
    ]
    daemon_headers = ["DAEMON", "HOST", "PID", "STARTED", "HEARTBEAT", "RUNNING"]
    daemons = table(daemon_headers, daemon_rows, cut_first=[1, 0]) if daemon_rows else None
    parts.append(daemons or "no live daemons")
    progress_rows = [
        [
            str(p["id"]),
            p["queue"],
            p["kind"],
            percent(p["progress"]),
            p["progress_stage"] or "-",
            when(p["progress_at"]),
        ]
        for p in report.get("progress", [])
    ]
    if progress_rows:
        headers = ["RUNNING JOB", "QUEUE", "KIND", "DONE", "STAGE", "REPORTED"]
        parts.append(table(headers, progress_rows, cut_first=[4, 2]))
    if report.get("paused_keys"):
        parts.append(paused_keys(report["paused_keys"], more=report["paused_keys_more"]))
    if report.get("limits"):
        parts.append(limits(report["limits"]))
    if report.get("periodic"):
        parts.append(periodic(report["periodic"]))
    database = vacuum(report.get("jobs_table"), report.get("horizon"))
    if database:
        parts.append(database)
    return "\n\n".join(parts)


def limits(rows: Sequence[dict[str, Any]]) -> str:
    """The limited queues: their limits, running jobs, starts in the rate's current
    window, ready jobs and how many of those a limit holds back now."""
    table_rows = [
        [
            q["queue"],
            _limits_text(q),
            str(q["running"]),
            str(q["starts_in_window"]) if q["rate"] else "-",
            str(q["ready"]),
            str(q["held_back"]),
        ]
        for q in rows
    ]
    headers = ["LIMITED QUEUE", "LIMITS", "RUNNING", "STARTS", "READY", "HELD BACK"]
    return table(headers, table_rows, cut_first=[0])


def _limits_text(limits: dict[str, Any]) -> str:
    """`2 running, 100/s; per key 1 running, 10/m; fair`."""
    own = _running_rate(limits.get("concurrency"), limits.get("rate"))
    per_key = limits.get("per_key") or {}
    keyed = _running_rate(per_key.get("concurrency"), per_key.get("rate"))
    parts = [own, f"per key {keyed}" if keyed else "", "fair" if limits.get("fair") else ""]
    return "; ".join(p for p in parts if p) or "-"


def _running_rate(concurrency: int | None, rate: str | None) -> str:
    said = [f"{concurrency} running" if concurrency else "", rate or ""]
    return ", ".join(s for s in said if s)


def vacuum(table: dict[str, Any] | None, horizon: dict[str, Any] | None) -> str:
    """The jobs table's dead row versions; the holder of the horizon when it is held long
    enough to warn of (a short transaction of anyone's is no news)."""
    lines = []
    if table is not None:
        line = f"jobs table: {table['live_tuples']:,} live, {table['dead_tuples']:,} dead rows"
        if table["last_vacuum_at"]:
            line += f", last vacuum {when(table['last_vacuum_at'])}"
        lines.append(line)
    if horizon is not None and horizon["warning"]:
        said = f"warning: oldest transaction: {horizon['describe']}; {horizon['warning']}"
        lines += textwrap.wrap(said, WIDTH, subsequent_indent="  ", break_on_hyphens=False)
    return "\n".join(lines)


def queues(listing: Sequence[dict[str, Any]]) -> str:
    """`pgworkerd queues`: each queue, whether it is paused, whether the config names
    it, and its jobs by state (since when a queue is paused: `--json`)."""
    if not listing:
        return "no queues"
    states = counted_states(listing)
    rows = [
        [
            q["queue"],
            _yes_no(q["paused"]),
            _yes_no(q["configured"]),
            *(str(q["counts"][s]) for s in states),
        ]
        for q in listing
    ]
    headers = ["QUEUE", "PAUSED", "CONFIG", *(state.upper() for state in states)]
    return table(headers, rows, cut_first=[0])


def keys(listing: Sequence[dict[str, Any]]) -> str:
    """`pgworkerd keys`: each key with its jobs running, ready and queued, and until when
    it is paused (with the time left)."""
    if not listing:
        return "no keys"
    rows = [
        [
            k["key"],
            str(k["running"]),
            str(k["ready"]),
            str(k["queued"]),
            _key_limits(k.get("limits") or {}),
            f"{when(k['paused_until'])} ({age(k['paused_for_s'])} left)" if k["paused"] else "-",
        ]
        for k in listing
    ]
    headers = ["KEY", "RUNNING", "READY", "QUEUED", "LIMITS", "PAUSED UNTIL"]
    return table(headers, rows, cut_first=[0, 4])


def _key_limits(by_queue: dict[str, dict[str, Any]]) -> str:
    """`tenants: 2 running, 5/s, fair` for each queue whose per-key limits apply."""
    parts = []
    for queue, k in sorted(by_queue.items()):
        said = [_running_rate(k.get("concurrency"), k.get("rate")), "fair" if k.get("fair") else ""]
        parts.append(f"{queue}: {', '.join(s for s in said if s)}")
    return "; ".join(parts) or "-"


def paused_keys(keys: Sequence[dict[str, Any]], *, more: bool) -> str:
    """`status`: the keys paused now, until when, and the ready jobs each holds back."""
    rows = [
        [k["key"], f"{when(k['until'])} ({age(k['paused_for_s'])} left)", str(k["held_back"])]
        for k in keys
    ]
    shown = table(["PAUSED KEY", "UNTIL", "HELD BACK"], rows, cut_first=[0])
    return shown + ("\n(more: pgworkerd keys lists them all)" if more else "")


def percent(value: float | None) -> str:
    """`42%`, `99.5%`, `-`."""
    return "-" if value is None else f"{value:.3g}%"


def periodic(entries: Sequence[dict[str, Any]]) -> str:
    """The periodic entries of the config, with their last and next slots."""
    rows = [
        [
            e.get("name") or e["kind"],  # the entry's own name when it has one
            e["schedule"],
            e["queue"],
            _short(e["last_slot_at"]),
            _short(e["next_slot_at"]),
        ]
        for e in entries
    ]
    headers = ["PERIODIC", "SCHEDULE", "QUEUE", "LAST (UTC)", "NEXT (UTC)"]
    return table(headers, rows, cut_first=[1, 2, 0])


def _short(iso: str | None) -> str:
    """`MM-DD HH:MM:SS` in UTC (the year is the current one or the next), `-` for none."""
    if iso is None:
        return "-"
    return datetime.fromisoformat(iso).astimezone(UTC).strftime("%m-%d %H:%M:%S")


def job_list(jobs: Sequence[dict[str, Any]]) -> str:
    if not jobs:
        return "no jobs"
    rows = [
        [
            str(j["id"]),
            j["queue"],
            j["kind"],
            j["state"],
            f"{j['attempt']}/{j['max_attempts'] if j['max_attempts'] is not None else '-'}",
            when(j["run_at"]),
            first_line(j["last_error"]),
        ]
        for j in jobs
    ]
    headers = ["ID", "QUEUE", "KIND", "STATE", "TRIES", "RUN AT", "LAST ERROR"]
    return table(headers, rows, cut_first=[6])


def job(detail: dict[str, Any]) -> str:
    d = detail
    max_attempts = "-" if d["max_attempts"] is None else d["max_attempts"]
    held = (
        f"{d['worker']} until {when(d['lease_expires_at'])}"
        if d["lease_expires_at"] is not None
        else f"no one (last: {d['worker']})"
        if d["worker"]
        else "no one"
    )
    fields = [
        ("id", str(d["id"])),
        ("queue", d["queue"]),
        ("kind", d["kind"]),
        ("state", d["state"]),
        ("priority", str(d["priority"])),
        ("attempt", f"{d['attempt']} of {max_attempts}"),
        ("max runtime", "-" if d["max_runtime_s"] is None else f"{d['max_runtime_s']:g}s"),
        ("unique key", d["unique_key"] or "-"),
        ("key", d.get("key") or "-"),
        ("held by", held),
        ("created", when(d["created_at"])),
        ("run at", when(d["run_at"])),
        ("started", when(d["started_at"])),
        ("finished", when(d["finished_at"])),
        ("payload", _json_text(d["payload"])),
        ("result", "-" if d["result"] is None else _json_text(d["result"])),
        ("progress", _progress(d)),
    ]
    label_width = max(len(label) for label, _ in fields) + 1
    out = [f"{(label + ':').ljust(label_width)} {value}" for label, value in fields]
    out += _related("runs after", d.get("dependencies") or [], d.get("after_failure"))
    out += _related("runs before", d.get("dependents") or [], None)
    errors = d["errors"] or []
    out.append(f"errors: {len(errors)} kept" if errors else "errors: none")
    for error in errors:
        out.append("")
        out.extend(_error_entry(error))
    return "\n".join(out)


def _error_entry(error: Any) -> list[str]:
    """One `errors` entry. The writer stores objects with `attempt`, `at` and `error`; a
    row written by SQL, another tool or an older version may hold anything (a bare
    string was a traceback): `-` for an attempt or time that cannot be read."""
    if not isinstance(error, dict):
        error = {"error": error}
    attempt = error.get("attempt")
    at = error.get("at")
    try:
        shown_at = when(at) if isinstance(at, str) else "-"
    except ValueError:
        shown_at = "-"
    text = error.get("error")
    text = "" if text is None else text if isinstance(text, str) else _json_text(text)
    head = f"--- attempt {'-' if attempt is None else attempt} at {shown_at}"
    return [head, *("    " + line for line in text.rstrip().splitlines())]


def _json_text(value: Any) -> str:
    """A payload or result as one line of JSON. One too deep for Python came as the
    marker storage.connections.json_loads makes (its text in it); this is the rare one
    that decoded where psycopg read it yet not here, in a deeper stack."""
    try:
        return json.dumps(value, ensure_ascii=False)
    except RecursionError:
        return "(nested too deeply to show here: `pgworkerd jobs show ID --json` has it)"


def _related(label: str, jobs: list[dict[str, Any]], after_failure: str | None) -> list[str]:
    """`jobs show`'s dependencies (`runs after`) or dependents (`runs before`), with their
    states, the first RELATED_SHOWN of them (`--json` has them all)."""
    if not jobs:
        return []
    how = f" (if one fails: {after_failure})" if after_failure else ""
    out = [f"{label}: {len(jobs)} job(s){how}"]
    for j in jobs[:RELATED_SHOWN]:
        out.append(f"    {j['id']}  {j['state'] or 'pruned'}  {j['kind'] or '-'}")
    if len(jobs) > RELATED_SHOWN:
        out.append(f"    ... and {len(jobs) - RELATED_SHOWN} more")
    return out


def _yes_no(flag: bool) -> str:
    return "yes" if flag else "no"


def _progress(d: dict[str, Any]) -> str:
    if d.get("progress") is None:
        return "-"
    stage = f" ({d['progress_stage']})" if d.get("progress_stage") else ""
    return f"{percent(d['progress'])}{stage} at {when(d['progress_at'])}"


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return text == "-"
    return True
