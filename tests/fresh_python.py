"""Run code in a new interpreter: for what a module imports (a process's sys.modules is
shared by every test that ran before in it)."""

from __future__ import annotations

import subprocess
import sys


def printed_by_new_python(code: str) -> list[str]:
    """What `code` prints in a new Python, split on whitespace; raises if it fails."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return done.stdout.split()
