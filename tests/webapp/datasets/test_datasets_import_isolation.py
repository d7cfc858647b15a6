"""Imports run on a worker, in a child process with a memory cap, never in the web process."""
from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from webapp import settings as project_settings
from webapp.datasets.models import Dataset, DatasetImport, DatasetVersion, ImportStatus

MB = 1024 * 1024


@pytest.fixture
def queued(monkeypatch):
    """Uploads that wait for the worker; the test then runs the worker's task itself."""
    sent = []
    monkeypatch.setattr("webapp.datasets.services.enqueue", lambda task, import_id: sent.append(import_id))
    return sent


@pytest.mark.django_db
def test_even_a_small_upload_is_imported_by_the_worker_by_default(as_user, engineer, settings, queued,
                                                                   django_capture_on_commit_callbacks):
    assert project_settings.DATASET_SYNC_IMPORT_MB == 0
    settings.DATASET_SYNC_IMPORT_MB = project_settings.DATASET_SYNC_IMPORT_MB
    upload = SimpleUploadedFile("tiny.jsonl", b'{"prompt": "1+1=", "ground_truth": "2"}\n' * 3)
    with django_capture_on_commit_callbacks(execute=True):
        resp = as_user(engineer).post("/p/acme/datasets/upload/", {"file": upload, "name": "tiny", "split": "10%",
                                                                   "split_seed": 0, "column_map": ""})
    record = DatasetImport.objects.get()
    assert resp.status_code == 302 and str(record.pk) in resp["Location"]  # the page that follows its progress
    assert queued == [record.pk] and record.status == ImportStatus.QUEUED and not DatasetVersion.objects.exists()


def _big_rows(path, mb: int):
    """Three rows sharing one `mb` MB dictionary value: a few kB on disk."""
    values = pa.array(["y" * (mb * MB)] * 3).dictionary_encode()
    pq.write_table(pa.table({"prompt": values, "ground_truth": ["1", "2", "3"]}), path, compression="zstd")
    assert path.stat().st_size < 100_000
    return path


def _upload(project, engineer, path, name):
    from webapp.datasets.services import import_upload

    with path.open("rb") as fh:
        return import_upload(project=project, user=engineer, name=name,
                             uploaded_file=SimpleUploadedFile(path.name, fh.read()))


@pytest.mark.django_db(transaction=True)
def test_a_file_that_needs_more_memory_than_the_cap_fails_cleanly(project, engineer, settings, queued, tmp_path):
    """Rows the readers let through (long fields allowed here) but that do not fit the worker's cap."""
    from jobs import tasks

    settings.DATASET_SYNC_IMPORT_MB = 0
    settings.DATASET_MAX_TEXT_CHARS = 200 * MB
    # room for Django, the database driver and the readers on either database
    settings.DATASET_IMPORT_MEMORY_MB = 400
    small = _upload(project, engineer, _big_rows(tmp_path / "small.parquet", 1), "small")
    tasks.ingest_dataset(small.pk)
    small.refresh_from_db()
    assert small.status == ImportStatus.SUCCEEDED, small.error  # the cap leaves room for ordinary files
    record = _upload(project, engineer, _big_rows(tmp_path / "big.parquet", 160), "big")
    assert record.status == ImportStatus.QUEUED, record.error
    tasks.ingest_dataset(record.pk)
    record.refresh_from_db()
    assert record.status == ImportStatus.FAILED, record.error
    assert "memory" in record.error and "DATASET_IMPORT_MEMORY_MB" in record.error
    assert list(Dataset.objects.values_list("name", flat=True)) == ["small"]  # all or nothing
    assert DatasetVersion.objects.count() == 1 and not record.upload_path


@pytest.mark.django_db(transaction=True)
def test_the_worker_imports_in_its_child(project, engineer, settings, queued):
    from jobs import tasks
    from webapp.datasets.services import import_upload

    settings.DATASET_SYNC_IMPORT_MB = 0
    body = b"".join(b'{"prompt": "%d+1=", "ground_truth": "%d"}\n' % (i, i + 1) for i in range(50))
    record = import_upload(project=project, user=engineer, name="sums",
                           uploaded_file=SimpleUploadedFile("sums.jsonl", body))
    tasks.ingest_dataset(record.pk)
    tasks.ingest_dataset(record.pk)  # a redelivered task does nothing
    record.refresh_from_db()
    assert record.status == ImportStatus.SUCCEEDED, record.error
    assert record.version.row_count == 50 and DatasetVersion.objects.count() == 1
