"""The daemon's `django:` config with the real Django: `check` sets Django up and imports
the listed modules (it never forks); `run` finds their packages before any fork (exit 2,
one line), and a worker whose Django set-up fails stops the daemon (a boot error)."""

from __future__ import annotations

import json
import os

from tests.daemon import REPO
from tests.django.conftest import PROJECT
from tests.process.test_cli import assert_one_line_error, pgworkerd

ENV_PATH = os.pathsep.join([str(REPO), str(PROJECT)])


def run_command(command, dsn, tmp_path, django):
    config = tmp_path / "pgworkerd.yaml"
    config.write_text(json.dumps({"django": django}))
    env = {"PGWORKERD_DATABASE_URL": dsn, "PYTHONPATH": ENV_PATH}
    return pgworkerd(command, "-c", str(config), env=env, cwd=tmp_path)


def test_check_sets_django_up_and_counts_its_tasks(django_dsn, tmp_path):
    result = run_command(
        "check", django_dsn, tmp_path, {"settings": "mysite.settings", "tasks": ["shop.tasks"]}
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ok: 5 handler(s) import"), result.stdout


def test_check_refuses_a_tasks_module_that_does_not_import(django_dsn, tmp_path):
    django = {"settings": "mysite.settings", "tasks": ["shop.no_such_tasks"]}
    result = run_command("check", django_dsn, tmp_path, django)
    assert_one_line_error(result, 2, "django: cannot set up Django tasks: ModuleNotFoundError")


def test_run_refuses_a_missing_package_before_any_fork(django_dsn, tmp_path):
    django = {"settings": "no_such_site.settings", "tasks": ["shop.tasks"]}
    result = run_command("run", django_dsn, tmp_path, django)
    assert_one_line_error(
        result,
        2,
        "django.settings: cannot use 'no_such_site.settings': no module named 'no_such_site'",
    )


def test_a_worker_that_cannot_set_django_up_stops_the_daemon(django_dsn, daemons):
    daemon = daemons(
        django_dsn,
        "broken",
        handlers={},
        django={"settings": "mysite.settings", "tasks": ["shop.no_such_tasks"]},
        env={"PYTHONPATH": ENV_PATH},
    )
    assert daemon.wait() == 1
    log = daemon.log()
    assert "worker failed to boot" in log and "shop.no_such_tasks" in log


def test_check_verifies_a_periodic_entry_naming_a_django_task(django_dsn, tmp_path):
    config = tmp_path / "pgworkerd.yaml"
    env = {"PGWORKERD_DATABASE_URL": django_dsn, "PYTHONPATH": ENV_PATH}
    django = {"settings": "mysite.settings", "tasks": ["shop.tasks"]}
    entry = {"kind": "shop.tasks.add", "every": "1h", "payload": {"args": [1, 2], "kwargs": {}}}
    config.write_text(json.dumps({"django": django, "periodic": [entry]}))
    result = pgworkerd("check", "-c", str(config), env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "periodic shop.tasks.add" in result.stdout
    config.write_text(json.dumps({"django": django, "periodic": [{**entry, "kind": "shop.nope"}]}))
    result = pgworkerd("check", "-c", str(config), env=env, cwd=tmp_path)
    assert_one_line_error(result, 2, "periodic[0].kind: 'shop.nope' is neither under handlers")


def test_a_task_module_importing_models_says_django_is_not_set_up_there(django_dsn, tmp_path):
    """task_modules are imported by the supervisor, which never sets Django up: the
    error was Django's AppRegistryNotReady alone, which did not say why or what to do."""
    config = tmp_path / "pgworkerd.yaml"
    config.write_text(
        json.dumps(
            {
                "task_modules": ["tests.django.models_at_top"],
                "django": {"settings": "mysite.settings", "tasks": ["shop.tasks"]},
            }
        )
    )
    env = {"PGWORKERD_DATABASE_URL": django_dsn, "PYTHONPATH": ENV_PATH}
    for command in ("check", "run"):
        result = pgworkerd(command, "-c", str(config), env=env, cwd=tmp_path)
        assert_one_line_error(
            result,
            2,
            "task_modules[0]: cannot import 'tests.django.models_at_top': "
            "AppRegistryNotReady: Apps aren't loaded yet. (task_modules are imported before "
            "Django is set up, which each worker does after the fork: import models inside "
            "the handler, or make it a Django @task in a module of django.tasks)",
        )
