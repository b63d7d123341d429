"""From the run's records to the one table, the targets and their verdicts.

A record is a RESULT dict (a peer's, or pgworkerd's from bench.measure) tagged with
`name` (pgworkerd or a peer's key) and `rep`. With several reps every figure is the
median of its runs, as in the peers' summaries.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.peers import PEERS
from bench.stats import median

if TYPE_CHECKING:
    from bench.paired import PairedFigure

OURS = "pgworkerd"
# pgworkerd at its best setting for no-op jobs, as the peers are run at theirs: big
# batches, no per-job log lines. The targets are judged on this row when it was run.
OURS_TUNED = "pgworkerd_tuned"
# The tuned row's batches at the default log level: what the two lines a job cost.
OURS_INFO = "pgworkerd_batch_info"
OUR_ROWS = (OURS, OURS_INFO, OURS_TUNED)
RAW = "raw_2x100"  # the reference loop the targets name
LABELS = {
    OURS: "pgworkerd (defaults)",
    OURS_INFO: "pgworkerd (batch_size 100, log_level info)",
    OURS_TUNED: "pgworkerd (batch_size 100, log_level warning)",
    "pgqueuer_apg": "PgQueuer (asyncpg)",
    "pgqueuer_psy": "PgQueuer (psycopg)",
    "procrastinate": "Procrastinate",
    "oban": "oban-py",
    "chancy": "Chancy",
    "raw_2x100": "raw psycopg loop, 2 procs x batch 100 (reference)",
    "raw_8x1": "raw psycopg loop, 8 procs x batch 1 (reference)",
}


@dataclass
class Row:
    name: str
    label: str
    version: str
    setting: str
    enqueue_single: float | None
    enqueue_bulk: float | None
    process: float | None
    lat_p50: float | None
    lat_p99: float | None
    cpu_per_10k: float | None
    runs: str  # "throughput runs/latency runs"

    @property
    def is_peer(self) -> bool:
        return self.name not in OUR_ROWS and not (self.name in PEERS and PEERS[self.name].reference)


@dataclass
class Target:
    text: str
    measured: str
    passed: bool | None  # None: not measured in this run


# (column title, Row attribute, higher is better, format)
COLUMNS: list[tuple[str, str, bool, str]] = [
    ("enqueue 1-by-1 jobs/s", "enqueue_single", True, "{:,.0f}"),
    ("enqueue bulk jobs/s", "enqueue_bulk", True, "{:,.0f}"),
    ("no-op processing jobs/s", "process", True, "{:,.0f}"),
    ("idle latency p50 ms", "lat_p50", False, "{:.1f}"),
    ("idle latency p99 ms", "lat_p99", False, "{:.1f}"),
    ("CPU s per 10k jobs", "cpu_per_10k", False, "{:.2f}"),
]


def process_figure(record: dict[str, Any]) -> float | None:
    """A throughput run's processing jobs/s, or None when it did not finish every job;
    pgworkerd's from its READY=1: the peers' harnesses import before their clocks start
    (the figure from the spawn is in the notes)."""
    if not record.get("acked_ok"):
        return None
    figure: float | None = record.get("process_after_imports_jps") or record.get("process_jps")
    return figure


def rows(records: list[dict[str, Any]], order: list[str]) -> list[Row]:
    out = []
    for name in order:
        th = [r for r in records if r["name"] == name and r["mode"] == "throughput"]
        la = [r for r in records if r["name"] == name and r["mode"] == "latency"]
        if not th and not la:
            continue
        first = (th or la)[0]
        ok = [r for r in th if r.get("acked_ok")]
        out.append(
            Row(
                name=name,
                label=LABELS.get(name, name),
                version=str(first.get("version", "?")),
                setting=str(first.get("concurrency", "")),
                enqueue_single=median(r.get("enqueue_single_jps") for r in th),
                enqueue_bulk=median(r.get("enqueue_batch_jps") for r in th),
                process=median(process_figure(r) for r in ok),
                lat_p50=median(r.get("lat_p50_ms") for r in la),
                lat_p99=median(r.get("lat_p99_ms") for r in la),
                cpu_per_10k=median(_cpu_per_10k(r) for r in ok),
                runs=f"{len(ok)}/{len(la)}",
            )
        )
    return out


def best_peer(table: list[Row], attr: str, higher: bool) -> Row | None:
    peers = [r for r in table if r.is_peer and getattr(r, attr) is not None]
    if not peers:
        return None
    pick: Callable[..., Row] = max if higher else min
    return pick(peers, key=lambda r: getattr(r, attr))


def judged_row(table: list[Row]) -> Row | None:
    """Our row the targets are judged on: the tuned one if it ran, else the defaults."""
    by_name = {r.name: r for r in table}
    return by_name.get(OURS_TUNED) or by_name.get(OURS)


def targets(
    table: list[Row],
    scale: dict[str, Any] | None,
    enqueue_one: dict[str, Any] | None = None,
    paired: dict[str, PairedFigure] | None = None,
) -> list[Target]:
    ours = judged_row(table)
    raw = next((r for r in table if r.name == RAW), None)
    best = best_peer(table, "process", True)
    out = []

    def ratio_target(
        text: str,
        num: float | None,
        den: float | None,
        limit: float,
        at_least: bool,
    ) -> None:
        if num is None or not den:
            out.append(Target(text, "not measured", None))
            return
        value = num / den
        out.append(Target(text, f"{value:.2f}x", value >= limit if at_least else value <= limit))

    ratio_target(
        f"processing ≥ 5x best peer ({best.label if best else '-'})",
        ours and ours.process,
        best and best.process,
        5.0,
        True,
    )
    # Judged on the pairs run back to back in each repetition (bench/paired.py), not on
    # the column: a row's median and raw's are taken minutes apart.
    paired = paired or {}
    for name, text, limit in (
        (OURS_TUNED, "processing ≥ 60 % of raw 2x100", 0.60),
        (OURS_INFO, "processing at info logs ≥ 40 % of raw 2x100", 0.40),
    ):
        figure = paired.get(name)
        if figure is None:
            out.append(Target(f"{text} (paired)", "not measured", None))
        else:
            out.append(Target(f"{text} (paired)", figure.shown(), figure.value >= limit))
    ratio_target(
        "idle latency p50 ≤ 1.25x raw 2x100's",
        ours and ours.lat_p50,
        raw and raw.lat_p50,
        1.25,
        False,
    )
    p99 = ours.lat_p99 if ours else None
    out.append(
        Target(
            "idle latency p99 ≤ 10 ms", _fmt(p99, "{:.1f} ms"), None if p99 is None else p99 <= 10.0
        )
    )
    bulk = ours.enqueue_bulk if ours else None
    out.append(
        Target(
            "bulk enqueue ≥ 100,000 jobs/s",
            _fmt(bulk, "{:,.0f} jobs/s"),
            None if bulk is None else bulk >= 100_000,
        )
    )
    # Judged on blocks alternated with the raw loop in the same run (bench/__main__.py,
    # _enqueue_one), not on the column: its rows are minutes apart from raw's.
    if enqueue_one:
        out.append(
            Target(
                "enqueue one per transaction ≥ 0.9x raw 2x100's insert-and-commit "
                f"(alternated, median of {enqueue_one['blocks']} blocks of "
                f"{enqueue_one['block']})",
                f"{enqueue_one['median']:.2f}x ({enqueue_one['all']:.2f}x over all blocks)",
                enqueue_one["median"] >= 0.9,
            )
        )
    else:
        out.append(Target("enqueue one per transaction ≥ 0.9x raw 2x100's", "not measured", None))
    scale = scale or {}
    empty, loaded = scale.get("claim_empty"), scale.get("claim_loaded")
    rows_added = f"{scale['rows']:,}" if "rows" in scale else "1,000,000"
    ratio_target(
        f"claim latency p50 with {rows_added} finished + {rows_added} scheduled rows"
        " ≤ 1.2x empty table",
        loaded and loaded["p50_ms"],
        empty and empty["p50_ms"],
        1.2,
        False,
    )
    rss = scale.get("worker_rss_mb")
    jobs = scale.get("daemon_jobs")
    out.append(
        Target(
            f"worker RSS ≤ 40 MB after {jobs or 100_000:,} jobs",
            _fmt(rss, "{:.1f} MB"),
            None if rss is None else rss <= 40.0,
        )
    )
    return out


def target_lines(table: list[Row]) -> dict[str, float]:
    """Where the chart draws each target: processing at the stricter of its two."""
    best = best_peer(table, "process", True)
    raw = next((r for r in table if r.name == RAW), None)
    process = [
        x
        for x in (
            best and best.process and 5 * best.process,
            raw and raw.process and 0.6 * raw.process,
        )
        if x
    ]
    lines = {"enqueue_bulk": 100_000.0, "lat_p99": 10.0}
    if process:
        lines["process"] = max(process)
    return lines


def markdown(table: list[Row], goals: list[Target], header: list[str], notes: list[str]) -> str:
    lines = [*header, ""]
    titles = [title for title, *_ in COLUMNS]
    lines.append("| system | " + " | ".join(titles) + " |")
    lines.append("|---|" + "---:|" * len(COLUMNS))
    for row in table:
        cells = [_fmt(getattr(row, attr), fmt) for _, attr, _, fmt in COLUMNS]
        label = (
            f"**{row.label}** {row.version}"
            if row.name in OUR_ROWS
            else f"{row.label} {row.version}"
        )
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    ours = judged_row(table)
    raw = next((r for r in table if r.name == RAW), None)
    if ours is not None:
        cells = []
        for _, attr, higher, _ in COLUMNS:
            best = best_peer(table, attr, higher)
            value, ref = getattr(ours, attr), best and getattr(best, attr)
            cell = f"{value / ref:.2f}x" if value is not None and ref else "-"
            if attr == "process" and value is not None and raw and raw.process:
                cell += f" ({value / raw.process * 100:.0f} % of raw 2x100's median)"
            cells.append(cell)
        lines.append(f"| *{ours.label} ÷ best peer (per column)* | " + " | ".join(cells) + " |")
    lines += ["", "Targets:", ""]
    for goal in goals:
        verdict = {True: "PASS", False: "FAIL", None: "n/a "}[goal.passed]
        lines.append(f"- **{verdict}** {goal.text}: {goal.measured}")
    if notes:
        lines += ["", *notes]
    return "\n".join(lines) + "\n"


def _cpu_per_10k(record: dict[str, Any]) -> float | None:
    cpu, n = record.get("worker_cpu_s"), record.get("n")
    return cpu / n * 10_000 if cpu is not None and n else None


def _fmt(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def write_run(out: Path, summary: str, run: Any) -> None:
    """A mode's two files in its results folder: `summary.md`, the summary it printed, and
    `run.json`, everything it measured (a value JSON has no form for, as its text)."""
    (out / "summary.md").write_text(summary)
    (out / "run.json").write_text(json.dumps(run, indent=2, default=str))
