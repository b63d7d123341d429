"""The supervisor's Prometheus metrics: a registry of its own, fed by what its loop
already reads (the children's messages and start boards, its kills, the housekeeping),
exposed by pgworkerd/supervisor/http.py with prometheus-client's `generate_latest`.

Only the supervisor's loop touches these objects (one thread): no multiprocess mode,
no collector threads. The gauges that are a view of the ledgers (children alive, slots
busy and free) are computed at scrape time by a callback, not kept up to date.

Nothing is counted, and prometheus-client is not even imported, until the HTTP listener
starts (`start`, from supervisor/operating.py, before any child is forked): a daemon
without `http.listen` serves no metrics, so it pays neither the counting nor the
library, and neither do the children it forks, which inherit every module the
supervisor imported (the library and its imports were ~2 MB of each worker's RSS).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from pgworkerd.ipc import Claimed, Done
from pgworkerd.storage.reads import Horizon

if TYPE_CHECKING:
    from prometheus_client import Counter, Histogram

# Outcome kinds a child reports in `Done` (see pgworkerd/ipc/messages.py).
SUCCEEDED, FAILED, DEAD, CANCELLED, LOST = "succeeded", "failed", "dead", "cancelled", "lost"

_DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600)
_BATCH_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)

Labelled = tuple[str, str]  # (queue, kind)


class SupervisorMetrics:
    def __init__(self) -> None:
        # (metric, queue, kind) -> its labelled child (`_labelled`): .labels() costs a
        # lock and a tuple per call, paid per job otherwise.
        self._children: dict[tuple[object, str, str], Any] = {}
        self._view: Callable[[], tuple[int, int, int]] = lambda: (0, 0, 0)
        # Only a daemon that serves /metrics counts (a few label lookups a job in the
        # supervisor's one thread, and the library in memory); set by `start`.
        self.counting = False

    def start(self) -> None:
        """Make the registry and count from now on: the HTTP listener serves it."""
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry(auto_describe=True)
        r, qk = self.registry, ("queue", "kind")
        self.started = Counter("pgworkerd_jobs_started", "Jobs started", qk, registry=r)
        self.succeeded = Counter("pgworkerd_jobs_succeeded", "Jobs succeeded", qk, registry=r)
        self.failed = Counter(
            "pgworkerd_jobs_failed", "Jobs failed (to be retried)", qk, registry=r
        )
        self.dead = Counter("pgworkerd_jobs_dead", "Jobs failed for good", qk, registry=r)
        self.cancelled = Counter(
            "pgworkerd_jobs_cancelled", "Running jobs ended by a cancel", qk, registry=r
        )
        self.killed = Counter(
            "pgworkerd_jobs_killed", "Jobs killed at their max runtime", qk, registry=r
        )
        self.duration = Histogram(
            "pgworkerd_job_duration_seconds",
            "Handler run time of finished jobs",
            qk,
            buckets=_DURATION_BUCKETS,
            registry=r,
        )
        self.batch_size = Histogram(
            "pgworkerd_claim_batch_size", "Jobs per claim", buckets=_BATCH_BUCKETS, registry=r
        )
        self.restarts = Counter(
            "pgworkerd_children_restarts", "Worker children respawned", registry=r
        )
        self.renewals_failed = Counter(
            "pgworkerd_lease_renewals_failed", "Lease renewals that got no answer", registry=r
        )
        self.queue_depth = Gauge(
            "pgworkerd_queue_depth", "Jobs ready to run now", ("queue",), registry=r
        )
        self.waiting = Gauge(
            "pgworkerd_queue_waiting",
            "Jobs waiting for the jobs they run after (workflows)",
            ("queue",),
            registry=r,
        )
        self.oldest_ready_age = Gauge(
            "pgworkerd_queue_oldest_ready_age_seconds",
            "Age of the oldest job ready to run",
            ("queue",),
            registry=r,
        )
        self.held_by_key_pause = Gauge(
            "pgworkerd_jobs_held_by_key_pause",
            "Jobs ready to run now that a key pause holds back",
            ("queue",),
            registry=r,
        )
        self.held_back = Gauge(
            "pgworkerd_queue_held_back",
            "Ready jobs a flow-control limit (concurrency, rate, per_key) holds back now",
            ("queue",),
            registry=r,
        )
        self.horizon_age = Gauge(
            "pgworkerd_xmin_horizon_age_seconds",
            "How long the oldest holder of the xmin horizon (a transaction, prepared "
            "transaction or replication slot) has been open; while it is, vacuum cannot "
            "remove finished jobs' row versions",
            ("kind", "holder", "pid"),
            registry=r,
        )
        self.horizon_xids = Gauge(
            "pgworkerd_xmin_horizon_xids",
            "Transactions begun since the oldest holder of the xmin horizon took its snapshot",
            ("kind", "holder", "pid"),
            registry=r,
        )
        self.jobs_dead_tuples = Gauge(
            "pgworkerd_jobs_dead_tuples", "Dead row versions in the jobs table", registry=r
        )
        self.jobs_live_tuples = Gauge(
            "pgworkerd_jobs_live_tuples", "Live rows in the jobs table", registry=r
        )
        self.reloads = Counter(
            "pgworkerd_reloads",
            "HUPs by outcome: applied, unchanged (nothing replaced), refused, timed_out "
            "(the load passed reload_timeout)",
            ("outcome",),
            registry=r,
        )
        self.reload_loads_stuck = Gauge(
            "pgworkerd_reload_loads_stuck",
            "Reload loads refused past reload_timeout whose thread still runs (an import "
            "that never ends: see the refusal's log line)",
            registry=r,
        )
        self.children_alive = Gauge("pgworkerd_children_alive", "Worker children alive", registry=r)
        self.slots_busy = Gauge("pgworkerd_slots_busy", "Slots running a job", registry=r)
        self.slots_free = Gauge("pgworkerd_slots_free", "Slots not running a job", registry=r)
        self._outcomes = {
            SUCCEEDED: self.succeeded,
            FAILED: self.failed,
            DEAD: self.dead,
            CANCELLED: self.cancelled,
        }
        self.counting = True

    # -- fed by the loop ----------------------------------------------------------------

    def claimed(self, message: Claimed) -> None:
        if self.counting:
            self.batch_size.observe(len(message.jobs))

    def jobs_started(self, jobs: Iterable[Labelled]) -> None:
        if not self.counting:
            return
        for labels in jobs:
            self._labelled(self.started, labels).inc()

    def done(self, message: Done, labels_of: Callable[[int], Labelled | None]) -> None:
        """Count the outcomes a `done` reports (a child of an older version reports
        none: then nothing is counted)."""
        if not self.counting:
            return
        for job_id, (outcome, duration_s) in zip(message.ids, message.outcomes, strict=False):
            labels = labels_of(job_id)
            counter = self._outcomes.get(outcome)
            if labels is None or counter is None:
                continue  # a lost lease: the job's outcome is someone else's
            self._labelled(counter, labels).inc()
            self._labelled(self.duration, labels).observe(duration_s)

    def jobs_killed(self, jobs: Iterable[Labelled]) -> None:
        if not self.counting:
            return
        for labels in jobs:
            self._labelled(self.killed, labels).inc()

    def jobs_cancelled(self, jobs: Iterable[Labelled]) -> None:
        """Cancelled jobs whose handlers did not end in the grace (no `done` for them)."""
        if not self.counting:
            return
        for labels in jobs:
            self._labelled(self.cancelled, labels).inc()

    def restarted(self) -> None:
        """A worker child was respawned."""
        if self.counting:
            self.restarts.inc()

    def renewal_failed(self) -> None:
        """A lease renewal got no answer."""
        if self.counting:
            self.renewals_failed.inc()

    def reloaded(self, outcome: str) -> None:
        """A HUP's load ended: applied, unchanged, refused or timed_out."""
        if self.counting:
            self.reloads.labels(outcome).inc()

    def loads_stuck(self, count: int) -> None:
        """Timed-out reload loads whose thread still runs."""
        if self.counting:
            self.reload_loads_stuck.set(count)

    def _labelled(self, metric: Counter | Histogram, labels: Labelled) -> Any:
        key = (metric, *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def queues_sampled(self, rows: Iterable[tuple[str, int, float | None]]) -> None:
        """(queue, ready jobs, age of the oldest in seconds) for each queue."""
        if not self.counting:
            return
        self.queue_depth.clear()
        self.oldest_ready_age.clear()
        for queue, depth, age_s in rows:
            self.queue_depth.labels(queue).set(depth)
            self.oldest_ready_age.labels(queue).set(age_s or 0.0)

    def key_pauses_sampled(self, queues: Iterable[str], held: dict[str, int]) -> None:
        """Ready jobs held back by a key pause, for each of the sampled `queues` (0 for
        a queue with none, so a pause that ended shows as a drop, not a gap)."""
        if not self.counting:
            return
        self.held_by_key_pause.clear()
        for queue in queues:
            self.held_by_key_pause.labels(queue).set(held.get(queue, 0))

    def limits_sampled(self, rows: Iterable[tuple[str, int]]) -> None:
        """(queue, ready jobs a limit holds back) for each limited queue."""
        if not self.counting:
            return
        self.held_back.clear()
        for queue, held in rows:
            self.held_back.labels(queue).set(held)

    def waiting_sampled(self, rows: Iterable[tuple[str, int]]) -> None:
        """(queue, waiting jobs) for each queue."""
        if not self.counting:
            return
        self.waiting.clear()
        for queue, count in rows:
            self.waiting.labels(queue).set(count)

    def database_sampled(self, horizon: Horizon | None, table: dict[str, Any] | None) -> None:
        """The holder of the xmin horizon (none: the gauges are empty) and the jobs
        table's row versions, as `pgworkerd status` shows them."""
        if not self.counting:
            return
        self.horizon_age.clear()
        self.horizon_xids.clear()
        if horizon is not None:
            labels = (horizon.kind, horizon.name or "", str(horizon.pid or ""))
            self.horizon_age.labels(*labels).set(horizon.age_s or 0.0)
            self.horizon_xids.labels(*labels).set(horizon.xid_age or 0)
        if table is not None:
            self.jobs_dead_tuples.set(table["dead_tuples"])
            self.jobs_live_tuples.set(table["live_tuples"])

    def view(self, source: Callable[[], tuple[int, int, int]]) -> None:
        """Where the scrape-time gauges come from: (children, slots busy, slots free)."""
        self._view = source

    # -- read by the HTTP listener ------------------------------------------------------

    def exposition(self) -> bytes:
        from prometheus_client import generate_latest  # imported by `start` already

        alive, busy, free = self._view()
        self.children_alive.set(alive)
        self.slots_busy.set(busy)
        self.slots_free.set(free)
        return generate_latest(self.registry)


# One per process: the supervisor's. (A forked child inherits a copy it never reads.)
METRICS = SupervisorMetrics()
