"""systemd/pgworkerd.service: systemd's own parser accepts every key, and the values that
the drain, the watchdog and the hardening depend on are there."""

from __future__ import annotations

import configparser
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pgworkerd.config import Config
from tests.tools import missing

REPO = Path(__file__).resolve().parents[2]
UNIT = REPO / "systemd" / "pgworkerd.service"
# What `systemd-analyze verify` says of a key it does not know or a value it cannot
# parse: it only warns ("..., ignoring") and still exits 0.
COMPLAINT = re.compile(r"unknown|invalid|failed to parse|ignoring|not executable", re.I)


@pytest.fixture
def _systemd_analyze() -> None:
    if shutil.which("systemd-analyze") is None:
        missing("systemd-analyze is not installed (Debian: apt-get install systemd)")


needs_analyze = pytest.mark.usefixtures("_systemd_analyze")


def verify(unit_text: str, directory: Path) -> tuple[int, str]:
    """`systemd-analyze verify` on a copy of the unit whose ExecStart is this venv's
    pgworkerd (verify checks that the binary exists and is executable)."""
    pgworkerd = Path(sys.executable).parent / "pgworkerd"
    assert pgworkerd.exists()
    text = re.sub(r"^ExecStart=\S+", f"ExecStart={pgworkerd}", unit_text, flags=re.M)
    copy = directory / "pgworkerd.service"
    copy.write_text(text)
    done = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(copy)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=directory,
    )
    return done.returncode, done.stdout + done.stderr


@needs_analyze
def test_systemd_analyze_verify_finds_no_unknown_or_invalid_key(tmp_path: Path) -> None:
    code, output = verify(UNIT.read_text(), tmp_path)
    complaints = [line for line in output.splitlines() if COMPLAINT.search(line)]
    assert (code, complaints) == (0, [])


@needs_analyze
def test_verify_does_catch_a_bad_key_so_the_check_above_means_something(
    tmp_path: Path,
) -> None:
    bad = re.sub(
        r"^KillMode=mixed$", "KillMode=mixd\nWatchdogSecs=30s", UNIT.read_text(), flags=re.M
    )
    _, output = verify(bad, tmp_path)
    assert len([line for line in output.splitlines() if COMPLAINT.search(line)]) == 2


def _service() -> configparser.SectionProxy:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(UNIT.read_text())
    return parser["Service"]


def _seconds(value: str) -> float:
    match = re.fullmatch(r"(\d+)(s|min)?", value)
    assert match, value
    return int(match[1]) * (60 if match[2] == "min" else 1)


def test_the_unit_drains_before_systemd_kills_and_restarts_a_wedged_daemon() -> None:
    service = _service()
    assert service["Type"] == "notify"
    assert service["NotifyAccess"] == "main"
    assert service["KillMode"] == "mixed"
    assert service["KillSignal"] == "SIGTERM"
    assert service["Restart"] == "on-failure"
    assert service["ExecReload"] == "/bin/kill -HUP $MAINPID"
    assert service["ExecStart"].endswith("/pgworkerd run")
    default_drain_s = Config.model_fields["shutdown_timeout"].default
    # The drain, then the kill of what is left and the write-back of its jobs.
    assert _seconds(service["TimeoutStopSec"]) >= default_drain_s + 15
    assert _seconds(service["WatchdogSec"]) >= 10  # a healthy turn can wait 5 s on the db


def test_the_unit_runs_unprivileged_and_hardened() -> None:
    service = _service()
    assert service["User"] not in ("", "root", "0")
    expected = {
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "PrivateDevices": "yes",
        "RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6",
        "CapabilityBoundingSet": "",
    }
    assert {key: service.get(key) for key in expected} == expected
    text = UNIT.read_text()
    assert re.search(r"^#MemoryMax=", text, re.M)
    assert re.search(r"^#TasksMax=", text, re.M)
    assert "PGWORKERD_DATABASE_URL" not in service.get("Environment", "")
