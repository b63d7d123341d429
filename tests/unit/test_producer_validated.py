"""`Producer.validated`, the check of an `enqueue_many` list: its usual item (a dict of
a kind, a payload and maybe a queue, named as an earlier item was) takes a fast path
that makes `_job_record`'s record without calling it; anything else takes the checks.
No database: validation is pure (tests/integration/test_producer.py runs the lists)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any
from unittest import mock

import pytest

from pgworkerd.client import producer as producer_module
from pgworkerd.client.producer import Producer, _job_record
from pgworkerd.errors import InvalidJob


@pytest.mark.parametrize(
    "spec",
    [
        {"kind": "fast-kind", "payload": {"i": 0}},
        {"kind": "fast-kind", "payload": [1, 2], "queue": "fast-queue"},
        {"payload": None, "queue": "fast-queue", "kind": "fast-kind"},
    ],
)
def test_a_usual_item_gets_job_records_record_without_its_checks(spec: dict[str, Any]) -> None:
    producer = Producer()
    checked = producer.validated([spec])  # the names checked once, then remembered
    with mock.patch.object(producer_module, "_job_record", wraps=_job_record) as slow:
        fast = producer.validated([spec] * 3)
    assert slow.call_count == 0, "the names were checked before: the fast path"
    assert fast == checked * 3 == [_job_record(**spec)] * 3
    assert [list(record) for record in fast] == [list(_job_record(**spec))] * 3, "key order"
    assert fast[0] is not spec and fast[0] is not fast[1], "a record of its own per item"


@pytest.mark.parametrize(
    "spec",
    [
        {"kind": "fast-kind", "payload": {}, "priority": 1},  # an option to check
        OrderedDict(kind="fast-kind", payload={}),  # a Mapping, not a dict
        {"kind": "never-seen-kind", "payload": {}},  # a name not checked yet
    ],
)
def test_other_items_take_the_checks(spec: dict[str, Any]) -> None:
    producer = Producer()
    producer.validated([{"kind": "fast-kind", "payload": {}}])
    with mock.patch.object(producer_module, "_job_record", wraps=_job_record) as slow:
        (record,) = producer.validated([spec])
    assert slow.call_count == 1
    assert record == _job_record(**spec)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"kind": "fast-kind"}, "jobs[0] lacks 'payload'"),
        ({"kind": ["fast-kind"], "payload": {}}, "jobs[0]: kind must be a string, got list"),
        ({"kind": "fast-kind", "payload": {}, "queue": {"q": 1}}, "queue must be a string"),
    ],
)
def test_a_bad_item_whose_keys_look_usual_is_refused_as_before(
    spec: dict[str, Any], message: str
) -> None:
    producer = Producer()
    producer.validated([{"kind": "fast-kind", "payload": {}}])
    with pytest.raises(InvalidJob) as refused:
        producer.validated([spec])
    assert message in str(refused.value)
