"""A handler module that fails on import, for the tests of handler loading."""

raise RuntimeError("this module refuses to import")
