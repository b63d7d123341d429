"""The YAML configuration file: one pydantic model drives types, defaults, bounds and the
error lines (`settings`), the values it is made of (`units`), the periodic entries and
retention, where the file is found (`location`), and reading the file with the
environment's overrides (`loading`)."""

import lazy_loader

# The CLI's parser reads `location` alone, before it knows whether a command needs the
# config: each name is imported on its first use instead, from the module
# pgworkerd/config/__init__.pyi names (which mypy reads), so that importing
# `pgworkerd.config.location` does not load pydantic and pydantic_settings (~0.3 s).
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
