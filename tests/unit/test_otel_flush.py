"""The worker's flush of its spans on the way out (contrib/otel_worker.flush_spans): a
flush the SDK gave up on (force_flush returns False within its timeout) is said, as one
that raised or ran past the bound is; one that went through is not."""

from __future__ import annotations

import logging
import types
from typing import Any

import pytest

from pgworkerd.contrib import otel_worker
from pgworkerd.contrib.otel import TRACE_MODULE


class Provider:
    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.timeouts: list[int] = []

    def force_flush(self, timeout_millis: int) -> Any:
        self.timeouts.append(timeout_millis)
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


def _flush_with(monkeypatch: pytest.MonkeyPatch, provider: Provider) -> None:
    trace = types.SimpleNamespace(_TRACER_PROVIDER=provider)
    monkeypatch.setattr(otel_worker, "_modules", {TRACE_MODULE: trace})
    otel_worker.flush_spans()


@pytest.mark.parametrize(
    ("answer", "said"),
    [(True, False), (None, False), (False, True), (RuntimeError("collector gone"), True)],
)
def test_a_flush_that_did_not_export_is_said(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, answer: Any, said: bool
) -> None:
    provider = Provider(answer)
    with caplog.at_level(logging.WARNING, logger="pgworkerd.worker"):
        _flush_with(monkeypatch, provider)
    assert provider.timeouts == [int(otel_worker.FLUSH_TIMEOUT_S * 1000)]
    lines = [r.getMessage() for r in caplog.records if "not exported" in r.getMessage()]
    assert len(lines) == (1 if said else 0)
