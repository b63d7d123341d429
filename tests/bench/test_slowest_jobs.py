"""bench.stats.slowest_jobs: which jobs made a latency run's tail."""

from __future__ import annotations

from bench import stats


def test_the_slowest_jobs_are_named_by_index_and_the_later_p99_leaves_the_first_out() -> None:
    # Job 0 (a fresh producer's first call) and job 1 (due during it) are the slow ones.
    latencies = [(i, 0.004) for i in range(2, 200)] + [(0, 0.090), (1, 0.030)]
    latencies[50] = (52, 0.012)
    result = stats.slowest_jobs(latencies, k=3)
    assert result["lat_slowest"] == [[0, 90.0], [1, 30.0], [52, 12.0]]
    # Jobs 10-199: 189 at 4 ms and one at 12 ms; the first ten are not among them.
    expected = stats.percentile([4.0] * 189 + [12.0], 99)
    assert result["lat_p99_from_10_ms"] == round(expected, 2)
    # Over all 200 jobs the first two make the p99: above every later job's latency.
    assert stats.percentile([s * 1000 for _, s in latencies], 99) > 12.0
