"""`pgworkerd.enqueue`'s settings from the environment: pydantic_settings
(client/settings.py) is loaded only when the environment holds a name it reads, and
every form of the environment gives main's answers (taken from main 06ad99d, where
ProducerSettings was always read; bench/results/idle-tail-round11-20261128.md)."""

from __future__ import annotations

import os
from typing import Any

import pytest

from pgworkerd.client.producer import SETTINGS_NAMES, Producer, default_producer
from pgworkerd.client.settings import ProducerSettings

DEFAULTS = ("pgworkerd", 1024 * 1024)
NOT_AN_INT = "max_payload_bytes\n  Input should be a valid integer"


@pytest.mark.parametrize(
    ("environment", "expected"),
    [
        ({}, DEFAULTS),
        ({"PGWORKERD_MAX_PAYLOAD_BYTES": "50"}, ("pgworkerd", 50)),
        ({"pgworkerd_max_payload_bytes": "50"}, ("pgworkerd", 50)),
        ({"Pgworkerd_Max_Payload_Bytes": " 50 "}, ("pgworkerd", 50)),
        ({"PGWOR\u212aERD_MAX_PAYLOAD_BYTES": "5_0"}, ("pgworkerd", 50)),  # Kelvin sign
        ({"PGWORKERD_MAX_PAYLOAD_BYTES": "50.0"}, ("pgworkerd", 50)),
        ({"PGWORKERD_MAX_PAYLOAD_BYTES": ""}, NOT_AN_INT),
        ({"pgworkerd_MAX_payload_bytes": "fifty"}, NOT_AN_INT),
        ({"PGWORKERD_DATABASE__SCHEMA": "jobs_elsewhere"}, ("jobs_elsewhere", 1024 * 1024)),
        ({"pgworkerd_DATABASE__schema": "Mixed"}, ("Mixed", 1024 * 1024)),
        # Refused as the config file's database.schema is (storage/schema_names.py).
        ({"PGWORKERD_DATABASE__SCHEMA": ""}, "ValueError: schema '': must not be empty"),
        ({"PGWORKERD_DATABASE__SCHEMA": "s" * 55}, "must be at most 54 bytes of UTF-8"),
        ({"PGWORKERD_DATABASE__SCHEMA": "a", "pgworkerd_max_payload_bytes": "7"}, ("a", 7)),
        # Names it does not read: the defaults.
        ({"PGWORKERD_DATABASE__URL": "x", "PGWORKERD_DATABASE": '{"schema": "s"}'}, DEFAULTS),
        ({"PGWORKERD_DATABASE__SCHEMA__X": "y", "PGWORKERD_MAX_PAYLOAD_BYTES_X": "5"}, DEFAULTS),
        ({"PGWORKERD_MAX_PAYLOAD": "5", "XPGWORKERD_MAX_PAYLOAD_BYTES": "5"}, DEFAULTS),
    ],
)
def test_each_form_of_the_environment_gives_what_pydantic_settings_gives(
    monkeypatch: pytest.MonkeyPatch, environment: dict[str, str], expected: Any
) -> None:
    for name in [n for n in os.environ if n.lower().startswith("pgwor")]:
        monkeypatch.delenv(name)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    default_producer.cache_clear()
    try:
        answers = [_answer(default_producer), _answer(_always_read)]
    finally:
        default_producer.cache_clear()
    assert answers[0] == answers[1]
    if isinstance(expected, str):
        assert expected in answers[0][1], answers[0]
    else:
        assert answers[0] == ("ok", expected)


def test_the_names_looked_for_are_the_ones_pydantic_settings_reads() -> None:
    prefix = ProducerSettings.model_config.get("env_prefix", "")
    assert not ProducerSettings.model_config.get("case_sensitive")
    assert {(prefix + f).lower() for f in ProducerSettings.model_fields} == SETTINGS_NAMES


def _always_read() -> Producer:  # as main did, whatever the environment holds
    settings = ProducerSettings()
    return Producer(schema=settings.database__schema, max_payload_bytes=settings.max_payload_bytes)


def _answer(make: Any) -> tuple[str, Any]:
    try:
        producer = make()
    except Exception as exc:  # the error itself is the answer compared
        return ("error", f"{type(exc).__name__}: {exc}")
    return ("ok", (producer.store.schema, producer.max_payload_bytes))
