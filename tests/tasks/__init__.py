"""Modules of `@pgworkerd.task` functions that the tests list under `task_modules`."""
