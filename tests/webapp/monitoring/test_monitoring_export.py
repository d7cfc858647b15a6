"""Checkpoint export: asked for on the page, built on a worker, downloaded from the checkpoint table."""
from __future__ import annotations

import io
import json
import os
import shutil
import time
import zipfile
from pathlib import Path

import pytest

from webapp.core.models import AuditLog
from webapp.monitoring import services
from webapp.monitoring.models import CheckpointExport
from webapp.runs.models import RunEvent


def _zip_names(response) -> zipfile.ZipFile:
    assert response.status_code == 200 and response["Content-Type"] == "application/zip"
    return zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))


@pytest.fixture
def queued(monkeypatch):
    sent: list[tuple[int, str]] = []
    monkeypatch.setattr("webapp.monitoring.services.export._enqueue", lambda pk, queue: sent.append((pk, queue)))
    return sent


@pytest.mark.django_db
def test_an_export_is_built_on_a_worker_then_downloaded_from_the_table(
        make_job, checkpoint, engineer, viewer, outsider, as_user, project, queued,
        django_capture_on_commit_callbacks):
    job = make_job()
    checkpoint(job, 5)
    client = as_user(engineer)
    base = f"/p/{project.slug}/monitor/jobs/{job.pk}/"
    with django_capture_on_commit_callbacks(execute=True):
        r = client.post(base + "checkpoints/5/export/", {"next": f"/p/{project.slug}/jobs/{job.pk}/#checkpoints"})
    assert r.status_code == 302 and r["Location"] == f"/p/{project.slug}/jobs/{job.pk}/#checkpoints"
    [(export_id, queue)] = queued
    assert queue == "cpu"
    with django_capture_on_commit_callbacks(execute=True):
        client.post(base + "checkpoints/5/export/")  # asked again while queued: the same export
    assert len(queued) == 1
    assert "exporting (full)" in client.get(base + "checkpoints/").content.decode()

    export = services.export_run(export_id=export_id)  # what the worker does
    assert export.status == "succeeded" and export.size_bytes > 0 and Path(export.path).is_file()
    assert services.export_run(export_id=export_id).finished_at == export.finished_at  # a redelivery: nothing
    table = client.get(base + "checkpoints/").content.decode()
    download = f"{base}checkpoints/5/exports/{export_id}/"
    assert f'href="{download}"' in table and "Download the full zip" in table
    assert json.loads(_zip_names(client.get(download)).read("config.json"))["step"] == 5
    # built and newer than its checkpoint: the button downloads at once
    assert json.loads(_zip_names(client.post(base + "checkpoints/5/export/")).read("config.json"))["step"] == 5
    assert CheckpointExport.objects.count() == 1
    assert AuditLog.objects.filter(action="checkpoint.export").exists()
    assert RunEvent.objects.filter(job=job, kind="export", step=5).exists()
    assert as_user(viewer).get(download).status_code == 403
    assert as_user(outsider).get(download).status_code == 404


@pytest.mark.django_db
def test_a_lora_checkpoint_exports_its_adapter_alone_when_asked(make_job, checkpoint, engineer, as_user, project,
                                                                queued, django_capture_on_commit_callbacks):
    job = make_job()
    checkpoint(job, 5, lora=True)
    with django_capture_on_commit_callbacks(execute=True):
        as_user(engineer).post(f"/p/{project.slug}/monitor/jobs/{job.pk}/checkpoints/5/export/", {"variant": "adapter"})
    export = services.export_run(export_id=queued[0][0])
    assert export.variant == "adapter" and "adapter" in Path(export.path).name
    assert "adapter_config.json" in zipfile.ZipFile(export.path).namelist()


@pytest.mark.django_db
def test_a_failed_export_says_why_in_the_table_and_a_stale_zip_is_not_served(
        make_job, checkpoint, engineer, as_user, project, queued, django_capture_on_commit_callbacks):
    job = make_job()
    ckpt = checkpoint(job, 5)
    client = as_user(engineer)
    base = f"/p/{project.slug}/monitor/jobs/{job.pk}/"
    with django_capture_on_commit_callbacks(execute=True):
        client.post(base + "checkpoints/5/export/")
    shutil.rmtree(Path(ckpt.path) / "model")  # gone between the request and the worker
    export = services.export_run(export_id=queued[0][0])
    assert export.status == "failed" and "Export failed" in export.error
    table = client.get(base + "checkpoints/").content.decode()
    assert "Export (full) failed:" in table
    # a new request after a failure queues a fresh export
    (Path(ckpt.path) / "model").mkdir()
    (Path(ckpt.path) / "model" / "config.json").write_text(json.dumps({"step": 5}))
    with django_capture_on_commit_callbacks(execute=True):
        client.post(base + "checkpoints/5/export/")
    good = services.export_run(export_id=queued[1][0])
    assert good.status == "succeeded"
    later = time.time() + 5  # the checkpoint folder changes after the zip was made: the zip is stale
    os.utime(ckpt.path, (later, later))
    r = client.get(f"{base}checkpoints/5/exports/{good.pk}/")
    assert r.status_code == 302
    with django_capture_on_commit_callbacks(execute=True):
        client.post(base + "checkpoints/5/export/")
    assert len(queued) == 3  # rebuilt, not served stale
    assert client.post(base + "checkpoints/9/export/").status_code == 302  # no such step: a message, not a 500


@pytest.mark.worker
def test_export_through_a_real_worker(celery_worker_proc, make_job, checkpoint, engineer, as_user, project):
    job = make_job()
    checkpoint(job, 5)
    client = as_user(engineer)
    base = f"/p/{project.slug}/monitor/jobs/{job.pk}/"
    assert client.post(base + "checkpoints/5/export/").status_code == 302  # committed: the worker gets it
    deadline = time.time() + 300
    while time.time() < deadline and not CheckpointExport.objects.filter(status="succeeded").exists():
        time.sleep(0.3)
    export = CheckpointExport.objects.get()
    assert export.status == "succeeded", (export.error, celery_worker_proc.log_path.read_text()[-3000:])
    r = client.get(f"{base}checkpoints/5/exports/{export.pk}/")
    assert json.loads(_zip_names(r).read("config.json"))["step"] == 5
