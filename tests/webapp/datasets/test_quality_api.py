"""Quality report and cleaning through the API, `manage.py dataset_report` / `dataset_clean` and the page."""
from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from tests.webapp.datasets.quality_data import eval_prompts, problem_pairs
from webapp.core.models import Project
from webapp.datasets import quality_service
from webapp.datasets.models import DatasetVersion, QualityReport, ReportStatus
from webapp.datasets.services import dataset_import

BASE = "/api/projects/acme/datasets"


@pytest.fixture
def worker(monkeypatch):
    """The queued task runs at once, as a worker would."""
    sent = []

    def run(task, pk):
        sent.append(pk)
        quality_service.report_run(report_id=pk)

    monkeypatch.setattr("webapp.datasets.quality_service.enqueue", run)
    return sent


@pytest.fixture
def problems(db, project, engineer, write):
    return dataset_import(project=project, user=engineer, name="problems", path=write("p.jsonl", problem_pairs()))


@pytest.fixture
def evalset(db, project, engineer, write):
    return dataset_import(project=project, user=engineer, name="evalset", path=write("e.jsonl", eval_prompts()))


def test_api_requests_reads_and_cleans(api_for, engineer, viewer, problems, evalset, worker,
                                       django_capture_on_commit_callbacks):
    client = api_for(engineer)
    url = f"{BASE}/problems/versions/1/quality/"
    assert client.get(url).status_code == 404  # nothing computed yet
    with django_capture_on_commit_callbacks(execute=True):
        resp = client.post(url, {"eval_versions": [evalset.pk]}, format="json")
    assert resp.status_code == 202, resp.content
    report_id = resp.json()["id"]
    assert worker == [report_id]
    body = client.get(f"{url}{report_id}/").json()
    assert body["status"] == "ready" and body["result"]["sections"]["contamination"]["rows"] == 1
    assert "figures" not in body["result"] and "drops" not in body
    full = client.get(f"{url}{report_id}/?figures=1&rows=1").json()
    assert "task_types" in full["result"]["figures"] and full["drops"]["near_duplicates"] == [1, 2]
    # the same options again: 200 from the cache, nothing queued
    again = client.post(url, {"eval_versions": [evalset.pk]}, format="json")
    assert again.status_code == 200 and again.json()["id"] == report_id and worker == [report_id]
    found = api_for(viewer).get(f"{url}?eval_versions={evalset.pk}")
    assert found.status_code == 200 and found.json()["id"] == report_id
    assert api_for(viewer).post(url, {}, format="json").status_code == 403  # viewers read, engineers run

    resp = client.post(f"{url}{report_id}/clean/", {"categories": ["near_duplicates", "contaminated"]}, format="json")
    assert resp.status_code == 201, resp.content
    new = resp.json()
    assert new["version"]["number"] == 2 and new["version"]["row_count"] == problems.row_count - 3
    assert new["version"]["parent_number"] == 1 and new["lineage"]["quality_report"] == report_id
    assert client.get(f"{BASE}/problems/versions/2/").json()["lineage"]["dropped"] == {"contaminated": 1,
                                                                                    "near_duplicates": 2}
    bad = client.post(f"{url}{report_id}/clean/", {"categories": ["bogus"]}, format="json")
    assert bad.status_code == 400 and "Unknown category" in bad.json()["detail"]
    assert client.post(f"{url}{report_id}/clean/", {}, format="json").status_code == 400
    assert DatasetVersion.objects.filter(dataset=problems.dataset).count() == 2


def test_api_refuses_another_projects_dataset_as_evaluation_set(api_for, engineer, problems, write, worker):
    other = Project.objects.create(slug="other", name="Other")
    theirs = dataset_import(project=other, user=None, name="theirs", path=write("t.jsonl", eval_prompts()))
    resp = api_for(engineer).post(f"{BASE}/problems/versions/1/quality/", {"eval_versions": [theirs.pk]},
                                  format="json")
    assert resp.status_code == 400 and resp.json()["field"] == "eval_versions"
    assert "not a ready dataset version of this project" in resp.json()["detail"]
    assert not QualityReport.objects.exists() and worker == []
    bad = api_for(engineer).post(f"{BASE}/problems/versions/1/quality/", {"ngram": "x"}, format="json")
    assert bad.status_code == 400 and bad.json()["field"] == "ngram"


def test_api_hides_other_projects(api_for, outsider, problems):
    assert api_for(outsider).get(f"{BASE}/problems/versions/1/quality/").status_code in (403, 404)


def test_command_prints_the_report_and_reuses_it(problems, evalset, engineer):
    out = StringIO()
    call_command("dataset_report", "acme", "problems", "--eval", "evalset", "--user", "erin", stdout=out,
                 stderr=StringIO())
    text = out.getvalue()
    assert "Near-duplicates: 1 cluster, 2 rows" in text and "against evalset v1: 1 row: #4" in text
    assert "WARNING: Instruction is 80%" in text and "Languages: English" in text
    out = StringIO()
    call_command("dataset_report", "acme", "problems", "--version", "1", "--eval", "evalset:1", "--json",
                 "--rows", stdout=out, stderr=StringIO())
    payload = json.loads(out.getvalue())
    assert payload["status"] == "ready" and payload["drops"]["identical_pairs"] == [3]
    assert QualityReport.objects.count() == 1  # the second call read the stored report
    with pytest.raises(CommandError, match="no evaluation set 'nope'"):
        call_command("dataset_report", "acme", "problems", "--eval", "nope", stderr=StringIO())
    with pytest.raises(CommandError, match="no project"):
        call_command("dataset_report", "zzz", "problems", stderr=StringIO())


def test_command_cleans_into_a_new_version(problems, engineer):
    out = StringIO()
    call_command("dataset_clean", "acme", "problems", "--drop", "exact_duplicates,identical_pairs", "--user", "erin",
                 stdout=out, stderr=StringIO())
    assert "Created problems v2: 13 rows kept, 2 dropped" in out.getvalue()
    new = DatasetVersion.objects.get(dataset=problems.dataset, number=2)
    assert new.parent_id == problems.pk and new.created_by == engineer
    with pytest.raises(CommandError, match="Unknown category"):
        call_command("dataset_clean", "acme", "problems", "--version", "1", "--drop", "everything",
                     stderr=StringIO())


def test_page_runs_shows_and_cleans(as_user, engineer, viewer, problems, evalset, worker,
                                    django_capture_on_commit_callbacks):
    url = f"/p/acme/datasets/{problems.dataset_id}/v1/quality/"
    page = as_user(viewer).get(url)
    assert page.status_code == 200 and "No quality report yet" in page.content.decode()
    client = as_user(engineer)
    with django_capture_on_commit_callbacks(execute=True):
        resp = client.post(url, {"eval_versions": [str(evalset.pk)], "ngram": "13", "threshold": "0.8"})
    report = QualityReport.objects.get()
    assert resp.status_code == 302 and resp["Location"].endswith(f"?report={report.pk}")
    body = client.get(resp["Location"]).content.decode()
    for key in ("task_types", "duplicates", "identical_pairs", "contamination", "length_bias", "languages"):
        assert f'id="q-{key}"' in body
    assert 'id="chart-task_types"' in body and 'id="fig-task_types"' in body and "/rows/4/" in body
    status = client.get(f"{url}{report.pk}/status/").json()
    assert status["status"] == ReportStatus.READY and status["finished"]
    bad = client.post(url, {"ngram": "99"})
    assert bad.status_code == 400 and "between 5 and 50" in bad.content.decode()
    assert as_user(viewer).post(f"{url}{report.pk}/clean/", {"categories": ["near_duplicates"]}).status_code == 403
    resp = client.post(f"{url}{report.pk}/clean/", {"categories": ["near_duplicates", "identical_pairs"]})
    assert resp.status_code == 302 and resp["Location"].endswith("/v2/")
    v2 = client.get(resp["Location"]).content.decode()
    assert "cleaned from" in v2 and f"quality report {report.pk}" in v2 and "3 of 15 rows dropped" in v2


def test_page_for_verifiable_prompts_shows_only_their_sections(as_user, engineer, project, write, worker,
                                                               django_capture_on_commit_callbacks):
    rows = [{"prompt": f"{a}+{b}=", "ground_truth": str(a + b)} for a in range(4) for b in range(4)]
    version = dataset_import(project=project, user=engineer, name="arith", path=write("a.jsonl", rows + rows[:2]))
    url = f"/p/acme/datasets/{version.dataset_id}/v1/quality/"
    client = as_user(engineer)
    with django_capture_on_commit_callbacks(execute=True):
        resp = client.post(url, {"ngram": "13", "threshold": "0.8"})
    body = client.get(resp["Location"]).content.decode()
    assert 'id="q-task_types"' in body and 'id="q-duplicates"' in body and 'id="q-languages"' in body
    assert 'id="q-identical_pairs"' not in body and 'id="q-length_bias"' not in body
    assert "Reasoning: math is 100% of the rows" in body and 'id="no-eval-sets"' in body
    assert 'value="identical_pairs"' not in body and 'id="clean-count-exact_duplicates">2<' in body
