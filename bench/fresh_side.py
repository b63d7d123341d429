"""One measurement in a fresh Python that imports a given checkout's package, for the
benches that compare two checkouts in isolation (bench.claim_cpu, bench.ledger_cost):
the bench's own file is run by its path with `--one`, so the other checkout need not
have it, and prints its figures as JSON on its last line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def measure_in_checkout(script: str, code: Path, args: list[str]) -> dict[str, float]:
    """Run `script --one ARGS` with `code` first on the import path; its last line's JSON."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    out = subprocess.run(
        [sys.executable, str(Path(script).resolve()), "--one", *args],
        env=env,
        cwd=code,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return result
