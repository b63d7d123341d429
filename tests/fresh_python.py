"""Run code in a new interpreter: for what a module imports (a process's sys.modules is
shared by every test that ran before in it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def printed_by_new_python(code: str) -> list[str]:
    """What `code` prints in a new Python, split on whitespace; raises if it fails."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return done.stdout.split()


def json_printed_last_by_new_python(code: str, *args: str) -> Any:
    """The JSON value on the last line `code` prints in a new Python started in the
    repository with `args` as its arguments; raises if it fails or takes over 60 s."""
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])
