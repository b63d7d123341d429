"""`pgworkerd health`: ask the daemon of this config whether it is ready.

Exit 0 when GET /readyz on its `http.listen` answers 200; 1 otherwise, with one line
saying why; 2 when the config has no HTTP listener (an error line, as every command's)."""

from __future__ import annotations

import argparse
import sys

from pgworkerd.cli.common import CommandAdder, load_config
from pgworkerd.errors import ConfigError

TIMEOUT_S = 5.0
HELP = "exit 0 when the daemon of this config answers 200 on /readyz, else 1"


def register(command: CommandAdder) -> None:
    command("health", cmd_health, HELP)


def cmd_health(args: argparse.Namespace) -> int:
    # Here, not at the top: every command's start loads this module, and urllib.request
    # (http.client, email, ssl) is ~50 ms of it; the config's pydantic loads just below.
    import urllib.error
    import urllib.request

    from pgworkerd.config import host_port

    config = load_config(args)
    if config.http is None:
        raise ConfigError(["http.listen: not set: the daemon has no HTTP listener to ask"])
    host, port = host_port(config.http.listen)
    if host in ("0.0.0.0", "::"):
        host = "127.0.0.1" if host == "0.0.0.0" else "::1"
    netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    url = f"http://{netloc}/readyz"
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as answer:
            print(f"ready: {url} answered {answer.status}")
            return 0
    except urllib.error.HTTPError as exc:
        why = exc.read(200).decode("utf-8", "replace").strip()
        print(f"pgworkerd: not ready: {url} answered {exc.code}: {why}", file=sys.stderr)
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        print(f"pgworkerd: not ready: {url}: {reason}", file=sys.stderr)
    return 1
