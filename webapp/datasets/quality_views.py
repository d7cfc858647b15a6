"""The Quality tab of a dataset version: run the report, follow its progress, read its sections, clean.

The page is a list of sections (PAGE_SECTIONS), each one template under templates/datasets/quality/.
A section shows when the report holds its key, or always when it has a `context` function of its own
(a section whose data comes from elsewhere than the report: add a Section with one).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from django.contrib import messages
from django.http import JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from webapp.core.access import project_access
from webapp.core.models import Role
from webapp.core.services import ApplicationError
from webapp.core.text import count
from webapp.datasets import cleaning, quality_service, selectors
from webapp.datasets.models import ReportStatus
from webapp.datasets.quality import contamination
from webapp.datasets.quality.near_dups import THRESHOLD


@dataclass(frozen=True)
class Section:
    key: str
    title: str
    template: str
    # (request, version, access) -> extra context, or None to hide the section; makes it show without a report
    context: Callable | None = None


PAGE_SECTIONS: list[Section] = [
    Section("task_types", "Coverage by task type", "datasets/quality/_task_types.html"),
    Section("duplicates", "Duplicates and near-duplicates", "datasets/quality/_duplicates.html"),
    Section("identical_pairs", "Pairs without a preference", "datasets/quality/_identical_pairs.html"),
    Section("contamination", "Contamination by evaluation sets", "datasets/quality/_contamination.html"),
    Section("length_bias", "Length bias", "datasets/quality/_length_bias.html"),
    Section("languages", "Languages", "datasets/quality/_languages.html"),
]


def quality_url(version, report=None) -> str:
    url = reverse("datasets-quality", args=[version.dataset.project.slug, version.dataset_id, version.number])
    return f"{url}?report={report.pk}" if report is not None else url


def _sections(request, version, access, report) -> list[dict]:
    result = report.result if report is not None and report.status == ReportStatus.READY else {}
    shown = []
    for section in PAGE_SECTIONS:
        extra = section.context(request, version, access) if section.context else None
        data = result.get("sections", {}).get(section.key)
        if data is None and extra is None:
            continue
        shown.append({"key": section.key, "title": section.title, "template": section.template, "data": data,
                      "figure": result.get("figures", {}).get(section.key), "extra": extra or {}})
    return shown


def quality_page(request, slug, dataset_id, number):
    access = project_access(request.user, slug)
    version = selectors.version_get(project=access.project, dataset_id=dataset_id, number=number)
    errors: dict[str, str] = {}
    if request.method == "POST":
        access = project_access(request.user, slug, Role.ENGINEER)
        try:
            report = quality_service.report_request(
                version=version, user=request.user, eval_versions=request.POST.getlist("eval_versions"),
                ngram=request.POST.get("ngram"), threshold=request.POST.get("threshold"),
                recompute=bool(request.POST.get("recompute")))
        except ApplicationError as exc:
            errors[exc.field or "form"] = exc.message
        else:
            if report.status == ReportStatus.READY and not request.POST.get("recompute"):
                messages.info(request, "This report was already computed for these options: shown from the cache.")
            return redirect(quality_url(version, report))
    report = quality_service.report_get(version, request.GET.get("report"))
    return _render(request, access, version, report, errors)


def _clean_choices(report, chosen: list[str] | None) -> tuple[list[dict], int | None]:
    """The clean form's categories: ticked as suggested (cleaning.suggested_categories), or as the user chose."""
    if report is None or report.status != ReportStatus.READY:
        return [], None
    notes, kept = cleaning.suggested_categories(report.drops, report.version.row_count)
    rows = [{"key": key, "label": c["label"], "rows": c["rows"], "note": notes.get(key, ""),
             "checked": (key in chosen) if chosen is not None else (c["rows"] > 0 and not notes.get(key))}
            for key, c in report.result.get("cleaning", {}).items()]
    return rows, kept if chosen is None else None


def _render(request, access, version, report, errors: dict[str, str], *, chosen: list[str] | None = None):
    """The Quality page; `errors["clean"]` sits beside the clean button, with the user's ticks kept."""
    clean_choices, clean_kept = _clean_choices(report, chosen)
    chosen_evals = set(report.params.get("eval_versions", [])) if report else set()
    if request.method == "POST" and "eval_versions" in request.POST:
        chosen_evals = {int(v) for v in request.POST.getlist("eval_versions") if v.isdigit()}
    params = report.params if report else {}
    context = {
        "project": access.project, "access": access, "version": version, "dataset": version.dataset,
        "report": report, "errors": errors, "sections": _sections(request, version, access, report),
        "status": quality_service.report_status(report) if report else None,
        "eval_choices": quality_service.eval_choices(version), "chosen_evals": chosen_evals,
        "ngram": request.POST.get("ngram") or params.get("ngram", contamination.NGRAM),
        "threshold": request.POST.get("threshold") or params.get("threshold", THRESHOLD),
        "other_reports": version.quality_reports.exclude(pk=getattr(report, "pk", None))
                                                .filter(algorithm=getattr(report, "algorithm", 0))[:10],
        "clean_choices": clean_choices, "clean_kept": clean_kept,
        "children": version.children.order_by("number"),
    }
    return render(request, "datasets/quality.html", context, status=400 if errors else 200)


def quality_status(request, slug, dataset_id, number, report_id):
    access = project_access(request.user, slug)
    version = selectors.version_get(project=access.project, dataset_id=dataset_id, number=number)
    report = quality_service.report_get(version, report_id)
    if report is None:
        return JsonResponse({"detail": "No such report."}, status=404)
    return JsonResponse(quality_service.report_status(report))


@require_POST
def quality_clean(request, slug, dataset_id, number, report_id):
    access = project_access(request.user, slug, Role.ENGINEER)
    version = selectors.version_get(project=access.project, dataset_id=dataset_id, number=number)
    report = quality_service.report_get(version, report_id)
    if report is None:
        messages.error(request, "No such report.")
        return redirect(quality_url(version))
    chosen = request.POST.getlist("categories")
    try:
        new = cleaning.clean_version(report=report, user=request.user, categories=chosen)
    except ApplicationError as exc:  # shown beside the button, the ticks kept
        return _render(request, access, version, report, {"clean": exc.message}, chosen=chosen)
    lin = new.lineage
    messages.success(request, f"Created v{new.number}: {count(lin['rows_kept'], 'row')} kept, "
                              f"{lin['rows_dropped']:,} dropped from v{version.number} (which is unchanged).")
    return redirect(reverse("datasets-version", args=[slug, new.dataset_id, new.number]))
