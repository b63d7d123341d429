"""A local PostgreSQL cluster for a machine that has the server binaries but no server.

Used twice: by `database.url` when none is configured (data under `.pgworkerd/`,
kept between runs, reused if already running) and by the test suite (a throwaway
cluster in a temporary directory). initdb refuses to run as root, so as root every
server command runs as the `postgres` user and the data directory is handed to it.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pgworkerd.errors import PgworkerdError

SERVER_USER = "postgres"  # the account that owns the cluster when we run as root
SUPERUSER = "postgres"  # the database role initdb creates

# Settings for a throwaway test cluster: durability is worthless there, speed is not.
FAST_UNSAFE_SETTINGS: Mapping[str, str] = {
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
}


class EmbeddedError(PgworkerdError):
    """The local cluster could not be found, created or started."""


def find_bin_dir() -> Path:
    """The directory holding initdb/pg_ctl: PATH first, else the newest Debian layout."""
    on_path = shutil.which("pg_ctl")
    if on_path and shutil.which("initdb"):
        return Path(on_path).resolve().parent
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0,
    )
    if not candidates:
        raise EmbeddedError(
            "no PostgreSQL server binaries found (initdb/pg_ctl on PATH or "
            "/usr/lib/postgresql/*/bin); install them or set database.url"
        )
    return Path(candidates[-1]).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class EmbeddedCluster:
    """One PostgreSQL cluster in `base_dir` (data in `data/`, socket and log beside it).

    `port` None means a Unix socket only (no TCP listener): the embedded cluster of a
    developer machine; the test cluster listens on 127.0.0.1 as well.
    """

    base_dir: Path
    port: int | None = None
    settings: Mapping[str, str] = field(default_factory=dict)
    bin_dir: Path = field(default_factory=find_bin_dir)

    @property
    def data_dir(self) -> Path:
        return self.base_dir / "data"

    @property
    def socket_dir(self) -> Path:
        return self.base_dir / "run"

    @property
    def log_file(self) -> Path:
        return self.base_dir / "postgresql.log"

    @property
    def socket_port(self) -> int:
        # With no TCP listener the port still names the socket file (.s.PGSQL.<port>).
        return self.port or 5432

    def dsn(self, dbname: str = "postgres") -> str:
        if self.port is not None:
            return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{dbname}"
        return f"postgresql://{SUPERUSER}@/{dbname}?host={self.socket_dir}&port={self.socket_port}"

    # -- lifecycle -------------------------------------------------------------------

    def ensure_running(self) -> EmbeddedCluster:
        """Create the cluster if it does not exist, start it if it is not running."""
        if not (self.data_dir / "PG_VERSION").exists():
            self._initdb()
        if not self.is_running():
            self._start()
        return self

    def is_running(self) -> bool:
        if not (self.data_dir / "postmaster.pid").exists():
            return False
        result = self._run_server_cmd([self._bin("pg_ctl"), "status", "-D", str(self.data_dir)])
        return result.returncode == 0

    def stop(self, mode: str = "fast") -> None:
        """Stop the server; safe when it is not running (or was never created)."""
        if self.is_running():
            self._run_server_cmd(
                [self._bin("pg_ctl"), "stop", "-D", str(self.data_dir), "-m", mode, "-w"],
                check=True,
            )

    def start(self) -> None:
        if not self.is_running():
            self._start()

    def destroy(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.base_dir, ignore_errors=True)

    # -- internals -------------------------------------------------------------------

    def _initdb(self) -> None:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir.mkdir(exist_ok=True)
        self.socket_dir.mkdir(exist_ok=True)
        self._hand_over(self.base_dir, self.data_dir, self.socket_dir)
        self._run_server_cmd(
            [
                self._bin("initdb"),
                "-D",
                str(self.data_dir),
                "-U",
                SUPERUSER,
                # Local-only cluster: the socket lives in a directory of ours and TCP,
                # when enabled, listens on loopback only.
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
            ],
            check=True,
        )

    def _start(self) -> None:
        self.log_file.touch()
        self._hand_over(self.log_file)
        options = {
            "listen_addresses": "'127.0.0.1'" if self.port is not None else "''",
            "port": str(self.socket_port),
            "unix_socket_directories": f"'{self.socket_dir}'",
            "max_connections": "300",
            **{key: str(value) for key, value in self.settings.items()},
        }
        option_args = " ".join(f"-c {key}={value}" for key, value in options.items())
        self._run_server_cmd(
            [
                self._bin("pg_ctl"),
                "start",
                "-w",
                "-t",
                "60",
                "-D",
                str(self.data_dir),
                "-l",
                str(self.log_file),
                "-o",
                option_args,
            ],
            check=True,
        )

    def _bin(self, name: str) -> str:
        return str(self.bin_dir / name)

    def _as_root(self) -> bool:
        return os.geteuid() == 0

    def _hand_over(self, *paths: Path) -> None:
        """As root, give the server's files to the postgres user and make sure it can
        reach them (a tmp directory is 0700 by default)."""
        if not self._as_root():
            return
        entry = pwd.getpwnam(SERVER_USER)
        for path in paths:
            os.chown(path, entry.pw_uid, entry.pw_gid)
        for parent in self.base_dir.resolve().parents:
            mode = parent.stat().st_mode
            if not mode & 0o001:
                with contextlib.suppress(PermissionError):
                    os.chmod(parent, mode | 0o001)
        os.chmod(self.base_dir, self.base_dir.stat().st_mode | 0o005)

    def _run_server_cmd(
        self, argv: list[str], *, check: bool = False
    ) -> subprocess.CompletedProcess[str]:
        command = Path(argv[0]).name
        if self._as_root():
            argv = ["runuser", "-u", SERVER_USER, "--", *argv]
        result = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            # The server must not die with the terminal's Ctrl-C meant for us.
            start_new_session=True,
            check=False,
        )
        if check and result.returncode != 0:
            detail = (result.stderr or result.stdout).strip().splitlines()
            last = detail[-1] if detail else f"exit status {result.returncode}"
            raise EmbeddedError(
                f"{command} failed for {self.data_dir}: {last} (log: {self.log_file})"
            )
        return result


def local_cluster(project_dir: Path | None = None) -> EmbeddedCluster:
    """The developer-machine cluster under `.pgworkerd/` of the working directory."""
    base = (project_dir or Path.cwd()) / ".pgworkerd"
    return EmbeddedCluster(base_dir=base)
