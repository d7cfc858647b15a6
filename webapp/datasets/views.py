"""Dataset pages: list, upload, import progress and report, rows, row detail, stats, export."""
from __future__ import annotations

import csv
import io
import os
import tempfile

import orjson
from django.conf import settings
from django.contrib import messages
from django.http import FileResponse, Http404, HttpResponse, JsonResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse

from training.rundir import read_jsonl
from webapp.core.access import project_access
from webapp.core.audit import audit
from webapp.core.forms import apply_error
from webapp.core.models import Role
from webapp.core.services import ApplicationError
from webapp.datasets import exporters, selectors, services
from webapp.datasets.forms import ExportForm, MappingForm, RowFilterForm, UploadForm
from webapp.datasets.models import DatasetImport, ImportStatus, VersionStatus
from webapp.registry.models import ModelEntry


def version_url(version) -> str:
    return reverse("datasets-version", args=[version.dataset.project.slug, version.dataset_id, version.number])


def import_url(record: DatasetImport) -> str:
    return reverse("datasets-import", args=[record.project.slug, record.pk])


def import_status_payload(record: DatasetImport) -> dict:
    """What the progress bars poll (shared by the page endpoint and the API)."""
    payload = {"id": record.pk, "status": record.status, "phase": record.phase, "progress": record.progress,
               "error": record.error, "name": record.name, "filename": record.filename, "url": import_url(record),
               "status_url": reverse("datasets-import-status", args=[record.project.slug, record.pk]),
               "finished": record.finished, "version_url": None, "rows": None, "bad_rows": None}
    if record.version_id and record.version.status == VersionStatus.READY:
        payload["version_url"] = version_url(record.version)
        payload["rows"] = record.version.row_count
    if record.report:
        payload["bad_rows"] = record.report.get("bad_rows")
    return payload


def imported_message(version) -> str:
    """Which happened: a new dataset, or one more version of an existing one."""
    rows = f"{version.row_count:,} row{'s' if version.row_count != 1 else ''}"
    if version.number == 1:
        return f"Imported {rows} into the new dataset “{version.dataset.name}”."
    return f"Imported {rows} as version {version.number} of the existing dataset “{version.dataset.name}”."


def upload_too_large(request) -> str | None:
    """Refuse an oversized upload from its Content-Length, before Django reads the body."""
    try:
        length = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        return None
    limit = settings.DATASET_MAX_UPLOAD_MB
    if length > limit * 1024 * 1024 + 64 * 1024:
        return f"The file is over the {limit:,} MB upload limit (DATASET_MAX_UPLOAD_MB)."
    return None


def dataset_list(request, slug):
    access = project_access(request.user, slug)
    context = {"project": access.project, "access": access,
               "datasets": selectors.dataset_list(project=access.project),
               "imports": selectors.imports_recent(project=access.project) if access.can_engineer else []}
    return render(request, "datasets/list.html", context)


def upload(request, slug):
    access = project_access(request.user, slug, Role.ENGINEER)
    too_large = upload_too_large(request) if request.method == "POST" else None
    if too_large:  # answered before Django reads (and spools) the body
        form = UploadForm(initial={"split": "10%", "split_seed": 0})
        return render(request, "datasets/upload.html", {"project": access.project, "access": access, "form": form,
                                                        "upload_error": too_large,
                                                        "max_mb": settings.DATASET_MAX_UPLOAD_MB}, status=413)
    form = UploadForm(request.POST or None, request.FILES or None, initial={"split": "10%", "split_seed": 0})
    if request.method == "POST" and form.is_valid():
        d = form.cleaned_data
        try:
            record = services.import_upload(project=access.project, user=request.user, uploaded_file=d["file"],
                                            name=d["name"], kind=d["kind"] or None, column_map=d["column_map"],
                                            skip_bad_rows=d["skip_bad_rows"], split=d["split"],
                                            split_seed=d["split_seed"])
        except ApplicationError as exc:
            apply_error(form, exc)
        else:
            if record.status == ImportStatus.SUCCEEDED:
                messages.success(request, imported_message(record.version))
                return redirect(version_url(record.version))
            return redirect(import_url(record))
    context = {"project": access.project, "access": access, "form": form,
               "max_mb": settings.DATASET_MAX_UPLOAD_MB,
               "upload_targets": selectors.upload_targets(project=access.project)}
    return render(request, "datasets/upload.html", context)


def import_detail(request, slug, pk):
    access = project_access(request.user, slug, Role.ENGINEER)
    record = get_object_or_404(DatasetImport.objects.select_related("version__dataset"), pk=pk,
                               project=access.project)
    form = None
    if record.status == ImportStatus.NEEDS_MAPPING:
        inspection = record.inspection or {}
        form = MappingForm(request.POST or None, columns=inspection.get("columns", []),
                           suggested=record.options.get("column_map") or inspection.get("suggested_map"),
                           initial={"kind": record.kind})
        if request.method == "POST" and form.is_valid():
            try:
                record = services.import_set_mapping(record=record, user=request.user, column_map=form.column_map(),
                                                     kind=form.cleaned_data["kind"] or "")
            except ApplicationError as exc:
                apply_error(form, exc)
            else:
                if record.status == ImportStatus.SUCCEEDED:
                    messages.success(request, imported_message(record.version))
                    return redirect(version_url(record.version))
                return redirect(import_url(record))
    inspection = record.inspection or {}
    columns = inspection.get("columns") or []
    preview_rows = [[row.get(c, "") for c in columns] for row in inspection.get("preview") or []]
    context = {"project": access.project, "access": access, "record": record, "form": form,
               "status": import_status_payload(record), "report": record.report or {},
               "inspection": inspection, "preview_rows": preview_rows}
    return render(request, "datasets/import.html", context)


def import_status(request, slug, pk):
    access = project_access(request.user, slug, Role.ENGINEER)
    record = get_object_or_404(DatasetImport.objects.select_related("version__dataset"), pk=pk,
                               project=access.project)
    return JsonResponse(import_status_payload(record))


def errors_response(record: DatasetImport, fmt: str) -> HttpResponse:
    """Every bad row of an import as CSV or JSON (the page shows only the first ones)."""
    if fmt not in ("csv", "json"):
        raise Http404("Unknown format")
    if record.errors_path and os.path.exists(record.errors_path):
        entries = read_jsonl(record.errors_path)
    else:
        entries = (record.report or {}).get("errors", [])
    name = f"import-{record.pk}-bad-rows.{fmt}"
    if fmt == "json":
        resp = HttpResponse(orjson.dumps(entries, option=orjson.OPT_INDENT_2), content_type="application/json")
    else:
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=["row", "line", "field", "reason"])
        writer.writeheader()
        writer.writerows(entries)
        resp = HttpResponse(out.getvalue(), content_type="text/csv; charset=utf-8")
    resp["Content-Disposition"] = f'attachment; filename="{name}"'
    return resp


def import_errors(request, slug, pk, fmt):
    access = project_access(request.user, slug, Role.ENGINEER)
    record = get_object_or_404(DatasetImport, pk=pk, project=access.project)
    return errors_response(record, fmt)


def dataset_detail(request, slug, dataset_id):
    access = project_access(request.user, slug)
    dataset = selectors.dataset_get(project=access.project, dataset_ref=dataset_id)
    latest = dataset.latest_version
    if latest is not None:
        return redirect(version_url(latest))
    return render(request, "datasets/dataset_empty.html", {"project": access.project, "access": access,
                                                           "dataset": dataset})


def _int(value) -> int | None:
    try:
        return int(value) if value not in (None, "") else None
    except (TypeError, ValueError):
        return None


def version_detail(request, slug, dataset_id, number):
    access = project_access(request.user, slug)
    version = selectors.version_get(project=access.project, dataset_id=dataset_id, number=number)
    form = RowFilterForm(request.GET or None)
    filters = form.filters() if request.GET else selectors.RowFilters()
    page = selectors.rows_page(version, filters, after=_int(request.GET.get("after")),
                               before=_int(request.GET.get("before")))
    query = request.GET.copy()
    for key in ("after", "before"):
        query.pop(key, None)
    context = {"project": access.project, "access": access, "version": version, "dataset": version.dataset,
               "versions": version.dataset.versions.filter(status=VersionStatus.READY).order_by("-number"),
               "form": form, "page": page, "filters": filters, "query": query.urlencode(),
               "sources": selectors.data_sources(version), "review_enabled": selectors.pair_state_model() is not None,
               "export_form": ExportForm(initial={"format": "verl"}), "report": version.report or {}}
    return render(request, "datasets/version.html", context)


def row_detail(request, slug, dataset_id, number, index):
    access = project_access(request.user, slug)
    version = selectors.version_get(project=access.project, dataset_id=dataset_id, number=number)
    row = selectors.row_get(version, index)
    context = {"project": access.project, "access": access, "version": version, "dataset": version.dataset,
               "row": row, "prev_index": index - 1 if index > 0 else None,
               "next_index": index + 1 if index + 1 < version.row_count else None}
    return render(request, "datasets/row.html", context)


def version_stats(request, slug, dataset_id, number):
    from webapp.datasets.stats import version_stats as compute
    access = project_access(request.user, slug)
    version = selectors.version_get(project=access.project, dataset_id=dataset_id, number=number)
    models = ModelEntry.objects.filter(project=access.project).exclude(path="").order_by("name")
    chosen = models.filter(pk=_int(request.GET.get("tokenizer"))).first() if request.GET.get("tokenizer") else None
    error = ""
    try:
        stats = compute(version, tokenizer_path=chosen.path if chosen else None)
    except ApplicationError as exc:
        error, chosen = exc.message, None
        stats = compute(version)
    context = {"project": access.project, "access": access, "version": version, "dataset": version.dataset,
               "models": models, "chosen_model": chosen, "tokenizer_error": error, "numbers": stats["numbers"],
               "figures": stats["figures"], "preference": version.dataset.kind == "preference"}
    return render(request, "datasets/stats.html", context)


def version_export(request, slug, dataset_id, number):
    access = project_access(request.user, slug, Role.ENGINEER)
    version = selectors.version_get(project=access.project, dataset_id=dataset_id, number=number)
    form = ExportForm(request.GET)
    if not form.is_valid():
        messages.error(request, "Choose an export format: verl, trl or jsonl.")
        return redirect(version_url(version))
    if form.cleaned_data.get("approved_only"):  # the review app owns which pairs are approved
        return redirect(reverse("review-export", args=[slug, version.pk]) + "?" + request.GET.urlencode())
    return export_response(version, form.cleaned_data, user=request.user,
                           on_error=lambda msg: (messages.error(request, msg), redirect(version_url(version)))[1])


def export_response(version, options: dict, *, user, on_error, rows: list[dict] | None = None, label: str = ""):
    """A download of the version (or of the `rows` chosen from it) in the chosen format.

    JSONL streams; Parquet goes through a temp file. `label` names the choice in the file name and audit log.
    """
    fmt, style = options["format"], options.get("trl_style") or "auto"
    filename = exporters.export_filename(version, fmt, label)
    if fmt == "verl":
        fd, tmp = tempfile.mkstemp(suffix=".parquet")
        os.close(fd)
        try:
            result = exporters.export_version(version=version, fmt=fmt, out_path=tmp, rows=rows, label=label,
                                              user=user)
            fh = open(result.path, "rb")  # noqa: SIM115 - FileResponse closes it
        except ApplicationError as exc:
            return on_error(exc.message)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)  # an open handle keeps the data readable until the response is sent
        return FileResponse(fh, as_attachment=True, filename=filename, content_type="application/octet-stream")
    if rows is None:
        rows = exporters.export_rows(version)
    elif not rows:
        return on_error("There are no rows to export.")
    audit(actor=user, action="dataset.export", project=version.project, obj=version,
          summary=f"Exported {version} as {exporters.FORMATS[fmt]}" + (f" ({label})" if label else ""))
    resp = StreamingHttpResponse(exporters.jsonl_chunks(rows, version.dataset.kind, fmt, style),
                                 content_type="application/x-ndjson")
    resp["Content-Disposition"] = f'attachment; filename="{filename}"'
    return resp
