"""The run summary describes only the modes that ran (bench/__main__.py)."""

from __future__ import annotations

from bench import measure
from bench.__main__ import _modes_described


def test_a_latency_only_run_says_nothing_of_throughput() -> None:
    proto = measure.Protocol(n=20_000, n_single=2_000)
    latency_only = _modes_described(proto, ["latency"])
    assert "Throughput" not in latency_only
    assert latency_only.startswith(
        f"Latency: worker idle 2 s, a separate process enqueues {proto.trickle_n}"
    )
    both = _modes_described(proto, ["throughput", "latency"])
    assert both.startswith("Throughput: 20,000 jobs (2,000 enqueued one per transaction")
    assert "Latency:" in both
    assert "Latency" not in _modes_described(proto, ["throughput"])
