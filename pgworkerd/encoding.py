"""JSON in and out of the jobs table: strict for payloads, forgiving for outcomes.

PostgreSQL's jsonb refuses the NUL character and json refuses NaN, and no text can hold
a lone surrogate (a str that is not valid Unicode, which UTF-8 cannot encode); a payload
with any of them is refused before any SQL runs, while an error text or result that
carries one is escaped (or, for a result, replaced by a marker), so recording an outcome
can never fail on its content.
"""

from __future__ import annotations

import json
import json.encoder
import threading
from collections.abc import Callable
from dataclasses import dataclass
from json.encoder import encode_basestring
from typing import Any

from pgworkerd.errors import InvalidJob

# A payload's largest JSON text, in UTF-8 bytes, unless the producer is given another.
DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024
# A payload's (and a kept result's) deepest nesting of arrays and objects (`{}` is one
# level, `{"a": []}` two). Python decodes JSON by recursion, each level counted against
# the recursion limit (1000 by default) with the frames of whoever decodes it: a worker
# under its loop, the dashboard under its server, a Django view, a handler that walks
# or re-encodes the value (indented, a frame or two a level). A value 990 deep encoded
# in a producer's shallow stack, and no reader could decode it (a worker exited at each
# claim of it). 100 leaves each reader hundreds of frames; no real payload needs more.
MAX_PAYLOAD_DEPTH = 100
# A text shorter than this holds no value nested deeper (each level is a `[]` or `{}`).
_DEEP_TEXT_CHARS = 2 * (MAX_PAYLOAD_DEPTH + 1)

ESCAPED_NUL = "\\u0000"  # what a NUL becomes in stored error texts and results
MAX_ERROR_CHARS = 32_000  # last_error keeps this much of a message and traceback
MAX_RESULT_BYTES = 1024 * 1024  # a result's JSON: as much as a payload may hold
RESULT_OMITTED = "pgworkerd_result_omitted"  # the key of the marker of a dropped result
UNDECODABLE = "pgworkerd_undecodable"  # the key of the marker of a stored value too deep


# Built once: json.dumps with options builds a new encoder on every call.
_STRICT = json.JSONEncoder(allow_nan=False, ensure_ascii=False, separators=(",", ":"))
# What JSONEncoder.iterencode calls for a one-shot encode (None without the C accelerator;
# not in the stubs: read by name).
_C_MAKE_ENCODER: Callable[..., Callable[[Any, int], tuple[str, ...]]] | None = getattr(
    json.encoder, "c_make_encoder", None
)


# The C encoder of `_strict_text`, one per thread, built at the thread's first payload:
# building it was a third of encoding a small payload. Per thread, as its dict of the
# containers being encoded (the cycle check) must not see another encoding's.
_ENCODERS = threading.local()


def _strict_text(value: Any) -> str:
    """`_STRICT.encode(value)`, the same text and errors, without the Python frames of
    JSONEncoder.encode and iterencode around the C encoder (which they build afresh at
    each call too): about half the cost of encoding a small payload."""
    if _C_MAKE_ENCODER is None:  # an interpreter without the C accelerator
        return _STRICT.encode(value)
    try:
        encode, markers = _ENCODERS.strict
    except AttributeError:
        markers = {}
        # _STRICT's settings: no indent, its separators, sort_keys, skipkeys, allow_nan.
        encode = _C_MAKE_ENCODER(
            markers, _STRICT.default, encode_basestring, None, ":", ",", False, False, False
        )
        _ENCODERS.strict = (encode, markers)
    try:
        return "".join(encode(value, 0))
    except BaseException:
        # An encoding that fails half-way leaves the ids of the containers it was in:
        # a later payload holding one of those objects would be refused as circular.
        markers.clear()
        raise


def dump_records(records: list[dict[str, Any]], *, max_payload_bytes: int) -> str | None:
    """Job records (each with a `payload`) as one JSON array in one encoder call, or
    None when some payload may be at fault: then `dump_payload` on each says which.

    The fast path needs no per-payload work: if the whole text is within the payload
    limit, so is every payload; NUL and NaN show in the text or raise."""
    try:
        text = _STRICT.encode(records)
    except (TypeError, ValueError, RecursionError):
        return None
    if len(text) >= _DEEP_TEXT_CHARS and _too_deep_text(text, [r["payload"] for r in records]):
        return None
    if ESCAPED_NUL in text:
        return None if any(_contains_nul(r["payload"]) for r in records) else text
    try:
        size = _utf8_size(text)
    except UnicodeEncodeError:  # a lone surrogate: dump_payload says whose
        return None
    if size > max_payload_bytes:
        return None if any(_oversized(r["payload"], max_payload_bytes) for r in records) else text
    return text


def _utf8_size(text: str) -> int:
    """`text`'s length in UTF-8 bytes; UnicodeEncodeError on a lone surrogate, which
    psycopg would raise while sending it. An ASCII text is as many bytes as characters:
    no copy to count them."""
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def _oversized(payload: Any, max_bytes: int) -> bool:
    return len(_STRICT.encode(payload).encode("utf-8", "surrogatepass")) > max_bytes


def dump_payload(payload: Any, *, max_bytes: int, where: str = "payload") -> str:
    """The payload as JSON text, or InvalidJob saying in one line what is wrong."""
    try:
        text = _strict_text(payload)
    except (TypeError, ValueError) as exc:
        raise InvalidJob(f"{where} is not JSON-serialisable: {_one_line(exc)}") from None
    except RecursionError:
        # Deeper than the encoder could go from here: most likely far over the bound,
        # which the walk (no recursion) tells; else the caller's stack was nearly full.
        if _deeper_than_limit([payload], distinct=True):
            raise InvalidJob(_too_deep(where)) from None
        raise InvalidJob(f"{where} could not be encoded: the caller's stack is too deep") from None
    # The length first, inline: the usual payload's one cost of the bound.
    if len(text) >= _DEEP_TEXT_CHARS and _too_deep_text(text, [payload]):
        raise InvalidJob(_too_deep(where))
    # json escapes a NUL as \u0000; only then walk the value to tell it apart from a
    # string that holds a literal backslash-u-0-0-0-0.
    if ESCAPED_NUL in text and _contains_nul(payload):
        raise InvalidJob(f"{where} contains a NUL character, which PostgreSQL cannot store")
    try:
        size = _utf8_size(text)
    except UnicodeEncodeError as exc:
        raise InvalidJob(f"{where} is not valid Unicode: {_one_line(exc)}") from None
    if size > max_bytes:
        raise InvalidJob(f"{where} is {size} bytes of JSON, over the limit of {max_bytes} bytes")
    return text


def _too_deep(where: str) -> str:
    return f"{where} is nested more than {MAX_PAYLOAD_DEPTH} levels deep (arrays and objects)"


def _too_deep_text(text: str, values: list[Any]) -> bool:
    """Whether `values`, encoded as `text` (of _DEEP_TEXT_CHARS or more: a shorter one
    cannot hold a value nested deeper than MAX_PAYLOAD_DEPTH, which the callers check
    first), nest deeper: not a text with no more `[` and `{` (in strings too) than
    levels allowed (two scans in C), else as the walk finds."""
    if text.count("[") + text.count("{") <= MAX_PAYLOAD_DEPTH:
        return False
    return _deeper_than_limit(values)


_CONTAINERS = (dict, list, tuple)  # what the encoder writes as objects and arrays


def _deeper_than_limit(values: list[Any], *, distinct: bool = False) -> bool:
    """Whether any of `values` nests arrays and objects more than MAX_PAYLOAD_DEPTH
    deep. Level by level, not by recursion: a value too deep to encode is walked all the
    same. A value the encoder took is walked as it encoded it (no more work than its
    text); `distinct` for one it gave up on (RecursionError): each level's containers
    once, so that one shared many times over (a list of two of the same list, nested)
    costs what it holds, not what it would encode to (a cycle reads as too deep)."""
    level = [v for v in values if isinstance(v, _CONTAINERS)]
    depth = 0
    while level:
        depth += 1
        if depth > MAX_PAYLOAD_DEPTH:
            return True
        # One comprehension a level, not a loop a container: walking a bulk list's
        # 1,000 payloads of one key each took 0.13 ms so, 0.3 ms with a generator each.
        level = [
            v
            for c in level
            for v in (c.values() if isinstance(c, dict) else c)
            if isinstance(v, _CONTAINERS)
        ]
        if distinct:
            level = list({id(v): v for v in level}.values())
    return False


def dump_trace_context(carrier: dict[str, str]) -> str:
    """The W3C trace context `otel` records with a job (strings only) as JSON text."""
    return _STRICT.encode(carrier)


def dump_result(value: Any, *, max_bytes: int = MAX_RESULT_BYTES) -> str | None:
    """A handler's return value as JSON text (NULs escaped); None for None.

    The job succeeded whatever it returned: a value that cannot be kept (not
    JSON-serialisable, or over `max_bytes` of JSON) is replaced by a marker object
    saying why, `{"pgworkerd_result_omitted": "..."}`, rather than failing the job and
    running its work again."""
    if value is None:
        return None
    try:
        text = json.dumps(_without_nul(value), allow_nan=False, ensure_ascii=False)
        size = _utf8_size(text)  # UnicodeEncodeError is a ValueError
    except RecursionError as exc:
        if _deeper_than_limit([value], distinct=True):
            return _omitted(_DEEP_RESULT)
        return _omitted(f"not JSON-serialisable: {_one_line(exc)}")
    except (TypeError, ValueError) as exc:
        return _omitted(f"not JSON-serialisable: {_one_line(exc)}")
    # As a payload's: a reader (`pgworkerd.result`, the dashboard) decodes it in turn.
    if len(text) >= _DEEP_TEXT_CHARS and _too_deep_text(text, [value]):
        return _omitted(_DEEP_RESULT)
    if size > max_bytes:
        return _omitted(f"{size} bytes of JSON, over the limit of {max_bytes} bytes")
    return text


_DEEP_RESULT = f"nested more than {MAX_PAYLOAD_DEPTH} levels deep"


@dataclass(frozen=True, slots=True)
class EncodedResult:
    """A handler's result already encoded by `dump_result`: the worker stores `text` as
    it is (outcome_of_value) instead of encoding the value again. contrib/django
    encodes a task's value to refuse one the worker would replace by its marker, and
    hands over that text. Made by `encode_result` only: the worker trusts the text to
    be what dump_result returns (JSON that PostgreSQL can store, or None)."""

    text: str | None


def encode_result(value: Any) -> EncodedResult:
    """`dump_result(value)`, for a handler to return in place of `value`."""
    return EncodedResult(dump_result(value))


def _omitted(reason: str) -> str:
    return json.dumps({RESULT_OMITTED: reason[:500]}, ensure_ascii=False)


class Undecodable(dict[str, str]):
    """What a reader gets in place of a stored JSON value (a payload, a result) it
    could not decode: nested deeper than Python's recursion limit allows where it
    decodes (a row written by SQL, by a version without MAX_PAYLOAD_DEPTH, or by a
    bug). The marker object `{"pgworkerd_undecodable": why, "text": its JSON text}`,
    which every reader can show and encode again, instead of an error that took the
    reader down (`jobs show`, the dashboard's page, a worker at each claim of it). A
    class of its own, so that a worker tells it from a payload of those two keys: the
    job is not run (execution.outcome_of_undecodable)."""

    __slots__ = ()

    @classmethod
    def of(cls, text: str) -> Undecodable:
        why = (
            "nested too deeply to decode here (pgworkerd refuses payloads and results"
            f" nested more than {MAX_PAYLOAD_DEPTH} levels deep)"
        )
        return cls({UNDECODABLE: why, "text": text})


def storable_text(text: str) -> str:
    """`text` with its NULs and lone surrogates escaped (as `\\u0000`, `\\ud800`): a text
    PostgreSQL can store (a surrogate made psycopg raise while writing an outcome, and
    the worker exit with the job's success unwritten)."""
    text = text.replace("\x00", ESCAPED_NUL)
    if text.isascii():
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def clean_error(text: str) -> str:
    """An error text safe to store: NULs and lone surrogates escaped, bounded in length."""
    text = storable_text(text)
    if len(text) > MAX_ERROR_CHARS:
        cut = len(text) - MAX_ERROR_CHARS
        text = text[:MAX_ERROR_CHARS] + f"\n... [{cut} more characters cut]"
    return text


def _contains_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_contains_nul(k) or _contains_nul(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(_contains_nul(item) for item in value)
    return False


def _without_nul(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("\x00", ESCAPED_NUL)
    if isinstance(value, dict):
        return {_without_nul(k): _without_nul(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_without_nul(item) for item in value]
    return value


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())
