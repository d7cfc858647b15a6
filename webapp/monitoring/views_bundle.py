"""Diagnostic bundles of a run: the page that lists them (it follows a bundle being built), the button that asks
for one, and the download."""
from __future__ import annotations

from django.contrib import messages
from django.http import FileResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from webapp.core.models import Role
from webapp.core.services import ApplicationError
from webapp.monitoring.models import DiagnosticBundle
from webapp.monitoring.services import bundle as bundles
from webapp.monitoring.views import _job


def bundle_list(request, slug, job_id):
    access, job = _job(request, slug, job_id, Role.ENGINEER)
    rows = list(DiagnosticBundle.objects.filter(job=job).select_related("created_by")[:20])
    for b in rows:
        b.ready = bundles.bundle_file(b) is not None
    template = "monitoring/_bundles.html" if request.GET.get("fragment") else "monitoring/bundles.html"
    return render(request, template, {"project": access.project, "access": access, "job": job, "bundles": rows,
                                      "building": any(b.is_active for b in rows),
                                      "max_steps": bundles.MAX_SAMPLE_STEPS})


@require_POST
def bundle_create(request, slug, job_id):
    _access, job = _job(request, slug, job_id, Role.ENGINEER)
    try:
        steps = int(request.POST.get("sample_steps") or 5)
        bundle = bundles.bundle_request(job=job, user=request.user, sample_steps=steps)
    except ValueError:
        messages.error(request, "The number of steps of samples must be a whole number.")
    except ApplicationError as exc:
        messages.error(request, exc.message)
    else:
        messages.info(request, f"Building diagnostic bundle {bundle.pk} on a worker: its download link appears "
                               "below when the zip is ready.")
    return redirect("monitor-bundles", slug=slug, job_id=job.pk)


def bundle_download(request, slug, job_id, bundle_id):
    _access, job = _job(request, slug, job_id, Role.ENGINEER)
    bundle = get_object_or_404(DiagnosticBundle, pk=bundle_id, job=job)
    path = bundles.bundle_file(bundle)
    if path is None:
        messages.error(request, f"Bundle {bundle.pk} is not ready (or its file is gone): build a new one.")
        return redirect("monitor-bundles", slug=slug, job_id=job.pk)
    return FileResponse(open(path, "rb"), as_attachment=True, content_type="application/zip",
                        filename=f"run{job.pk}-diagnostics-{bundle.pk}.zip")
