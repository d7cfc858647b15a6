"""A big upload is ingested by a real Celery worker process while the status endpoint reports progress."""
from __future__ import annotations

import json
import time

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from webapp.datasets.models import DatasetRow, DatasetVersion

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def test_worker_ingests_a_queued_upload(celery_worker_proc, api_for, engineer, settings):
    settings.DATASET_SYNC_IMPORT_MB = 0  # every upload goes to the worker
    rows = [{"prompt": f"q{i}", "chosen": f"good {i}", "rejected": f"bad {i}"} for i in range(3000)]
    content = "".join(json.dumps(r) + "\n" for r in rows).encode()
    client = api_for(engineer)
    upload = SimpleUploadedFile("big.jsonl", content)
    resp = client.post("/api/projects/acme/datasets/", {"name": "big", "file": upload}, format="multipart")
    assert resp.status_code == 202, resp.content
    status_url = f"/api/projects/acme/datasets/imports/{resp.json()['import']['id']}/"
    deadline, status = time.time() + 600, {}  # only a guard against a hang: the loop ends with the import
    while time.time() < deadline:
        status = client.get(status_url).json()["status"]
        if status["finished"]:
            break
        time.sleep(0.3)
    assert status.get("status") == "succeeded", (status, celery_worker_proc.log_path.read_text()[-3000:])
    version = DatasetVersion.objects.get()
    assert version.row_count == 3000 and DatasetRow.objects.filter(version=version).count() == 3000
    assert status["progress"] == 1.0 and status["version_url"].endswith("/v1/")
