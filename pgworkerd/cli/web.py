"""`pgworkerd web`: serve the dashboard (pgworkerd/web/), an optional extra."""

from __future__ import annotations

import argparse

from pgworkerd.cli.common import CommandAdder, UsageError, load_config

WEB_EXTRA = ("starlette", "jinja2", "uvicorn")  # what `pip install pgworkerd[web]` brings


def register(command: CommandAdder) -> None:
    web = command("web", cmd_web, "serve the dashboard (needs pip install 'pgworkerd[web]')")
    web.add_argument("--listen", metavar="HOST:PORT", help="default: the config's web.listen")
    web.add_argument("--read-only", action="store_true", help="show the jobs, offer no action")


def cmd_web(args: argparse.Namespace) -> int:
    try:
        from pgworkerd.web import serve  # the extra's packages load only for `web`
    except ImportError as exc:
        if (exc.name or "").partition(".")[0] not in WEB_EXTRA:
            raise
        install = "pip install 'pgworkerd[web]'"
        raise UsageError(f"web: the dashboard needs the web extra: {install}") from None
    return serve(load_config(args), listen=args.listen, read_only=args.read_only)
