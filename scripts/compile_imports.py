"""Write .venv's bytecode for the modules the app's processes import (run once after an install).

A fresh install has no .pyc files. Python writes them on first import, unless PYTHONDONTWRITEBYTECODE
is set: then every start of the web server, the worker, beat, migrate and seed_demo compiles torch,
transformers, Django and Celery again (seconds each, on two cores). Compiling the whole environment
at install (`--compile-bytecode`) costs ~40 s of CPU for 21k files, most never imported; this
imports what the app's processes import (~3.5k files) and writes their bytecode, for installed
packages only (the checkout's own files follow PYTHONDONTWRITEBYTECODE). A module missed here is
compiled on import, as before. Run from the repository root with .venv's python.
"""
from __future__ import annotations

import contextlib
import importlib
import os
import sys
from importlib.machinery import SourceFileLoader

_write = SourceFileLoader._cache_bytecode


def _cache_installed_only(self, source_path, bytecode_path, data):
    if str(source_path).startswith(sys.prefix):
        return _write(self, source_path, bytecode_path, data)
    return None


MODULES = [
    # web (runserver, gunicorn), migrate, seed_demo, launch_job
    "webapp.urls", "django.core.management.commands.migrate", "django.core.management.commands.runserver",
    "webapp.core.management.commands.seed_demo", "webapp.runs.management.commands.launch_job",
    # worker and beat
    "jobs.tasks", "celery.apps.worker", "celery.apps.beat", "celery.worker.consumer", "celery.concurrency.prefork",
    "celery.bin.celery", "kombu.transport.redis",
    # demo model builds and the local trainer (a subprocess of the worker)
    "training.demo", "training.local.train", "training.supervisor", "verl.trainer.ppo.core_algos",
]


def main() -> int:
    sys.dont_write_bytecode = False
    SourceFileLoader._cache_bytecode = _cache_installed_only
    sys.path.insert(0, os.getcwd())
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    import django

    django.setup()
    for name in MODULES:
        with contextlib.suppress(Exception):  # an optional or broken import is the app's to report, not this
            importlib.import_module(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
