"""CPU per log line of a job, in one process: `logs.event` of a `job succeeded` line
(text, info) to /dev/null, 100,000 lines, five runs.

    PYTHONPATH=<checkout> python bench/log_cost.py [LABEL]

The pgworkerd it measures is the one PYTHONPATH finds: alternate two checkouts
(A B A B ...) to compare them. Prints the µs per line of each run.
"""

from __future__ import annotations

import logging
import os
import sys
import time

from pgworkerd import logs

LINES = 100_000
RUNS = 5


def main() -> int:
    label = sys.argv[1] if len(sys.argv) > 1 else "this"
    out = sys.stdout
    with open(os.devnull, "w") as devnull:
        sys.stderr = devnull  # where setup's handler writes
        logs.setup("text", role="worker default#1")
        log = logging.getLogger("pgworkerd.worker")
        per_line = []
        for _ in range(RUNS):
            t0 = time.process_time()
            for i in range(LINES):
                logs.event(
                    log,
                    logging.INFO,
                    "job succeeded",
                    job=i,
                    kind="noop",
                    attempt=1,
                    duration_ms=0.1,
                )
            per_line.append((time.process_time() - t0) / LINES * 1e6)
        sys.stderr = sys.__stderr__
    print(f"{label}: µs per line, {RUNS} runs: " + " ".join(f"{x:.2f}" for x in per_line), file=out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
