"""A module listed under task_modules that defines no task: a config mistake."""
