"""The config file: durations, defaults, environment overrides and one line per problem."""

from __future__ import annotations

from typing import Any

import pytest

from pgworkerd.config import ConfigError, parse, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        (30, 30),
        (2.5, 2.5),
        ("500ms", 0.5),
        ("30s", 30),
        ("15m", 900),
        ("1h", 3600),
        ("1d", 86400),
        ("1.5h", 5400),
        ("45", 45),
    ],
)
def test_durations(text: Any, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_the_contract_example_loads() -> None:
    config = parse("""
database:
  url: postgresql://app@db.internal/app
  schema: pgworkerd
handlers:
  send_email: myapp.jobs:send_email
  build_report: myapp.reports:build
queues:
  critical: {priority: 10}
  default: {}
  reports: {max_runtime: 1h, max_attempts: 3}
workers:
  - queues: [critical, default]
    concurrency: 4
  - queues: [reports]
    concurrency: 1
defaults: {max_attempts: 5, max_runtime: 15m, batch_size: 10}
lease_ttl: 30s
shutdown_timeout: 30s
""")
    assert config.database.schema_name == "pgworkerd"
    assert [p.concurrency for p in config.pools()] == [4, 1]
    assert config.claim_order(config.pools()[0]) == ["critical", "default"]
    assert config.max_runtime_for("reports", None) == 3600
    assert config.max_runtime_for("default", None) == 900
    assert config.max_runtime_for("reports", 5) == 5
    assert config.max_attempts_for("reports") == 3
    assert config.max_attempts_for("default") == 5
    assert "app@db.internal" not in repr(config), "the URL is a secret in reprs"


def test_no_workers_means_one_pool_over_all_queues_one_process_per_cpu(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: 3)
    config = parse("queues: {a: {}, b: {priority: 5}}")
    (pool,) = config.pools()
    assert pool.concurrency == 3
    assert config.claim_order(pool) == ["b", "a"]


def test_empty_file_gives_defaults() -> None:
    config = parse("")
    assert list(config.queues) == ["default"]
    assert config.lease_ttl == 30 and config.shutdown_timeout == 30


def test_environment_wins_over_the_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGWORKERD_DATABASE_URL", "postgresql://env@host/db")
    monkeypatch.setenv("PGWORKERD_LEASE_TTL", "10s")
    monkeypatch.setenv("PGWORKERD_DEFAULTS__MAX_ATTEMPTS", "9")
    monkeypatch.setenv("PGWORKERD_DATABASE__SCHEMA", "from_env")
    config = parse(
        "database: {url: postgresql://file@host/db, schema: s}\nlease_ttl: 30\n"
        "defaults: {max_attempts: 2, batch_size: 7}"
    )
    assert config.database.url is not None
    assert config.database.url.get_secret_value() == "postgresql://env@host/db"
    assert config.database.schema_name == "from_env"
    assert config.lease_ttl == 10
    assert config.defaults.max_attempts == 9 and config.defaults.batch_size == 7


BAD_CONFIGS = [
    ("lease_ttl: [1\n", "invalid YAML"),
    ("lease_ttl: 30\nlease_ttl: 40\n", "duplicate key 'lease_ttl'"),
    ("queues:\n  a: {}\n  a: {}\n", "duplicate key 'a'"),
    ("colour: red\n", "colour: unknown key"),
    ("defaults: {max_runtime: 15m, colour: red}\n", "defaults.colour: unknown key"),
    ("workers: [{queues: [default], concurrency: -1}]\n", "workers[0].concurrency: must be ≥ 1"),
    ("workers: [{queues: [default], concurrency: 0}]\n", "workers[0].concurrency: must be ≥ 1"),
    (
        "workers: [{queues: [default], concurrency: yes}]\n",
        "workers[0].concurrency: must be an integer",
    ),
    (
        "workers: [{queues: [default], concurrency: '10'}, {queues: [default], concurrency: x}]\n",
        "workers[1].concurrency: must be an integer",
    ),
    (
        "workers: [{queues: [default], concurrency: 1000000000}]\n",
        "workers[0].concurrency: must be ≤ 512",
    ),
    ("workers: [{queues: [nowhere]}]\n", "'nowhere' is not declared under queues"),
    ("workers: [{queues: []}]\n", "workers[0].queues"),
    # Both passed `check`: a daemon that ran no job, and a file `pgworkerd web` refused.
    ("workers: []\n", "workers: an empty list runs no job"),
    ("web: {listen: '0.0.0.0:9188'}\n", "web.listen: 0.0.0.0:9188 is beyond loopback and needs"),
    ("web: {listen: 'dashboard.internal:9188'}\n", "is beyond loopback and needs web.auth"),
    ("lease_ttl: 15x\n", "lease_ttl: must be a duration"),
    ("lease_ttl: -5\n", "lease_ttl: must be ≥ 1"),
    ("x: !!python/object/apply:os.system ['true']\n", "YAML tags are not allowed"),
    # Standard tags were read: a !!binary handler path was decoded, !!str 30 a string.
    ("lease_ttl: !!binary aGVsbG8=\n", "YAML tags are not allowed: tag:yaml.org,2002:binary"),
    ("lease_ttl: !!str 30\n", "YAML tags are not allowed: tag:yaml.org,2002:str"),
    ("defaults: {max_attempts: !!float 3}\n", "YAML tags are not allowed"),
    ("queues: !!set {a, b}\n", "YAML tags are not allowed"),
    ("queues: {? !!set {a, b} : {}}\n", "YAML tags are not allowed"),
    # Once tracebacks: a key YAML reads as a boolean, too deep a nesting, a huge integer.
    ("on: 1\n", "a setting's name must be text, got True (quote on, off, yes, no)"),
    ("1: 2\n", "a setting's name must be text, got 1"),
    ("queues: " + "[" * 5000 + "]" * 5000 + "\n", "invalid YAML: nested too deep"),
    ("queues: " + "[" * 100_000 + "\n", "invalid YAML: nested too deep"),
    ("queues: " + "{a: " * 100_000 + "\n", "invalid YAML: nested too deep"),
    ("queues: " + "{a: " * 5000 + "1" + "}" * 5000 + "\n", "invalid YAML: nested too deep"),
    ("defaults: {max_attempts: " + "9" * 5000 + "}\n", "invalid YAML: Exceeds the limit"),
    ("queues: {? [a] : {}}\n", "a key must be a plain value"),
    ("handlers: {k: 'rm -rf /'}\n", "is not an import path"),
    ("- just\n- a list\n", "top level must be a mapping"),
    ("queues: {'': {}}\n", "queues"),
    ('queues: {"a\\x9b31mb": {}}\n', "queues"),  # C1: a terminal's CSI
    # Once a traceback from `run` (the default pool over no queue); now refused up front.
    ("queues: {}\n", "queues: dictionary should have at least 1 item"),
    ("task_modules: [myapp/jobs.py]\n", "task_modules: 'myapp/jobs.py' is not a module name"),
    ("task_modules: myapp.jobs\n", "task_modules: input should be a valid list"),
    ("django: {settings: mysite.settings}\n", "django.tasks: is required"),
    ("django: {settings: mysite.settings, tasks: []}\n", "django.tasks: list should have"),
    ("django: {settings: 'my site', tasks: [a]}\n", "django.settings: 'my site' is not a module"),
    ("django: {settings: s, tasks: [a], colour: red}\n", "django.colour: unknown key"),
    ("queues: {a: {rate: fast}}\n", "queues.a.rate: must be a rate such as 100/s"),
    ("queues: {a: {rate: 10/fortnight}}\n", "queues.a.rate: '10/fortnight': the period"),
    ("queues: {a: {rate: 0/s}}\n", "queues.a.rate: '0/s': the count must be"),
    ("queues: {a: {concurrency: 0}}\n", "queues.a.concurrency: must be ≥ 1"),
    ("queues: {a: {per_key: {rate: 5}}}\n", "queues.a.per_key.rate: must be a rate"),
    ("queues: {a: {per_key: {colour: red}}}\n", "queues.a.per_key.colour: unknown key"),
    # Names PostgreSQL keeps for itself: pg_x and pg_catalog were a server error at
    # migrate (exit 1); information_schema was migrated into, and pg_dump skips it.
    ("database: {schema: pg_x}\n", "database.schema: names starting with pg_ are"),
    ("database: {schema: pg_catalog}\n", "database.schema: names starting with pg_ are"),
    ("database: {schema: information_schema}\n", "database.schema: information_schema is"),
]


@pytest.mark.parametrize(("text", "expected"), BAD_CONFIGS)
def test_bad_configs_give_one_line_per_problem_naming_the_key(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as refused:
        parse(text, origin="pgworkerd.yaml")
    problems = refused.value.problems
    assert any(expected in line for line in problems), problems
    assert all("\n" not in line and line.startswith("pgworkerd.yaml: ") for line in problems)


def test_schema_names_like_postgresqls_own_but_not_them_are_accepted() -> None:
    # PostgreSQL reserves the exact prefix pg_ (case matters: pgworkerd quotes the name).
    for schema in ("PG_x", "pgx", "pg", "my_pg_jobs", "Information_Schema"):
        assert parse(f"database: {{schema: {schema}}}\n").database.schema_name == schema


def test_every_problem_is_reported_not_just_the_first() -> None:
    with pytest.raises(ConfigError) as refused:
        parse("lease_ttl: x\nshutdown_timeout: y\ncolour: red\n")
    assert len(refused.value.problems) == 3


def test_task_modules_and_django_are_read() -> None:
    config = parse(
        "task_modules: [myapp.jobs]\ndjango: {settings: mysite.settings, tasks: [shop.tasks]}\n"
    )
    assert config.task_modules == ["myapp.jobs"]
    assert config.django is not None
    assert (config.django.settings, config.django.tasks) == ("mysite.settings", ["shop.tasks"])
    assert parse("").django is None and parse("").task_modules == []


def test_a_periodic_kind_may_be_left_to_the_tasks_when_task_modules_are_listed() -> None:
    text = "task_modules: [myapp.jobs]\nperiodic: [{kind: myapp.jobs.tick, every: 1m}]\n"
    assert parse(text).periodic[0].kind == "myapp.jobs.tick"
    with pytest.raises(ConfigError, match="has no entry under handlers"):
        parse("periodic: [{kind: myapp.jobs.tick, every: 1m}]\n")


@pytest.mark.parametrize(
    ("text", "rate"),
    [
        ("100/s", (100, 1.0)),
        ("10/m", (10, 60.0)),
        ("5/h", (5, 3600.0)),
        ("20/30s", (20, 30.0)),
        (" 3 / 1.5m ", (3, 90.0)),
        ("1/500ms", (1, 0.5)),
        ("7/d", (7, 86400.0)),
    ],
)
def test_rates_are_read_as_starts_per_period(text: str, rate: tuple[int, float]) -> None:
    config = parse(f"queues: {{q: {{rate: '{text}', per_key: {{rate: '{text}'}}}}}}\n")
    assert config.queues["q"].rate == rate
    assert config.queue_limits()["q"].key_rate == rate


def test_a_rate_is_shown_as_the_config_writes_it() -> None:
    from pgworkerd.storage.limits import rate_text

    assert [rate_text(r) for r in [(100, 1.0), (10, 60.0), (5, 3600.0), (20, 30.0)]] == [
        "100/s",
        "10/m",
        "5/h",
        "20/30s",
    ]


def test_only_queues_with_limits_are_limited() -> None:
    config = parse("queues: {a: {}, b: {concurrency: 2}, c: {fair: true}, d: {per_key: {}}}\n")
    assert sorted(config.queue_limits()) == ["b", "c"]


@pytest.mark.parametrize(
    "variable", ["PGWORKERD_QUEUES", "PGWORKERD_HANDLERS", "PGWORKERD_PERIODIC"]
)
def test_an_environment_value_that_is_not_json_is_one_line(
    variable: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It was pydantic-settings' SettingsError, a traceback.
    monkeypatch.setenv(variable, "not json")
    with pytest.raises(ConfigError) as refused:
        parse("{}", origin="pgworkerd.yaml")
    (line,) = refused.value.problems
    field = variable.removeprefix("PGWORKERD_").lower()
    assert line.startswith("environment: ") and f'"{field}"' in line, line


@pytest.mark.parametrize(
    ("variable", "value", "levels"),
    [
        ("PGWORKERD_DEFAULTS", "[" * 10_000, "10,000"),
        ("PGWORKERD_QUEUES", "[" * 60_000, "60,000"),
        ("PGWORKERD_HANDLERS", '{"a": ' * 5000 + "1" + "}" * 5000, "5,000"),
        ("PGWORKERD_WORKERS", "[" * 2000 + "]" * 2000, "2,000"),
    ],
)
def test_an_environment_value_nested_too_deep_is_one_line(
    variable: str, value: str, levels: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It was json.loads's RecursionError, which pydantic-settings lets through: a traceback.
    monkeypatch.setenv(variable, value)
    monkeypatch.setenv("PGWORKERD_PERIODIC", '[{"kind": "a", "every": "[[["}]')  # not named
    with pytest.raises(ConfigError) as refused:
        parse("{}", origin="pgworkerd.yaml")
    assert refused.value.problems == [
        f"environment ({variable}): JSON nested too deep ({levels} levels)"
    ]


def test_loopback_listens_and_auth_pass() -> None:
    for listen in ("127.0.0.1:9188", "localhost:9188", "[::1]:9188", "127.0.0.2:1"):
        assert parse(f"web: {{listen: '{listen}'}}").web.listen == listen
    assert parse("web: {listen: '0.0.0.0:9188', auth: {username: a}}").web.auth is not None


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("PGWORKERD_LEASE_TTL", "-5", "environment (PGWORKERD_LEASE_TTL): lease_ttl: must be ≥ 1"),
        (
            "pgworkerd_queues__default__concurrency",
            "0",
            "environment (pgworkerd_queues__default__concurrency): "
            "queues.default.concurrency: must be ≥ 1",
        ),
        (
            "PGWORKERD_QUEUES",
            '{"a": {"rate": "x"}}',
            "environment (PGWORKERD_QUEUES): queues.a.rate",
        ),
    ],
)
def test_a_problem_of_an_environment_value_names_the_variable_not_the_file(
    variable: str, value: str, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It was reported under the file's name, which did not set it.
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError) as refused:
        parse("workers: [{queues: [default], concurrency: 0}]\n", origin="pgworkerd.yaml")
    problems = refused.value.problems
    assert any(line.startswith(expected) for line in problems), problems
    # The file's own problem stays the file's.
    if variable != "PGWORKERD_QUEUES":
        assert "pgworkerd.yaml: workers[0].concurrency: must be ≥ 1" in problems, problems
