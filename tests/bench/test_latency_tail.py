"""bench.latency_abab --tail: a slow job's hops, what else happened in its window, and
the server log's lines by their time."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import latency_abab


def write_marks(directory: Path, pid: int, marks: list[tuple[str, float]]) -> None:
    with (directory / f"{pid}.hops").open("a") as out:
        for name, wall in marks:
            out.write(f"{name} {wall:.6f} 0.0\n")


def test_the_slowest_job_gets_its_hops_and_what_coincided(tmp_path: Path) -> None:
    t0 = 1000.0
    write_marks(
        tmp_path,
        10,  # the supervisor: a housekeeping round trip held the notification back
        [
            ("sup_db:rescue", t0 + 0.001),
            ("sup_db_end:rescue", t0 + 0.004),
            ("sup_select", t0 + 0.0045),
            ("sup_wake", t0 + 0.005),
        ],
    )
    write_marks(
        tmp_path,
        11,
        [
            ("wk_select", t0 + 0.0055),
            ("wk_claim_sent", t0 + 0.006),
            ("gc_start:0", t0 + 0.0065),
            ("gc_stop:0", t0 + 0.0070),
            ("wk_claim_back", t0 + 0.008),
            ("wk_handler", t0 + 0.0085),
        ],
    )
    fast = (1, t0 + 1.0, 0.002, t0 + 1.004)  # no hops of its own: not among the slowest
    slow = (0, t0, 0.002, t0 + 0.009)
    [job] = latency_abab.tail_anatomy(tmp_path, [fast, slow], 1)
    assert (job["i"], job["latency_ms"], job["woken"]) == (0, 9.0, "w1")
    assert job["steps"]["supervisor's select returned"] == pytest.approx(4.5)
    assert job["steps"]["claim returned"] == pytest.approx(2.0)
    assert job["steps"]["handler started"] == pytest.approx(0.5)
    assert job["others"] == [
        (1.0, "sup", "sup_db:rescue"),
        (4.0, "sup", "sup_db_end:rescue"),
        (6.5, "w1", "gc gen 0 0.50 ms"),
    ]


def test_a_job_without_a_wake_up_keeps_the_hops_it_had(tmp_path: Path) -> None:
    t0 = 1000.0
    write_marks(tmp_path, 10, [("sup_select", t0 + 0.003)])  # no `wake` written
    write_marks(tmp_path, 11, [("wk_claim_back", t0 + 0.004)])
    [job] = latency_abab.tail_anatomy(tmp_path, [(0, t0, 0.002, t0 + 0.005)], 1)
    assert job["steps"]["supervisor's select returned"] == pytest.approx(3.0)
    assert job["steps"]["`wake` written"] is None
    assert job["woken"] is None


def test_server_log_lines_by_their_utc_time_with_continuations(tmp_path: Path) -> None:
    log = tmp_path / "postgresql.log"
    log.write_text(
        "2026-11-28 02:31:05.743 UTC [1] LOG:  automatic analyze of table x\n"
        "\tsystem usage: CPU 0.00 s\n"
    )
    [(at, text)] = latency_abab._server_log(log)
    assert at == pytest.approx(1795833065.743)
    assert text == "UTC [1] LOG:  automatic analyze of table x system usage: CPU 0.00 s"
