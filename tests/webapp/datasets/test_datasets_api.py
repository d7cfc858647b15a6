"""Dataset API: upload (sync, mapping, failure, size), status, list/detail, keyset rows, export; roles."""
from __future__ import annotations

import io
import json

import pyarrow.parquet as pq
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from webapp.datasets.models import Dataset, DatasetImport, DatasetVersion, ImportStatus

pytestmark = pytest.mark.django_db
API = "/api/projects/acme/datasets/"
READ = {"admin": 200, "engineer": 200, "reviewer": 200, "viewer": 200, "outsider": 404}
WRITE = {"admin": 200, "engineer": 200, "reviewer": 403, "viewer": 403, "outsider": 404}


def post_file(client, filename, content, **fields):
    return client.post(API, {"name": "api-set", **fields, "file": SimpleUploadedFile(filename, content)},
                       format="multipart")


@pytest.mark.parametrize("role", list(READ))
def test_read_endpoints_per_role(api_for, personas, version, role):
    client = api_for(personas[role])
    base = f"{API}{version.dataset_id}/"
    for url in (API, base, base + "versions/1/", base + "versions/1/rows/", f"{API}prefs/versions/1/rows/"):
        assert client.get(url).status_code == READ[role], url


@pytest.mark.parametrize("role", list(WRITE))
def test_write_endpoints_per_role(api_for, personas, version, pairs, role):
    client = api_for(personas[role])
    record = DatasetImport.objects.get()
    assert client.get(f"{API}{version.dataset_id}/versions/1/export/?format=trl").status_code == WRITE[role]
    assert client.get(f"{API}imports/{record.pk}/").status_code == WRITE[role]
    assert client.get(f"{API}imports/{record.pk}/bad-rows/?format=csv").status_code == WRITE[role]
    content = "".join(json.dumps(p) + "\n" for p in pairs).encode()
    expected = {200: 201, 403: 403, 404: 404}[WRITE[role]]
    assert post_file(client, "p.jsonl", content, name=f"by-{role}").status_code == expected


def test_anonymous_gets_401(client):
    assert client.get(API).status_code in (401, 403)


def test_upload_imports_small_files_at_once(api_for, engineer, pairs):
    content = "".join(json.dumps(p) + "\n" for p in pairs).encode()
    resp = post_file(api_for(engineer), "p.jsonl", content, split="2", split_seed="3")
    assert resp.status_code == 201
    body = resp.json()
    assert body["version"]["row_count"] == 4 and body["version"]["val_count"] == 2
    assert body["status"]["version_url"] == f"/p/acme/datasets/{body['dataset_id']}/v1/"
    listing = api_for(engineer).get(API).json()
    assert listing == [{"id": body["dataset_id"], "name": "api-set", "kind": "preference", "description": "",
                        "created_at": listing[0]["created_at"], "latest_version": 1}]


def test_upload_needing_a_mapping_then_the_mapping(api_for, engineer):
    client = api_for(engineer)
    resp = post_file(client, "qa.csv", b"question,answer\nq1,1\nq2,2\n")
    assert resp.status_code == 400
    body = resp.json()
    assert body["code"] == "needs_mapping" and body["columns"] == ["question", "answer"]
    assert body["suggested_map"] == {"prompt": "question", "ground_truth": "answer"}
    assert body["preview"][0] == {"question": "q1", "answer": "1"}
    import_id = body["import"]["id"]
    resp = client.post(f"{API}imports/{import_id}/mapping/", {"column_map": "prompt=question,ground_truth=answer",
                                                              "split": "0"}, format="json")
    assert resp.status_code == 201 and resp.json()["version"]["row_count"] == 2
    again = client.post(f"{API}imports/{import_id}/mapping/", {"column_map": {"prompt": "question"}}, format="json")
    assert again.status_code == 400 and "not waiting for a column mapping" in again.json()["detail"]


def test_upload_with_bad_rows_reports_and_stores_nothing(api_for, engineer, pairs):
    lines = [json.dumps(p) for p in pairs] + ['{"prompt": "q", "chosen": "a", "rejected": "a"}']
    resp = post_file(api_for(engineer), "p.jsonl", ("\n".join(lines)).encode())
    assert resp.status_code == 400
    body = resp.json()
    assert body["code"] == "import_failed" and "1 of 5 rows are invalid" in body["detail"]
    assert body["import"]["report"]["errors"] == [{"row": 5, "line": 5, "field": "rejected",
                                                   "reason": "chosen is identical to rejected"}]
    assert not Dataset.objects.exists() and not DatasetVersion.objects.exists()
    errors = api_for(engineer).get(f"{API}imports/{body['import']['id']}/bad-rows/?format=json")
    assert json.loads(b"".join([errors.content])) == body["import"]["report"]["errors"]
    skipped = post_file(api_for(engineer), "p.jsonl", ("\n".join(lines)).encode(), skip_bad_rows="true")
    assert skipped.status_code == 201 and skipped.json()["version"]["report"]["skipped"] == 1


def test_upload_input_errors(api_for, engineer, settings):
    client = api_for(engineer)
    resp = client.post(API, {"name": "x"}, format="multipart")
    assert resp.status_code == 400 and resp.json()["field"] == "file"
    resp = post_file(client, "a.jsonl", b'{"prompt": "a", "ground_truth": "1"}\n', column_map="nonsense")
    assert resp.status_code == 400 and "not FIELD=COLUMN" in resp.json()["detail"]
    resp = post_file(client, "a.jsonl", b'{"prompt": "a", "ground_truth": "1"}\n', split="half")
    assert resp.status_code == 400 and resp.json()["field"] == "split"
    resp = post_file(client, "a.json", b"prompt,ground_truth\na,1\n")
    assert resp.status_code == 400 and "named 'a.json' but its content is CSV" in resp.json()["detail"]
    settings.DATASET_MAX_UPLOAD_MB = 0
    resp = post_file(client, "a.jsonl", b'{"prompt": "a", "ground_truth": "1"}\n' * 3000)
    assert resp.status_code == 413 and "upload limit" in resp.json()["detail"]


@pytest.mark.django_db(transaction=True)  # the worker imports in a child process, which sees committed rows only
def test_big_uploads_are_queued_for_a_worker(api_for, engineer, pairs, settings, django_capture_on_commit_callbacks,
                                             monkeypatch):
    from jobs import tasks

    queued = []
    monkeypatch.setattr("webapp.datasets.services.enqueue", lambda task, import_id: queued.append((task, import_id)))
    settings.DATASET_SYNC_IMPORT_MB = 0
    content = "".join(json.dumps(p) + "\n" for p in pairs).encode()
    with django_capture_on_commit_callbacks(execute=True):
        resp = post_file(api_for(engineer), "p.jsonl", content)
    assert resp.status_code == 202 and resp.json()["status"]["status"] == "queued"
    record = DatasetImport.objects.get()
    assert queued == [(tasks.ingest_dataset.name, record.pk)]
    assert record.status == ImportStatus.QUEUED and record.upload_path
    tasks.ingest_dataset(record.pk)  # what the worker runs
    status = api_for(engineer).get(f"{API}imports/{record.pk}/").json()["status"]
    assert status["status"] == "succeeded" and status["rows"] == 4


def test_rows_keyset_pages_and_filters(api_for, viewer, version):
    client = api_for(viewer)
    url = f"{API}{version.dataset_id}/versions/1/rows/"
    page1 = client.get(url + "?limit=2").json()
    assert [r["index"] for r in page1["results"]] == [0, 1] and page1["next_after"] == 1
    page2 = client.get(url + f"?limit=2&after={page1['next_after']}").json()
    assert [r["index"] for r in page2["results"]] == [2, 3] and page2["prev_before"] == 2
    assert page1["results"][0]["chosen"] == [{"role": "assistant", "content": "4"}]
    web = client.get(url + "?data_source=web").json()["results"]
    assert [r["index"] for r in web] == [4] and web[0]["review_state"] == "unreviewed"
    assert client.get(url + "?after=x").status_code == 400


def test_export_endpoint(api_for, engineer, version):
    resp = api_for(engineer).get(f"{API}{version.dataset_id}/versions/1/export/?format=verl")
    assert resp.status_code == 200
    table = pq.read_table(io.BytesIO(b"".join(resp.streaming_content)))
    assert table.num_rows == 5 and "reward_model" in table.column_names
    assert api_for(engineer).get(f"{API}{version.dataset_id}/versions/1/export/?format=xml").status_code == 400
    assert api_for(engineer).get(f"{API}{version.dataset_id}/versions/9/").status_code == 404
