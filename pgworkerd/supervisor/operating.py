"""What the supervisor's HTTP listener answers: /healthz, /readyz, /metrics.

/healthz: 200 whenever the loop turns (it answers from the loop).
/readyz: 200 when the housekeeping's last lease renewal answered recently (within two
renewal intervals, at least READY_MIN_WINDOW_S), else 503; a ready answer names the
holder of the xmin horizon when it has held it past HORIZON_WARN_LEASES lease_ttl, and
says so while a reload's load refused past reload_timeout is still stuck (the daemon
runs on its old config: ready, but a HUP of the same change will not apply).
/metrics: pgworkerd/supervisor/metrics.py's registry in the Prometheus text format.
No answer names the database URL or anything else of the config.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from pgworkerd import logs
from pgworkerd.config import ConfigError, host_port
from pgworkerd.housekeeping import duties
from pgworkerd.supervisor.http import HttpListener
from pgworkerd.supervisor.metrics import METRICS

if TYPE_CHECKING:
    from pgworkerd.supervisor.core import Supervisor

log = logging.getLogger("pgworkerd.supervisor")

READY_MIN_WINDOW_S = 5.0
_TEXT = "text/plain; charset=utf-8"


def start(supervisor: Supervisor) -> HttpListener | None:
    """Listen on the config's `http.listen`, if any, before any child is forked. An
    address that cannot be bound stops the daemon with a config error (exit 2)."""
    METRICS.view(lambda: _view(supervisor))
    http = supervisor.config.http
    if http is None:
        return None  # and nothing counted: METRICS stays off (see metrics.py)
    from prometheus_client import CONTENT_TYPE_LATEST

    listener = HttpListener(
        supervisor.selector,
        {
            "/healthz": lambda: (200, _TEXT, b"ok\n"),
            "/readyz": lambda: _readyz(supervisor),
            "/metrics": lambda: (200, CONTENT_TYPE_LATEST, METRICS.exposition()),
        },
    )
    host, port = host_port(http.listen)
    try:
        listener.listen(host, port)
    except OSError as exc:
        raise ConfigError(
            [f"http.listen: cannot listen on {http.listen}: {exc.strerror}"]
        ) from None
    METRICS.start()
    logs.event(log, logging.INFO, "http listening", listen=http.listen)
    return listener


def sample_queues(supervisor: Supervisor) -> None:
    """While the metrics are served, the housekeeping samples the queues' depth."""
    if supervisor.http is not None and supervisor.housekeeper is not None:
        supervisor.housekeeper.sample_queues(list(supervisor.config.queues))


def _readyz(supervisor: Supervisor) -> tuple[int, str, bytes]:
    keeper = supervisor.housekeeper
    if keeper is None or keeper.last_renewal_at is None:
        return 503, _TEXT, b"not ready: no lease renewal has answered yet\n"
    window = max(2 * duties.renewal_interval_s(keeper.lease_ttl_s), READY_MIN_WINDOW_S)
    age = time.monotonic() - keeper.last_renewal_at
    if age > window:
        return 503, _TEXT, f"not ready: the database has not answered for {age:.0f}s\n".encode()
    # Ready all the same (another daemon would fare no better), but the body says why
    # the jobs may be slow to start: vacuum is held back.
    sample = keeper.sampling.latest
    horizon = sample.horizon if sample is not None else None
    warnings = []
    if horizon is not None and horizon.too_old(keeper.lease_ttl_s):
        warnings.append(f"vacuum held back by {horizon.describe()}")
    stuck_loads = [loading for loading in supervisor.stuck_loads if not loading.done]
    if stuck_loads:
        stuck = stuck_loads[-1]
        age = time.monotonic() - stuck.started_at
        warnings.append(f"a reload's load has been stuck for {age:.0f}s, {stuck.doing()}")
    if warnings:
        return 200, _TEXT, f"ready; warning: {'; '.join(warnings)}\n".encode()
    return 200, _TEXT, b"ready\n"


def _view(supervisor: Supervisor) -> tuple[int, int, int]:
    busy = supervisor.jobs_running()
    slots = sum(child.board.slots for child in supervisor.children.values())
    return len(supervisor.children), busy, max(0, slots - busy)


def status_line(supervisor: Supervisor) -> str:
    """The one line `systemctl status` shows (STATUS=): workers, running jobs, state."""
    workers, running = len(supervisor.children), supervisor.jobs_running()
    line = f"{workers} worker{'s' * (workers != 1)}, {running} job{'s' * (running != 1)} running"
    if supervisor.state.value != "running":
        line += f", {supervisor.state.value}"
    keeper = supervisor.housekeeper
    # Only once a renewal has answered: before that, the daemon is starting, not failing.
    answered = keeper is not None and keeper.last_renewal_at is not None
    if answered and _readyz(supervisor)[0] != 200:
        line += ", database not answering"
    return line
