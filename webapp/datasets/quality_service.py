"""Quality reports of dataset versions: request (cached), run on a worker with progress, read.

A report is keyed by version, report algorithm (webapp.datasets.quality.ALGORITHM) and options (the
evaluation sets, n-gram size, near-duplicate threshold). Asking again for a ready report returns it
without work; `recompute=True` runs it again. The Celery task jobs.tasks.dataset_quality_report
(sent by name) calls `report_run`; the command runs it in-process.
"""
from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterable
from datetime import timedelta

import orjson
from django.db import IntegrityError, transaction
from django.utils import timezone

from webapp.core.audit import audit
from webapp.core.queue import QUALITY_REPORT, enqueue
from webapp.core.services import ApplicationError
from webapp.datasets.models import DatasetVersion, QualityReport, ReportStatus, VersionStatus
from webapp.datasets.quality import ALGORITHM, contamination
from webapp.datasets.quality.near_dups import THRESHOLD
from webapp.datasets.quality_scan import scan

MAX_EVAL_SETS = 10
MAX_EVAL_ROWS = 500_000
STALE_AFTER = timedelta(minutes=30)  # a running report with no progress this long lost its worker


def report_params(*, version: DatasetVersion, eval_versions: Iterable = (), ngram: int | str | None = None,
                  threshold: float | str | None = None) -> tuple[dict, list[DatasetVersion]]:
    """Validated options and the evaluation versions; ApplicationError names the field at fault."""
    try:
        ngram = int(ngram) if ngram not in (None, "") else contamination.NGRAM
    except (TypeError, ValueError):
        raise ApplicationError("The n-gram size must be a whole number.", field="ngram") from None
    if not contamination.MIN_NGRAM <= ngram <= contamination.MAX_NGRAM:
        raise ApplicationError(f"The n-gram size must be between {contamination.MIN_NGRAM} and "
                               f"{contamination.MAX_NGRAM} words.", field="ngram")
    try:
        threshold = round(float(threshold), 3) if threshold not in (None, "") else THRESHOLD
    except (TypeError, ValueError):
        raise ApplicationError("The near-duplicate threshold must be a number.", field="threshold") from None
    if not 0.5 <= threshold <= 1.0:
        raise ApplicationError("The near-duplicate threshold must be between 0.5 and 1.", field="threshold")
    ids = []
    for ref in eval_versions or ():
        pk = getattr(ref, "pk", ref)
        try:
            ids.append(int(pk))
        except (TypeError, ValueError):
            raise ApplicationError(f"'{pk}' is not a dataset version id.", field="eval_versions") from None
    ids = sorted(set(ids))
    if len(ids) > MAX_EVAL_SETS:
        raise ApplicationError(f"Choose at most {MAX_EVAL_SETS} evaluation sets.", field="eval_versions")
    evals = list(DatasetVersion.objects.filter(pk__in=ids, dataset__project_id=version.dataset.project_id,
                                               status=VersionStatus.READY).select_related("dataset"))
    if len(evals) != len(ids):
        missing = sorted(set(ids) - {v.pk for v in evals})
        raise ApplicationError(f"Evaluation set {missing[0]} is not a ready dataset version of this project.",
                               field="eval_versions")
    if version.pk in ids:
        raise ApplicationError("A version cannot be its own evaluation set.", field="eval_versions")
    if sum(v.row_count for v in evals) > MAX_EVAL_ROWS:
        raise ApplicationError(f"The evaluation sets hold more than {MAX_EVAL_ROWS:,} rows together; choose "
                               "fewer or smaller ones.", field="eval_versions")
    evals.sort(key=lambda v: v.pk)
    return {"eval_versions": ids, "ngram": ngram, "threshold": threshold}, evals


def params_key(params: dict) -> str:
    return hashlib.sha256(orjson.dumps(params, option=orjson.OPT_SORT_KEYS)).hexdigest()


def report_request(*, version: DatasetVersion, user, eval_versions: Iterable = (), ngram=None, threshold=None,
                   recompute: bool = False, send: bool = True) -> QualityReport:
    """The report for these options: the cached one when ready (unless `recompute`), else queued for a worker
    (`send=False`: queued for the caller to run)."""
    if version.status != VersionStatus.READY:
        raise ApplicationError("Only a ready version has a quality report.")
    params, _ = report_params(version=version, eval_versions=eval_versions, ngram=ngram, threshold=threshold)
    key = params_key(params)
    with transaction.atomic():
        try:
            with transaction.atomic():
                report, created = QualityReport.objects.get_or_create(
                    version=version, algorithm=ALGORITHM, params_key=key,
                    defaults={"params": params, "created_by": user if getattr(user, "pk", None) else None})
        except IntegrityError:  # requested by someone else a moment ago
            report, created = QualityReport.objects.get(version=version, algorithm=ALGORITHM, params_key=key), False
        report = QualityReport.objects.select_for_update().get(pk=report.pk)
        busy = report.status in (ReportStatus.QUEUED, ReportStatus.RUNNING) \
            and report.updated_at > timezone.now() - STALE_AFTER
        if not created and (busy or (report.status == ReportStatus.READY and not recompute)):
            return report  # cached, or already on its way
        report.status, report.progress, report.phase, report.error = ReportStatus.QUEUED, 0.0, "queued", ""
        report.save()
        audit(actor=user, action="dataset.quality_report", project=version.project, obj=version,
              summary=f"{'Recomputing' if not created else 'Computing'} the quality report of {version}",
              after={"report": report.pk, **params})
        if send:
            transaction.on_commit(lambda: enqueue(QUALITY_REPORT, report.pk))
    return report


class _Tracker:
    """Throttled progress on the report row."""

    def __init__(self, report_id: int, callback: Callable[[float, str], None] | None = None):
        self.report_id, self.callback, self.last, self.phase = report_id, callback, 0.0, ""

    def __call__(self, fraction: float, phase: str, force: bool = False) -> None:
        now = time.monotonic()
        if not force and phase == self.phase and now - self.last < 0.5:
            return  # a new phase always shows
        self.last, self.phase = now, phase
        QualityReport.objects.filter(pk=self.report_id).update(progress=round(fraction, 4), phase=phase,
                                                               updated_at=timezone.now())
        if self.callback:
            self.callback(fraction, phase)


def report_run(*, report_id: int, progress: Callable[[float, str], None] | None = None) -> QualityReport | None:
    """Compute a queued report (the Celery task's body); a second delivery of the same task does nothing."""
    claimed = QualityReport.objects.filter(pk=report_id, status=ReportStatus.QUEUED).update(
        status=ReportStatus.RUNNING, progress=0.0, phase="starting", updated_at=timezone.now())
    if not claimed:
        return None
    report = QualityReport.objects.select_related("version__dataset__project").get(pk=report_id)
    tracker = _Tracker(report.pk, progress)
    started = time.monotonic()
    try:
        _, evals = report_params(version=report.version, **{k: report.params.get(k) for k in
                                                            ("eval_versions", "ngram", "threshold")})
        result, drops = scan(report.version, eval_versions=evals, ngram=report.params["ngram"],
                             threshold=report.params["threshold"], progress=tracker)
    except ApplicationError as exc:
        return _failed(report, exc.message)
    except Exception as exc:
        _failed(report, f"The report stopped unexpectedly: {exc.__class__.__name__}: {exc}")
        raise
    report.result, report.drops, report.error = result, drops, ""
    report.status, report.progress, report.phase = ReportStatus.READY, 1.0, "done"
    report.seconds = round(time.monotonic() - started, 2)
    report.save()
    tracker(1.0, "done", force=True)
    return report


def _failed(report: QualityReport, message: str) -> QualityReport:
    report.status, report.error, report.phase = ReportStatus.FAILED, message, "failed"
    report.save(update_fields=["status", "error", "phase", "updated_at"])
    return report


def report_compute_now(*, version: DatasetVersion, user, eval_versions: Iterable = (), ngram=None, threshold=None,
                       recompute: bool = False, progress=None) -> QualityReport:
    """The command's way: the cached report, or compute it in this process (no worker needed)."""
    report = report_request(version=version, user=user, eval_versions=eval_versions, ngram=ngram,
                            threshold=threshold, recompute=recompute, send=False)
    if report.status == ReportStatus.QUEUED:
        report_run(report_id=report.pk, progress=progress)
    report.refresh_from_db()
    return report


def report_latest(version: DatasetVersion) -> QualityReport | None:
    """The most recently requested report of the version under the current rules."""
    return version.quality_reports.filter(algorithm=ALGORITHM).order_by("-created_at", "-id").first()


def report_find(*, version: DatasetVersion, eval_versions: Iterable = (), ngram=None, threshold=None
                ) -> QualityReport | None:
    """The report computed (or asked for) with these options under the current rules, if any."""
    params, _ = report_params(version=version, eval_versions=eval_versions, ngram=ngram, threshold=threshold)
    return version.quality_reports.filter(algorithm=ALGORITHM, params_key=params_key(params)).first()


def report_get(version: DatasetVersion, report_id: int | str | None) -> QualityReport | None:
    try:
        pk = int(report_id) if report_id not in (None, "") else None
    except (TypeError, ValueError):
        return None
    if pk is None:
        return report_latest(version)
    return version.quality_reports.filter(pk=pk).first()


def report_status(report: QualityReport) -> dict:
    """What a progress bar polls (the page and the API)."""
    return {"id": report.pk, "status": report.status, "phase": report.phase, "progress": report.progress,
            "error": report.error, "finished": report.finished, "algorithm": report.algorithm,
            "params": report.params, "seconds": report.seconds, "updated_at": report.updated_at.isoformat()}


def report_payload(report: QualityReport, *, figures: bool = False, rows: bool = False) -> dict:
    """The report as JSON: status, options and sections; the figures and full row lists on request."""
    body = {**report_status(report), "version": {"id": report.version_id, "number": report.version.number,
                                                 "dataset_id": report.version.dataset_id,
                                                 "dataset": report.version.dataset.name}}
    if report.status == ReportStatus.READY:
        result = dict(report.result)
        if not figures:
            result.pop("figures", None)
        body["result"] = result
        if rows:
            body["drops"] = report.drops
    return body


def eval_choices(version: DatasetVersion):
    """The versions a user may choose as evaluation sets: ready versions of this project but this one."""
    return (DatasetVersion.objects.filter(dataset__project_id=version.dataset.project_id, status=VersionStatus.READY)
            .exclude(pk=version.pk).select_related("dataset").order_by("dataset__name", "-number"))
