"""bench/server_cpu.py: a cluster's CPU by kind of process, on a real cluster."""

from __future__ import annotations

import time

import psycopg

from bench.server_cpu import KINDS, ServerCpu
from pgworkerd.storage.embedded import EmbeddedCluster

# Enough work for a backend to spend a measurable part of a second (a tick is 10 ms).
BURN = "SELECT count(*) FROM generate_series(1, 3000000)"


def test_a_live_backend_counts_as_backends_and_the_measuring_one_not_at_all(
    own_cluster: EmbeddedCluster,
) -> None:
    with (
        psycopg.connect(own_cluster.dsn(), autocommit=True) as measuring,
        psycopg.connect(own_cluster.dsn(), autocommit=True) as client,
    ):
        server = ServerCpu(own_cluster.data_dir, exclude=(measuring.info.backend_pid,))
        measuring.execute(BURN)
        left_out = server.since_start()
        client.execute(BURN)
        spent = server.since_start()
    assert left_out["backends"] < 0.03
    assert spent["backends"] >= 0.05
    assert spent["total"] == sum(spent[kind] for kind in KINDS)
    assert spent["ended"] == 0.0


def test_a_backend_that_exits_in_between_counts_as_ended(own_cluster: EmbeddedCluster) -> None:
    server = ServerCpu(own_cluster.data_dir)
    with psycopg.connect(own_cluster.dsn(), autocommit=True) as client:
        client.execute(BURN)
    # Its times reach the postmaster's children_* once the postmaster has reaped it.
    deadline = time.monotonic() + 10
    spent = server.since_start()
    while spent["ended"] < 0.05 and time.monotonic() < deadline:
        time.sleep(0.05)
        spent = server.since_start()
    assert spent["ended"] >= 0.05
    assert spent["backends"] < 0.03  # no longer a live backend's


def test_a_backend_that_worked_before_the_start_and_exits_after_counts_only_its_share(
    own_cluster: EmbeddedCluster,
) -> None:
    client = psycopg.connect(own_cluster.dsn(), autocommit=True)
    client.execute(BURN)  # before the start sample: not the window's
    backend = client.info.backend_pid
    server = ServerCpu(own_cluster.data_dir)
    assert server.start[backend][1] >= 0.05
    client.close()
    # Once reaped, its whole lifetime is in the postmaster's children_* times.
    deadline = time.monotonic() + 10
    while backend in server.sample() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert backend not in server.sample()
    spent = server.since_start()
    assert spent["ended"] < 0.03
    assert spent["backends"] < 0.03
