"""The `periodic:` and `retention:` sections: what loads, what is refused (one line
naming the key), the fallback on `defaults.retention`, and environment overrides."""

from __future__ import annotations

import pytest

from pgworkerd.config import ConfigError, parse
from pgworkerd.housekeeping.retention import Policy

HANDLERS = "handlers: {report: app.jobs:report, sync: app.jobs:sync}\n"
DAY = 86400.0


def test_the_contract_example_loads() -> None:
    config = parse(
        HANDLERS
        + """queues: {default: {}, reports: {}}
periodic:
  - {kind: report, cron: "0 8 * * *", timezone: Europe/Berlin, queue: reports, payload: {}}
  - {kind: sync, every: 30s}
retention: {succeeded: 1d, dead: 30d, cancelled: 7d}
"""
    )
    nightly, sync = config.periodic
    assert nightly.schedule().describe() == "0 8 * * * Europe/Berlin"
    assert sync.schedule().describe() == "every 30s" and sync.queue == "default"
    assert nightly.missed == sync.missed == "latest"
    assert nightly.key != sync.key and nightly.key.startswith("auto:report:")
    assert Policy.from_config(config) == Policy(
        {"succeeded": DAY, "dead": 30 * DAY, "cancelled": 7 * DAY}
    )


def test_retention_defaults_and_the_older_single_setting() -> None:
    assert Policy.from_config(parse("")).keep_s == {
        "succeeded": DAY,
        "dead": 30 * DAY,
        "cancelled": 7 * DAY,
    }
    older = parse("defaults: {retention: 2d}\nretention: {dead: 90d, archive: true}")
    assert Policy.from_config(older) == Policy(
        {"succeeded": 2 * DAY, "dead": 90 * DAY, "cancelled": 2 * DAY}, archive=True
    ), "defaults.retention fills in each state retention leaves out"


BAD = [
    ("- {kind: report, cron: '61 * * * *'}", "periodic[0]: not a valid cron expression"),
    ("- {kind: report, cron: '* * * *'}", "periodic[0]: cron must have five fields, not 4"),
    # Valid to croniter, but no such day: it crashed the supervisor's periodic duty.
    ("- {kind: report, cron: '0 0 30 2 *'}", "periodic[0]: cron '0 0 30 2 *' names no date"),
    ("- {kind: report, cron: '0 0 31 4 *'}", "periodic[0]: cron '0 0 31 4 *' names no date"),
    ("- {kind: report}", "periodic[0]: needs exactly one of cron or every"),
    ("- {kind: report, every: 1m, cron: '* * * * *'}", "needs exactly one of cron or every"),
    ("- {kind: report, every: 0}", "periodic[0].every: "),
    # Each slot is a database round and a job: 1e-9 enqueued 14,501 jobs in 8 s.
    ("- {kind: report, every: 1e-9}", "periodic[0].every: must be ≥ 1"),
    ("- {kind: report, every: 500ms}", "periodic[0].every: must be ≥ 1"),
    ("- {kind: report, every: 1m, timezone: UTC}", "timezone applies to cron only"),
    ("- {kind: report, cron: '* * * * *', timezone: Mars/Olympus}", "unknown timezone"),
    ("- {kind: nope, every: 1m}", "periodic[0].kind: 'nope' has no entry under handlers"),
    ("- {kind: report, every: 1m, queue: q}", "periodic[0].queue: 'q' is not declared"),
    ("- {kind: report, every: 1m, missed: some}", "periodic[0].missed: "),
    ("- {kind: report, every: 1m, colour: red}", "periodic[0].colour: unknown key"),
    ("- {kind: report, every: 1m, payload: {d: 2026-01-01}}", "quote dates"),
    ("- {kind: report, every: 1m}\n- {kind: report, every: 60s}", "the same entry as periodic[0]"),
]


@pytest.mark.parametrize(("entries", "expected"), BAD)
def test_bad_entries_give_one_line_naming_the_key(entries: str, expected: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse(HANDLERS + "periodic:\n" + entries, origin="p.yaml")
    (problem,) = refused.value.problems
    assert expected in problem and problem.startswith("p.yaml: ") and "\n" not in problem


def test_bad_retention_is_refused() -> None:
    for text, expected in [
        ("retention: {succeeded: soon}", "retention.succeeded: must be a duration"),
        ("retention: {kept: 1d}", "retention.kept: unknown key"),
        ("retention: {dead: -1d}", "retention.dead"),
    ]:
        with pytest.raises(ConfigError) as refused:
            parse(text)
        assert any(expected in p for p in refused.value.problems), refused.value.problems


def test_the_environment_sets_periodic_and_retention(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGWORKERD_PERIODIC", '[{"kind": "sync", "every": "10s"}]')
    monkeypatch.setenv("PGWORKERD_RETENTION__SUCCEEDED", "2h")
    config = parse(HANDLERS + "retention: {dead: 5d}")
    assert [e.every for e in config.periodic] == [10.0]
    assert config.retention.succeeded == 7200 and config.retention.dead == 5 * DAY
