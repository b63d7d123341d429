"""The JSON loader of pgworkerd's connections (storage/connections.py) calls json's C
scanner directly: whatever it is given, it must return what json.loads returns, or
raise what json.loads raises."""

from __future__ import annotations

import json

import pytest

from pgworkerd.storage.connections import json_loads

SAME = [
    b'{"i": 0}',
    b'{"a": [1, 2.5, -3e10, true, false, null], "b": {"c": "\\u00fc\\n\\"x\\""}}',
    '{"text": "given as str"}',
    "ü✓ in a string".join(['"', '"']).encode(),
    b"12345678901234567890123",
    b"NaN",
    b'"plain"',
    b"[]",
    b' {"space": "before"}',  # not jsonb's output: json.loads's own path
    b'{"space": "after"} ',
    b"{}",
]
BAD = [b"", b"{", b'{"a": 1} x', b"\xff", b"[1,]", b"   "]


@pytest.mark.parametrize("data", SAME)
def test_the_value_is_json_loads_s(data: bytes | str) -> None:
    value = json_loads(data)
    expected = json.loads(data)
    assert value == expected or (value != value and expected != expected)  # NaN
    assert type(value) is type(expected)


@pytest.mark.parametrize("data", BAD)
def test_the_error_is_json_loads_s(data: bytes) -> None:
    with pytest.raises(ValueError) as ours:
        json_loads(data)
    with pytest.raises(ValueError) as theirs:
        json.loads(data)
    assert type(ours.value) is type(theirs.value)
    assert str(ours.value) == str(theirs.value)
