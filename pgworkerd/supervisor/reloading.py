"""A HUP's loading: the config file read again and its handlers imported, in a thread
of its own, so that the supervisor's loop keeps turning meanwhile. A handler module
may take seconds to import (a model loaded at import time); done inline, the loop
renewed no lease and answered no health check until it was done, and another daemon
rescued the jobs it was running.

While a load runs the supervisor forks no child (core.py): a fork while another
thread imports could leave the child an import lock held by a thread it does not
have. The thread is a daemon thread: a supervisor told to stop does not wait for an
import that may never end.

A load has `reload_timeout` to finish (core.py, _reloaded). Past it, the reload is
refused with a line saying what the thread was doing (`doing`: the module it imports),
and the supervisor forks again. A thread cannot be killed, so the stuck one is left
behind, and the forks that follow happen while it is in the middle of an import. That
is safe for the children of the running config: what such a thread holds is the
import locks of the modules it is importing (the stuck module, the ones importing it),
all modules the running config does not use, since a module it does use is in
sys.modules, complete, and importing it again takes no lock. A child inherits those
locks held by a thread it does not have, and would hang only by importing one of those
modules itself. (Locks the stuck module's own code took cannot be known; the common
hang, a blocking call at import, holds none a worker uses, and the interpreter's own,
logging's among them, are reset in a child at fork.) Waiting for the thread instead
stopped every respawn for ever: a worker killed later was never replaced, and with
none left no job ran while the health checks said all was well. A later load of a
config that names the stuck module waits on its lock, and is refused in its turn
after its own reload_timeout.

`module_files` stamps the files of the imported modules and of the packages that hold
the config's handlers, so that a HUP of an unchanged config over unchanged code replaces
nothing (core.py, _apply_reload).
"""

from __future__ import annotations

import os
import sys
import threading
import time
import types
from dataclasses import dataclass, field

from pgworkerd import config as config_module
from pgworkerd import handlers
from pgworkerd.config import Config, ConfigError
from pgworkerd.errors import mask_passwords
from pgworkerd.handlers import Handler, HandlerError

Stamps = dict[str, tuple[int, int]]  # module file path -> (ctime in ns, size)


@dataclass
class Loading:
    config_path: str | None
    loaded: tuple[Config, dict[str, Handler]] | None = None  # when it went through
    problems: list[str] = field(default_factory=list)  # when it did not
    # The module files' stamps after the load (module_files), when it went through.
    files: Stamps = field(default_factory=dict)
    started_at: float = 0.0  # time.monotonic()
    _thread: threading.Thread | None = None

    def start(self) -> Loading:
        self.started_at = time.monotonic()
        self._thread = threading.Thread(target=self._load, name="reload", daemon=True)
        self._thread.start()
        return self

    @property
    def done(self) -> bool:
        return self._thread is not None and not self._thread.is_alive()

    def doing(self) -> str:
        """What the thread is at, for the line that refuses a load past its time: the
        module whose import runs (the innermost module body on its stack), else the
        function it is in."""
        thread = self._thread
        frame = sys._current_frames().get(thread.ident) if thread and thread.ident else None
        innermost = frame
        while frame is not None:
            code = frame.f_code
            if code.co_name == "<module>" and not code.co_filename.startswith("<frozen"):
                name = frame.f_globals.get("__name__", "?")
                where = f"{code.co_filename}, line {frame.f_lineno}"
                return mask_passwords(f"importing the module {name} ({where})")
            frame = frame.f_back
        if innermost is None:
            return "done"
        code = innermost.f_code
        where = f"{code.co_filename}, line {innermost.f_lineno}"
        return mask_passwords(f"in {code.co_name} ({where})")

    def _load(self) -> None:
        try:
            # The source `run` read at start (config.config_source): its file again
            # (gone: refused, the running config kept), or with None, the environment
            # alone, read again (a HUP of such a daemon was refused, "no such file").
            new_config = config_module.load_source(self.config_path)
            registry = handlers.load_registry(new_config.handlers, new_config.task_modules)
            handlers.check_periodic_kinds(new_config, registry)
            handlers.check_child_modules(new_config)
        except (ConfigError, HandlerError) as exc:
            self.problems = list(exc.problems)
        except Exception as exc:  # a bug of ours: refused, said, the loop goes on
            problem = f"cannot load the config: {type(exc).__name__}: {exc}"
            self.problems = [mask_passwords(problem)]  # it is logged
        else:
            self.files = module_files(new_config)
            self.loaded = (new_config, registry)


def module_files(config: Config) -> Stamps:
    """(ctime in ns, size) by path of the file of every imported module, and of every
    .py file under the packages that hold `config`'s handlers and task modules (their
    top-level packages, imported or not); (-1, -1) for a file gone. A deploy may change
    the code under an unchanged config: the reload that follows must not take it for
    "nothing changed". A handler may import its helpers inside its function, after the
    fork, where this process never sees them: new workers import them afresh, so a
    change there is one the reload must apply, and those files are found by walking
    the package. The ctime, not the mtime: a deploy that keeps the files' times (rsync
    -a, tar, a Nix store) still changes their ctime, which no tool sets. Read from
    each module's __dict__, never getattr: a lazy module's __getattr__ would import in
    this thread. A helper outside those packages, imported only after the fork, is
    not seen (docs/configuration.md, "Reloading")."""
    stamps: Stamps = {}
    for module in list(sys.modules.values()):
        path = module.__dict__.get("__file__") if isinstance(module, types.ModuleType) else None
        if isinstance(path, str) and path not in stamps:
            stamps[path] = _stamp(path)
    for folder in _handler_packages(config):
        for root, dirs, files in os.walk(folder):
            dirs[:] = [d for d in dirs if d != "__pycache__" and not d.startswith(".")]
            for name in files:
                path = os.path.join(root, name)
                if name.endswith(".py") and path not in stamps:
                    stamps[path] = _stamp(path)
    return stamps


def _stamp(path: str) -> tuple[int, int]:
    try:
        stat = os.stat(path)
    except OSError:
        return (-1, -1)
    return (stat.st_ctime_ns, stat.st_size)


def _handler_packages(config: Config) -> list[str]:
    """The folders of the imported top-level packages that hold the config's handlers
    and task modules (a top-level module that is one file has its own stamp)."""
    names = [path.partition(":")[0] for path in config.handlers.values()]
    names += config.task_modules
    folders: list[str] = []
    for top in sorted({name.partition(".")[0] for name in names}):
        module = sys.modules.get(top)
        paths = module.__dict__.get("__path__") if module is not None else None
        for folder in list(paths or []):
            if isinstance(folder, str) and folder not in folders:
                folders.append(folder)
    return folders


def changed_files(before: Stamps, after: Stamps) -> list[str]:
    """The files of `before` whose stamps `after` shows changed (a module `after` does
    not know, one dropped from sys.modules since, is taken as unchanged)."""
    return [path for path, stamp in before.items() if after.get(path, stamp) != stamp]
