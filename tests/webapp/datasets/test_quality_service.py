"""Quality report service (queued task with progress, cache) and cleaning into a new version."""
from __future__ import annotations

import pytest

from tests.webapp.datasets.quality_data import eval_prompts, problem_pairs
from webapp.core.models import AuditLog, Project
from webapp.core.queue import QUALITY_REPORT
from webapp.core.services import ApplicationError
from webapp.datasets import cleaning, quality_service
from webapp.datasets.models import DatasetRow, DatasetVersion, QualityReport, ReportStatus
from webapp.datasets.services import dataset_import


@pytest.fixture
def sent(monkeypatch):
    queued = []
    monkeypatch.setattr("webapp.datasets.quality_service.enqueue", lambda task, pk: queued.append((task, pk)))
    return queued


@pytest.fixture
def problems(db, project, engineer, write):
    return dataset_import(project=project, user=engineer, name="problems", path=write("p.jsonl", problem_pairs()),
                          split="2")


@pytest.fixture
def evalset(db, project, engineer, write):
    return dataset_import(project=project, user=engineer, name="evalset", path=write("e.jsonl", eval_prompts()),
                          split="0")


def test_report_is_queued_runs_with_progress_and_is_cached(problems, evalset, engineer, sent,
                                                           django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        report = quality_service.report_request(version=problems, user=engineer, eval_versions=[evalset.pk])
    assert report.status == ReportStatus.QUEUED and sent == [(QUALITY_REPORT, report.pk)]
    seen = []
    done = quality_service.report_run(report_id=report.pk, progress=lambda f, phase: seen.append((f, phase)))
    assert done.status == ReportStatus.READY and done.progress == 1.0
    phases = [p for _, p in seen]
    assert "reading the evaluation sets" in phases and "checking rows" in phases and phases[-1] == "done"
    assert [f for f, _ in seen] == sorted(f for f, _ in seen)  # progress only moves forward
    assert quality_service.report_run(report_id=report.pk) is None  # a redelivered task does nothing

    s = done.result["sections"]
    assert s["duplicates"]["near"]["clusters"] == 1 and done.drops["near_duplicates"] == [1, 2]
    assert s["duplicates"]["exact"]["groups"] == 1 and done.drops["exact_duplicates"] == [2]
    assert s["identical_pairs"]["whitespace"] == 1 and done.drops["identical_pairs"] == [3]
    assert done.drops["contaminated"] == [4]
    listed = s["contamination"]["listed"][0]
    assert (listed["index"], listed["eval_version"], listed["eval_number"], listed["eval_index"]) == \
        (4, evalset.pk, 1, 0)
    assert listed["eval_dataset_id"] == evalset.dataset_id and s["contamination"]["eval_sets"][0]["id"] == evalset.pk
    counts = s["task_types"]["counts"]
    assert (counts["dialogue"], counts["math"], counts["instruction"], counts["code"]) == (1, 2, 12, 0)
    assert s["task_types"]["warning"].startswith("Instruction is 80% of the rows")
    assert 0 <= s["length_bias"]["chosen_longer"] <= 1 and s["languages"]["top"] == "en"
    assert set(done.result["figures"]) == {"task_types", "languages", "duplicates", "length_bias"}
    assert done.result["cleaning"]["near_duplicates"]["rows"] == 2

    again = quality_service.report_request(version=problems, user=engineer, eval_versions=[evalset.pk])
    assert again.pk == report.pk and again.status == ReportStatus.READY and len(sent) == 1  # cache hit
    other = quality_service.report_request(version=problems, user=engineer)  # other options: another report
    assert other.pk != report.pk and other.status == ReportStatus.QUEUED
    with django_capture_on_commit_callbacks(execute=True):
        redo = quality_service.report_request(version=problems, user=engineer, eval_versions=[evalset.pk],
                                              recompute=True)
    assert redo.pk == report.pk and redo.status == ReportStatus.QUEUED and sent[-1] == (QUALITY_REPORT, report.pk)
    assert AuditLog.objects.filter(action="dataset.quality_report").count() == 3


def test_a_report_for_verifiable_prompts_warns_when_math_dominates(project, engineer, write, sent):
    rows = [{"prompt": f"{a}+{b}=", "ground_truth": str(a + b)} for a in range(5) for b in range(5)]
    rows.append({"prompt": "1+1=", "ground_truth": "2"})
    version = dataset_import(project=project, user=engineer, name="arith", path=write("a.jsonl", rows))
    report = quality_service.report_compute_now(version=version, user=engineer)
    assert report.status == ReportStatus.READY and sent == []  # the command's way runs in-process
    s = report.result["sections"]
    assert s["task_types"]["dominant"] == "math" and "100%" in s["task_types"]["warning"]
    assert "identical_pairs" not in s and "length_bias" not in s and "identical_pairs" not in report.drops
    assert report.drops["exact_duplicates"] == [25] and report.drops["near_duplicates"] == [25]
    assert s["languages"]["counts"] == {"und": 26}


def test_evaluation_sets_must_be_ready_versions_of_this_project(problems, engineer, write, django_user_model):
    other = Project.objects.create(slug="other", name="Other")
    foreign = dataset_import(project=other, user=None, name="theirs", path=write("o.jsonl", eval_prompts()))
    with pytest.raises(ApplicationError) as exc:
        quality_service.report_request(version=problems, user=engineer, eval_versions=[foreign.pk])
    assert exc.value.field == "eval_versions" and "not a ready dataset version of this project" in exc.value.message
    with pytest.raises(ApplicationError, match="its own evaluation set"):
        quality_service.report_request(version=problems, user=engineer, eval_versions=[problems.pk])
    with pytest.raises(ApplicationError, match="between 5 and 50"):
        quality_service.report_request(version=problems, user=engineer, ngram=2)
    with pytest.raises(ApplicationError, match="threshold"):
        quality_service.report_request(version=problems, user=engineer, threshold="high")
    assert not QualityReport.objects.exists()


def test_cleaning_makes_a_new_version_with_lineage_and_audit_and_keeps_the_old(problems, evalset, engineer, sent,
                                                                                 project, write):
    before = list(DatasetRow.objects.filter(version=problems).order_by("index").values_list("index", "row_hash"))
    report = quality_service.report_compute_now(version=problems, user=engineer, eval_versions=[evalset])
    new = cleaning.clean_version(report=report, user=engineer,
                                 categories=["near_duplicates", "contaminated", "identical_pairs"])
    assert new.number == 2 and new.parent_id == problems.pk
    assert new.dataset_id == problems.dataset_id and new.row_count == problems.row_count - 4
    assert list(DatasetRow.objects.filter(version=new).order_by("index").values_list("index", flat=True)) == \
        list(range(new.row_count))
    kept = [h for i, h in before if i not in (1, 2, 3, 4)]
    assert list(DatasetRow.objects.filter(version=new).order_by("index").values_list("row_hash", flat=True)) == kept
    assert new.train_count + new.val_count == new.row_count and new.val_count <= 2
    lin = new.lineage
    assert lin["operation"] == "cleaned" and lin["quality_report"] == report.pk and lin["parent"]["number"] == 1
    assert lin["dropped"] == {"contaminated": 1, "identical_pairs": 1, "near_duplicates": 2}
    assert lin["rows_dropped"] == 4 and lin["dropped_indices"] == [1, 2, 3, 4]
    entry = AuditLog.objects.get(action="dataset.clean")
    assert entry.object_id == str(new.pk) and "dropped 4 of 15 rows" in entry.summary and entry.after["rows_kept"] == 11
    # the old version is untouched
    problems.refresh_from_db()
    assert problems.row_count == 15 and list(DatasetRow.objects.filter(version=problems).order_by("index")
                                              .values_list("index", "row_hash")) == before
    # the content hash is the one an import of the kept rows computes
    rows = [r for i, r in enumerate(problem_pairs()) if i not in (1, 2, 3, 4)]
    fresh = dataset_import(project=project, user=engineer, name="fresh", path=write("k.jsonl", rows))
    assert fresh.content_hash == new.content_hash
    assert new.report["duplicates"]["rows"] == 0 and new.report["derived_from"]["number"] == 1


def test_cleaning_refuses_bad_choices_and_writes_nothing_when_it_fails(problems, engineer, sent, monkeypatch):
    report = quality_service.report_compute_now(version=problems, user=engineer)
    for categories, message in (([], "Choose what to drop"), (["bogus"], "Unknown category"),
                                (["contaminated"], "hold no rows")):
        with pytest.raises(ApplicationError, match=message):
            cleaning.clean_version(report=report, user=engineer, categories=categories)

    def boom(*a, **kw):
        raise RuntimeError("disk full")

    monkeypatch.setattr("webapp.datasets.ingest.duplicate_summary", boom)
    with pytest.raises(RuntimeError):
        cleaning.clean_version(report=report, user=engineer, categories=["near_duplicates"])
    assert list(DatasetVersion.objects.filter(dataset=problems.dataset).values_list("number", flat=True)) == [1]
    assert DatasetRow.objects.count() == problems.row_count and not AuditLog.objects.filter(action="dataset.clean")
    queued = QualityReport.objects.create(version=problems, algorithm=report.algorithm, params_key="x")
    with pytest.raises(ApplicationError, match="not ready"):
        cleaning.clean_version(report=queued, user=engineer, categories=["near_duplicates"])


def test_the_worker_task_computes_a_queued_report_and_a_lost_one_is_queued_again(problems, engineer, sent):
    from datetime import timedelta

    from django.utils import timezone

    from jobs.tasks import dataset_quality_report

    report = quality_service.report_request(version=problems, user=engineer)
    assert dataset_quality_report.name == QUALITY_REPORT
    dataset_quality_report.apply(args=[report.pk])
    report.refresh_from_db()
    assert report.status == ReportStatus.READY and report.seconds > 0
    # a report whose worker died (running, no progress for half an hour) is queued again when asked for
    QualityReport.objects.filter(pk=report.pk).update(status=ReportStatus.RUNNING,
                                                      updated_at=timezone.now() - timedelta(hours=1))
    again = quality_service.report_request(version=problems, user=engineer)
    assert again.pk == report.pk and again.status == ReportStatus.QUEUED
    fresh = quality_service.report_request(version=problems, user=engineer)  # queued a moment ago: left alone
    assert fresh.status == ReportStatus.QUEUED
