"""What a cancel notification says: the leases of the running jobs just cancelled."""

from __future__ import annotations

import uuid

from pgworkerd.housekeeping.cancelling import leases_in
from pgworkerd.job import Lease


def test_a_payload_names_id_and_token_pairs() -> None:
    a, b = uuid.uuid4(), uuid.uuid4()
    assert leases_in(f"12:{a} 13:{b}") == [Lease(12, a), Lease(13, b)]


def test_malformed_pairs_are_skipped() -> None:
    token = uuid.uuid4()
    payload = f"x:{token} 14 15:not-a-uuid  16:{token}\n"
    assert leases_in(payload) == [Lease(16, token)]
    assert leases_in("") == []
