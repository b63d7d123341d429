"""pgworkerd: background jobs on the PostgreSQL you already run.

The public API: enqueue jobs in your own transaction (on a psycopg Connection or
AsyncConnection), and the values a handler receives and raises; read a job's result and
wait for its end.
"""

import lazy_loader

# Every `pgworkerd` command starts a new Python, and these names' modules load psycopg,
# pydantic and the whole client (~0.6 s): each name is imported on its first use
# instead, from the module pgworkerd/__init__.pyi names (which mypy reads).
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
