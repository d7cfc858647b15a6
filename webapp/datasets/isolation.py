"""Imports run on the worker in a child process with a memory cap (`import_child`).

A Parquet file can hold far more than its size on disk; whatever the readers' own checks miss,
the cap stops in the child. A child that dies leaves nothing behind: its partial version is
discarded here and the import is marked failed with the reason.
"""
from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime
from urllib.parse import quote

from django.conf import settings
from django.db import connection
from django.utils import timezone

from webapp.datasets.import_child import MEMORY_EXIT
from webapp.datasets.models import DatasetImport, DatasetVersion, ImportStatus, VersionStatus

# The limits the child applies are this process's (settings read from the environment there too).
PASSED_SETTINGS = ("DATASET_MAX_UPLOAD_MB", "DATASET_MAX_TEXT_CHARS", "DATASET_MAX_UNCOMPRESSED_MB")


def database_url() -> str:
    """The database this process uses, as a DATABASE_URL for the child (tests use their own database)."""
    s = connection.settings_dict
    if s["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{s['NAME']}"
    auth = quote(s["USER"] or "", safe="") + (f":{quote(s['PASSWORD'], safe='')}" if s["PASSWORD"] else "")
    return f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{quote(s['NAME'], safe='')}"


def import_capped(import_id: int) -> DatasetVersion | None:
    """Run a queued import in a memory-capped child; the version it made, or None."""
    record = DatasetImport.objects.filter(pk=import_id).first()
    if record is None or record.status != ImportStatus.QUEUED:
        return None  # a redelivered task: another run has it or had it
    started = timezone.now()
    memory_mb = int(settings.DATASET_IMPORT_MEMORY_MB)
    env = {**os.environ, "DATABASE_URL": database_url(), "PYTHONUNBUFFERED": "1", "MALLOC_ARENA_MAX": "2",
           "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
           **{name: str(getattr(settings, name)) for name in PASSED_SETTINGS},
           "PYTHONPATH": os.pathsep.join(p for p in (str(settings.BASE_DIR), os.environ.get("PYTHONPATH", "")) if p)}
    proc = subprocess.run([sys.executable, "-m", "webapp.datasets.import_child", str(import_id), str(memory_mb)],
                          cwd=str(settings.BASE_DIR), env=env, stdin=subprocess.DEVNULL, capture_output=True)
    record.refresh_from_db()
    if proc.returncode != 0:
        _after_failure(record, proc, started, memory_mb)
        return None
    return record.version if record.status == ImportStatus.SUCCEEDED else None


def _after_failure(record: DatasetImport, proc: subprocess.CompletedProcess, started: datetime,
                   memory_mb: int) -> None:
    from webapp.datasets.services import _discard, _remove_upload

    out = (proc.stdout + proc.stderr).decode("utf-8", "replace").strip().splitlines()
    out_of_memory = proc.returncode == MEMORY_EXIT or any("MemoryError" in line for line in out[-5:])
    if out_of_memory:
        message = (f"Importing this file needed more than {memory_mb:,} MB of memory (DATASET_IMPORT_MEMORY_MB), "
                   "so it was stopped and nothing was imported. Split the file, or write its text columns "
                   "without repeating huge values.")
    else:
        message = (f"The import process stopped unexpectedly (exit code {proc.returncode}); nothing was imported."
                   + (f" Last output: {out[-1][:300]}" if out else ""))
    # A child that died mid-import leaves its version behind: the one it created for this file since we started.
    for version in DatasetVersion.objects.filter(
            status=VersionStatus.IMPORTING, dataset__project=record.project, dataset__name=record.name,
            source_filename=record.filename[:300], created_at__gte=started):
        _discard(version, dataset_created=version.number == 1)
    _remove_upload(record)
    if record.status == ImportStatus.SUCCEEDED:
        return
    DatasetImport.objects.filter(pk=record.pk).update(status=ImportStatus.FAILED, phase="failed", version=None,
                                                      error=message, updated_at=timezone.now())
