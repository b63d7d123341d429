"""The supervisor's metrics count nothing, and do not import prometheus-client, until
`start()` (its HTTP listener's): a daemon without `http.listen` pays neither, and
neither do the workers it forks (they inherit its modules)."""

from __future__ import annotations

from pgworkerd.supervisor.metrics import SupervisorMetrics
from tests.fresh_python import printed_by_new_python


def test_nothing_is_counted_before_start_and_everything_after() -> None:
    metrics = SupervisorMetrics()
    metrics.restarted()
    metrics.renewal_failed()
    metrics.jobs_killed([("q", "k")])
    metrics.queues_sampled([("q", 3, 1.5)])
    metrics.start()
    metrics.restarted()
    metrics.jobs_killed([("q", "k"), ("q", "k")])
    text = metrics.exposition().decode()
    assert "pgworkerd_children_restarts_total 1.0" in text
    assert "pgworkerd_lease_renewals_failed_total 0.0" in text
    assert 'pgworkerd_jobs_killed_total{kind="k",queue="q"} 2.0' in text
    assert 'pgworkerd_queue_depth{queue="q"}' not in text  # sampled before start
    metrics.queues_sampled([("q", 3, 1.5)])
    assert 'pgworkerd_queue_depth{queue="q"} 3.0' in metrics.exposition().decode()


def test_the_supervisor_imports_prometheus_client_only_to_serve_metrics() -> None:
    code = (
        "import sys; import pgworkerd.supervisor.core; "
        "from pgworkerd.supervisor.metrics import METRICS; "
        "print('prometheus_client' in sys.modules, end=' '); "
        "METRICS.start(); print('prometheus_client' in sys.modules)"
    )
    assert printed_by_new_python(code) == ["False", "True"]
