"""A HUP's loading: the config file read again and its handlers imported, in a thread
of its own, so that the supervisor's loop keeps turning meanwhile. A handler module
may take seconds to import (a model loaded at import time); done inline, the loop
renewed no lease and answered no health check until it was done, and another daemon
rescued the jobs it was running.

While a load runs the supervisor forks no child (core.py): a fork while another
thread imports could leave the child an import lock held by a thread it does not
have. The thread is a daemon thread: a supervisor told to stop does not wait for an
import that may never end.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from pgworkerd import config as config_module
from pgworkerd import handlers
from pgworkerd.config import Config, ConfigError
from pgworkerd.errors import mask_passwords
from pgworkerd.handlers import Handler, HandlerError


@dataclass
class Loading:
    config_path: str | None
    loaded: tuple[Config, dict[str, Handler]] | None = None  # when it went through
    problems: list[str] = field(default_factory=list)  # when it did not
    _thread: threading.Thread | None = None

    def start(self) -> Loading:
        self._thread = threading.Thread(target=self._load, name="reload", daemon=True)
        self._thread.start()
        return self

    @property
    def done(self) -> bool:
        return self._thread is not None and not self._thread.is_alive()

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
            self.loaded = (new_config, registry)
