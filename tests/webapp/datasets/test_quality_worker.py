"""A quality report requested through the API is computed by a real Celery worker while its status is polled."""
from __future__ import annotations

import time

import pytest

from tests.webapp.datasets.quality_data import problem_pairs
from webapp.datasets.services import dataset_import

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def test_worker_computes_a_requested_report(celery_worker_proc, api_for, project, engineer, write):
    dataset_import(project=project, user=engineer, name="problems", path=write("p.jsonl", problem_pairs(200)))
    client = api_for(engineer)
    url = "/api/projects/acme/datasets/problems/versions/1/quality/"
    resp = client.post(url, {}, format="json")
    assert resp.status_code == 202, resp.content
    report_url = f"{url}{resp.json()['id']}/"
    deadline, body, progress = time.time() + 600, {}, []  # only a guard against a hang
    while time.time() < deadline:
        body = client.get(report_url).json()
        progress.append(body["progress"])
        if body["finished"]:
            break
        time.sleep(0.2)
    assert body.get("status") == "ready", (body, celery_worker_proc.log_path.read_text()[-3000:])
    assert progress == sorted(progress) and body["progress"] == 1.0
    assert body["result"]["rows"] == 207 and body["result"]["cleaning"]["near_duplicates"]["rows"] == 2
