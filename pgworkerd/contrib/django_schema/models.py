"""No models. The module is here because Django sends `post_migrate` only to the apps
that have one (django.core.management.sql.emit_post_migrate_signal)."""
