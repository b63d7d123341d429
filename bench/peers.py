"""The peers' harnesses (bench_*.py in the `--peers-dir` directory, not part of this
repository), run as run_all.sh runs them:
each mode in a fresh database, from the venvs run_all.sh builds, under a hard time cap,
with the protocol passed in the same environment variables. Their RESULT line is the
record.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.measure import Protocol

RUN_TIMEOUT_S = 180  # run_all.sh's cap per harness run
VENV311 = Path(os.environ.get("PEERBENCH_VENV", "/tmp/peervenv"))
VENV312 = Path(os.environ.get("PEERBENCH_VENV312", "/tmp/peervenv-py312"))
# The pins of run_all.sh (the versions RESULTS.md reports).
PINS311 = [
    "pgqueuer==1.6.0",
    "procrastinate==3.10.0",
    "chancy==0.26.0",
    "psycopg[binary,pool]==3.3.9",
    "asyncpg==0.32.0",
]
PINS312 = ["oban==0.7.0", "psycopg[binary,pool]==3.3.9"]
PY311_CANDIDATES = ["python3.11", *sorted(glob.glob("/root/.pyenv/versions/3.11*/bin/python3.11"))]
PY312_CANDIDATES = [
    "/root/.pyenv/versions/3.12.1/bin/python3.12",
    "python3.12",
    *sorted(glob.glob("/root/.pyenv/versions/3.12*/bin/python3.12")),
]


@dataclass(frozen=True)
class Venv:
    path: Path
    interpreters: list[str]
    pins: list[str]


PY311 = Venv(VENV311, PY311_CANDIDATES, PINS311)
PY312 = Venv(VENV312, PY312_CANDIDATES, PINS312)


@dataclass(frozen=True)
class Peer:
    name: str
    script: str
    venv: Venv
    imports: tuple[str, ...]  # what must import for the harness to run
    env: dict[str, str] = field(default_factory=dict)
    reference: bool = False  # the raw loop: a yardstick, not a peer


PEERS: dict[str, Peer] = {
    p.name: p
    for p in [
        Peer(
            "pgqueuer_apg",
            "bench_pgqueuer.py",
            PY311,
            ("pgqueuer", "asyncpg"),
            {"PGQ_DRIVER": "apg"},
        ),
        Peer(
            "pgqueuer_psy",
            "bench_pgqueuer.py",
            PY311,
            ("pgqueuer", "psycopg"),
            {"PGQ_DRIVER": "psy"},
        ),
        Peer(
            "procrastinate",
            "bench_procrastinate.py",
            PY311,
            ("procrastinate",),
            {"PEERBENCH_CONCURRENCY": "10"},
        ),
        Peer("oban", "bench_oban.py", PY312, ("oban", "psycopg"), {"PEERBENCH_CONCURRENCY": "10"}),
        Peer("chancy", "bench_chancy.py", PY311, ("chancy",), {"PEERBENCH_CONCURRENCY": "10"}),
        Peer(
            "raw_2x100",
            "bench_rawpsycopg.py",
            PY311,
            ("psycopg",),
            {"RAW_PROCS": "2", "RAW_BATCH": "100"},
            reference=True,
        ),
        Peer(
            "raw_8x1",
            "bench_rawpsycopg.py",
            PY311,
            ("psycopg",),
            {"RAW_PROCS": "8", "RAW_BATCH": "1"},
            reference=True,
        ),
    ]
}
DEFAULT_PEERS = ("pgqueuer_apg", "raw_2x100")  # the best peer in RESULTS.md, the reference


_build_failed: set[Path] = set()  # one failed install is not retried for every peer


def ready(peer: Peer, log: Path) -> bool:
    """Make sure the peer's venv exists and its imports work, building it as run_all.sh
    does if not; False (with a note printed) when that fails."""
    python = peer.venv.path / "bin" / "python"
    if python.exists() and _imports(python, peer.imports):
        return True
    if peer.venv.path in _build_failed:
        print(f"  note: skipping {peer.name}: {peer.venv.path} could not be built")
        return False
    try:
        _build(peer.venv, log)
    except (OSError, subprocess.CalledProcessError, RuntimeError) as exc:
        _build_failed.add(peer.venv.path)
        print(f"  note: skipping {peer.name}: cannot build {peer.venv.path} ({exc}; see {log})")
        return False
    if not _imports(python, peer.imports):
        print(
            f"  note: skipping {peer.name}: {', '.join(peer.imports)} do not import "
            f"in {peer.venv.path}"
        )
        return False
    return True


def run(
    peer: Peer, mode: str, dsn: str, peers_dir: Path, proto: Protocol, log: Path
) -> dict[str, Any] | None:
    """One harness run; its RESULT record, or None (the log says why)."""
    env = {
        **os.environ,
        **peer.env,
        "PEERBENCH_DSN": dsn,
        "PEERBENCH_N": str(proto.n),
        "PEERBENCH_N_SINGLE": str(proto.n_single),
        "PEERBENCH_ENQ_BATCH": str(proto.enq_batch),
        "PEERBENCH_TRICKLE_N": str(proto.trickle_n),
        "PEERBENCH_TRICKLE_RATE": str(proto.trickle_rate),
        "PEERBENCH_PHASE_TIMEOUT": str(proto.phase_timeout_s),
    }
    env.pop("PEERBENCH_OUT", None)  # the record is read from stdout; no stray appends
    env.pop("PYTHONPATH", None)  # the peer's venv only, not our packages
    argv = [str(peer.venv.path / "bin" / "python"), str(peers_dir / peer.script), mode]
    returncode = run_harness(argv, env, log, f"{peer.name} {mode}")
    lines = [
        line for line in log.read_text(errors="replace").splitlines() if line.startswith("RESULT ")
    ]
    if not lines:
        print(f"  note: {peer.name} {mode} gave no RESULT (exit {returncode}; see {log})")
        return None
    return json.loads(lines[-1][len("RESULT ") :])


def run_harness(argv: list[str], env: dict[str, str], log: Path, what: str) -> int:
    """Run a peer's harness in a session of its own, output to `log`, killed (with
    whatever it forked) past RUN_TIMEOUT_S or if we are interrupted; its exit status."""
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            proc.wait(timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            print(f"  note: {what} passed {RUN_TIMEOUT_S}s and was killed")
        finally:  # timed out, or we were interrupted
            if proc.poll() is None:
                # The harness forks workers (raw loop): end its whole session, ours.
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    return proc.returncode


def _imports(python: Path, modules: tuple[str, ...]) -> bool:
    code = "; ".join(f"import {m}" for m in modules)
    return subprocess.run([str(python), "-c", code], capture_output=True).returncode == 0


def _build(venv: Venv, log: Path) -> None:
    python = venv.path / "bin" / "python"
    with log.open("ab") as out:
        if not python.exists():
            interpreter = next((c for c in venv.interpreters if _runs(c)), None)
            if interpreter is None:
                raise RuntimeError(f"none of {', '.join(venv.interpreters)} runs")
            print(f"  creating {venv.path} with {interpreter} (once; reused next time)")
            subprocess.run(
                [interpreter, "-m", "venv", str(venv.path)],
                check=True,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
            subprocess.run(
                [str(python), "-m", "pip", "install", "-q", "--upgrade", "pip"],
                check=True,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        print(f"  installing {' '.join(venv.pins)} into {venv.path}")
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", *venv.pins],
            check=True,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def _runs(interpreter: str) -> bool:
    path = shutil.which(interpreter) or interpreter
    try:
        return (
            subprocess.run([path, "-c", "import sys"], capture_output=True, timeout=30).returncode
            == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
