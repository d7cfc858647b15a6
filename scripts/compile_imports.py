"""Write .venv's bytecode for the modules the app's processes import (run once after an install).

A fresh install has no .pyc files. Python writes them on first import, unless PYTHONDONTWRITEBYTECODE
is set: then every start of the web server, the worker, beat, migrate and seed_demo compiles torch,
transformers, Django and Celery again (seconds each, on two cores). Compiling the whole environment
at install (`--compile-bytecode`) costs ~40 s of CPU for 21k files, most never imported; this
imports what the app's processes import (~3.5k files) and writes their bytecode, for installed
packages only (the checkout's own files follow PYTHONDONTWRITEBYTECODE). A module missed here is
compiled on import, as before. Run from the repository root with .venv's python.

A VERL launch starts a dozen Python processes (the trainer, Ray's node daemons and agents, its actors); without
bytecode each compiles the same ~2k modules again. `--verl` compiles those: VERL's trainer by import, and the
packages Ray's processes load by file name (their modules are found at run time, not by import here). The install
runs it in the background, at low priority, so that the app does not wait for it (a VERL run is minutes away).
"""
from __future__ import annotations

import compileall
import contextlib
import importlib
import os
import sys
import sysconfig
from importlib.machinery import SourceFileLoader
from pathlib import Path

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
# A VERL launch (`--verl`): the trainer, its workers and actors (V1 and the legacy trainer).
VERL_MODULES = [
    "training.verl_cpu.plugin", "verl.trainer.main_ppo", "verl.trainer.ppo.ray_trainer",
    "verl.workers.engine_workers", "verl.experimental.agent_loop", "verl.experimental.reward_loop", "transfer_queue",
    "transformers.models.llama.modeling_llama", "transformers.models.qwen2.modeling_qwen2",
]
# Compiled whole, without importing: what Ray's daemons, agents and workers and VERL's actors load.
PACKAGE_TREES = ["verl", "transfer_queue", "hydra", "omegaconf", "ray/_private", "ray/_common", "ray/dashboard",
                 "ray/autoscaler", "ray/core", "ray/util", "opencensus", "aiohttp", "grpc", "opentelemetry",
                 "prometheus_client", "torch/distributed", "ray/thirdparty_files"]
# VERL's workers read every model's configuration (its model registry), not only the one they load.
PACKAGE_FILES = ["transformers/models/*/__init__.py", "transformers/models/*/configuration_*.py"]


def main(argv: list[str]) -> int:
    sys.dont_write_bytecode = False
    SourceFileLoader._cache_bytecode = _cache_installed_only
    sys.path.insert(0, os.getcwd())
    verl = "--verl" in argv
    if not verl:  # the app's modules import its models; VERL's processes never load Django
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
        import django

        django.setup()
    for name in VERL_MODULES if verl else MODULES:
        with contextlib.suppress(Exception):  # an optional or broken import is the app's to report, not this
            importlib.import_module(name)
    if not verl:
        return 0
    site = Path(sysconfig.get_paths()["purelib"])
    for tree in PACKAGE_TREES:
        if (site / tree).is_dir():
            compileall.compile_dir(site / tree, quiet=2, workers=0)
    for pattern in PACKAGE_FILES:
        for path in site.glob(pattern):
            compileall.compile_file(path, quiet=2)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
