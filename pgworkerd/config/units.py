"""The values the config file is made of: durations, sizes, counts, host:port, queue
names, and the strict section every model is built on."""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_SIZE = re.compile(r"^\s*(\d+)\s*(B|KB|MB|GB|KiB|MiB|GiB)?\s*$")
_UNIT_BYTES = {
    None: 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "KiB": 2**10,
    "MiB": 2**20,
    "GiB": 2**30,
}
# package.module:function, package.module:Class.method, or package.module.function


def parse_duration(value: Any) -> Any:
    """Seconds from a number or `500ms`/`30s`/`15m`/`1h`/`1d`; other input is left for
    the field's own validation to refuse."""
    if isinstance(value, bool):
        raise ValueError("must be a duration such as 30, 30s, 15m, 1h")
    if isinstance(value, str):
        match = _DURATION.match(value)
        if match:
            return float(match[1]) * _UNIT_SECONDS[match[2]]
        try:
            return float(value)
        except ValueError:
            raise ValueError(
                f"must be a duration such as 30, 30s, 15m, 1h, not {value!r}"
            ) from None
    return value


def parse_size(value: Any) -> Any:
    """Bytes from a number or `512MiB`, `1GB` and the like."""
    if isinstance(value, bool):
        raise ValueError("must be a size such as 512MiB")
    if isinstance(value, str):
        match = _SIZE.match(value)
        if not match:
            raise ValueError(f"must be a size such as 512MiB or 1GB, not {value!r}")
        return int(match[1]) * _UNIT_BYTES[match[2]]
    return value


def no_bool(value: Any) -> Any:
    # YAML reads `yes`/`true` as booleans and pydantic would take them as 1.
    if isinstance(value, bool):
        raise ValueError("must be an integer, not a boolean")
    return value


Seconds = Annotated[float, BeforeValidator(parse_duration), Field(gt=0, le=366 * 86400)]
Bytes = Annotated[int, BeforeValidator(parse_size), Field(gt=0)]
Count = Annotated[int, BeforeValidator(no_bool)]
QueueName = Annotated[str, Field(min_length=1, max_length=255, pattern=r"^[^\x00-\x1f\x7f-\x9f]+$")]


class Section(BaseModel):
    """A part of the file: unknown keys are errors, and a loaded config never changes."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def host_port(listen: str) -> tuple[str, int]:
    """("127.0.0.1", 9187) from "127.0.0.1:9187" ("[::1]:9187" for IPv6)."""
    host, sep, port = listen.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"must be host:port such as 127.0.0.1:9187, not {listen!r}")
    return host, int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve anywhere


def _listen(listen: str) -> str:
    host_port(listen)
    return listen


# A listen address of the config (http.listen, web.listen), checked as host_port reads it.
Listen = Annotated[str, AfterValidator(_listen)]
