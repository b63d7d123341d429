"""Enqueue's usual call (one job, no unique key, `after` or mode, no span to open) is
decided to be `jobs_insert_one` alone, handed to the driver without the steps'
generators; every other call still goes through `_insert_steps`. And the payload's
encoder gives `JSONEncoder.encode`'s text and errors. No database: the decision and the
encoding are pure (tests/integration/test_producer.py runs the statements)."""

from __future__ import annotations

import inspect
import json
import math
import threading
from typing import Any

import pytest

from pgworkerd.client.producer import Producer
from pgworkerd.contrib import otel
from pgworkerd.encoding import _STRICT, _strict_text
from pgworkerd.storage.rows import Statement

_cycle: list[Any] = []
_cycle.append(_cycle)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"queue": "q", "priority": 5, "delay": 1.5, "max_attempts": 3, "max_runtime": 2},
        {"key": "tenant:1"},
    ],
)
def test_one_plain_job_is_its_statement_alone(
    options: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # No TracerProvider, whatever an earlier test of the session set up.
    monkeypatch.setattr(otel, "tracing", lambda: False)
    one = Producer()._one("kind", {"i": 0}, options)  # type: ignore[arg-type]
    assert isinstance(one, Statement)
    assert b"-- name" not in one.query and one.query.lstrip().startswith(b"INSERT")
    assert isinstance(one.params, tuple)  # positional, in jobs_insert_one's order
    assert one.params[:3] == (options.get("queue", "default"), "kind", '{"i":0}')


@pytest.mark.parametrize(
    "options",
    [
        {"unique_key": "u"},
        {"unique_key": "u", "debounce": 1},
        {"unique_key": "u", "throttle": 1},
        {"after": [1]},
    ],
)
def test_a_job_that_may_need_more_statements_goes_through_the_steps(
    options: dict[str, Any],
) -> None:
    steps = Producer()._one("kind", {"i": 0}, options)  # type: ignore[arg-type]
    assert inspect.isgenerator(steps)
    steps.close()


def test_a_plain_job_with_a_span_to_open_goes_through_the_steps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The steps open the enqueue's span: with tracing on, the usual call needs them.
    monkeypatch.setattr(otel, "tracing", lambda: True)
    steps = Producer()._one("kind", {"i": 0}, {})
    assert inspect.isgenerator(steps)
    steps.close()


@pytest.mark.parametrize(
    "value",
    [
        {"i": 0},
        {"a": [1, 2.5, None, True, False], "b": {"c": "é\u2028\x00"}},
        "text",
        1e300,
        [],
        {1: "int key", None: "null key", 2.5: "float key"},
    ],
)
def test_the_payload_text_is_the_strict_encoders(value: Any) -> None:
    assert _strict_text(value) == _STRICT.encode(value)
    assert json.loads(_strict_text(value)) == json.loads(_STRICT.encode(value))


@pytest.mark.parametrize("value", [{"x": math.nan}, {"x": math.inf}, {1, 2}, b"x", _cycle])
def test_the_payload_encoder_refuses_as_the_strict_one(value: Any) -> None:
    with pytest.raises((TypeError, ValueError)) as ours:
        _strict_text(value)
    with pytest.raises((TypeError, ValueError)) as theirs:
        _STRICT.encode(value)
    assert type(ours.value) is type(theirs.value)
    assert str(ours.value) == str(theirs.value)


def test_a_failed_encoding_leaves_no_mark_on_the_next() -> None:
    # The encoder is kept per thread; one that fails inside `shared` leaves its id in the
    # cycle marks unless they are cleared, and `shared` would then read as circular.
    shared: dict[str, Any] = {"k": [{1, 2}]}
    with pytest.raises(TypeError):
        _strict_text(shared)
    shared["k"] = [1]
    assert _strict_text(shared) == '{"k":[1]}'
    assert _strict_text([shared, shared]) == '[{"k":[1]},{"k":[1]}]'  # no cycle, twice


def test_each_thread_encodes_with_its_own_encoder() -> None:
    texts: list[str] = []
    threads = [threading.Thread(target=lambda: texts.append(_strict_text({"t": 1}))) for _ in "ab"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert texts == ['{"t":1}', '{"t":1}']
