"""Percentiles and medians exactly as the peer harnesses compute them (their common.py,
in the `--peers-dir` directory), so pgworkerd's figures and the peers' are comparable."""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import Any


def percentile(values: Iterable[float], p: float) -> float:
    """Linear-interpolated percentile (p in 0..100), the same formula as common.percentile."""
    xs = sorted(values)
    if not xs:
        return float("nan")
    if len(xs) == 1:
        return xs[0]
    k = (len(xs) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def latency_summary(latencies_s: list[float]) -> dict[str, float | int | None]:
    """The latency keys of a peer's RESULT line (common.latency_summary)."""
    ms = [x * 1000.0 for x in latencies_s]
    return {
        "lat_n": len(ms),
        "lat_p50_ms": round(percentile(ms, 50), 2),
        "lat_p90_ms": round(percentile(ms, 90), 2),
        "lat_p99_ms": round(percentile(ms, 99), 2),
        "lat_max_ms": round(max(ms), 2) if ms else None,
        "lat_mean_ms": round(sum(ms) / len(ms), 2) if ms else None,
    }


def slowest_jobs(latencies_s: Iterable[tuple[int, float]], k: int = 5) -> dict[str, Any]:
    """Which jobs made a run's tail: the `k` slowest as [job index, ms], slowest first,
    and the p99 of jobs 10 and on. With 200 jobs the p99 is about the third-slowest
    job, so a few slow ones (the first of a fresh producer and daemon) decide it; the
    peers' harnesses report only the summary, so this is pgworkerd's."""
    by_index = sorted(latencies_s)
    ranked = sorted(by_index, key=lambda job: job[1], reverse=True)[:k]
    later = [s * 1000.0 for i, s in by_index if i >= 10]
    return {
        "lat_slowest": [[i, round(s * 1000.0, 2)] for i, s in ranked],
        "lat_p99_from_10_ms": round(percentile(later, 99), 2) if later else None,
    }


def median(values: Iterable[float | None]) -> float | None:
    """Median of the values present; None when there are none (a run that failed)."""
    xs = [x for x in values if x is not None]
    return statistics.median(xs) if xs else None
