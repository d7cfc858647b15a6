"""Monitoring pages: the job monitor, checkpoint actions (opening a human evaluation among them), compare."""
from __future__ import annotations

from pathlib import Path

from django.contrib import messages
from django.http import FileResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from training.winrate import TIE_RULE
from webapp.core.access import project_access
from webapp.core.models import Role
from webapp.core.params import parse_ids
from webapp.core.services import ApplicationError
from webapp.monitoring import selectors, services
from webapp.monitoring.compare import compare_table, load_jobs
from webapp.monitoring.forms import ExportForm, HumanEvalForm, RollbackForm
from webapp.monitoring.models import CheckpointExport
from webapp.runs.models import Job


def _job(request, slug: str, job_id: int, role: str = Role.VIEWER):
    access = project_access(request.user, slug, role)
    return access, get_object_or_404(Job, pk=job_id, project=access.project)


def _back(request, slug: str, job: Job):
    nxt = request.POST.get("next") or request.GET.get("next")
    if nxt and url_has_allowed_host_and_scheme(nxt, allowed_hosts={request.get_host()}):
        return redirect(nxt)
    return redirect("runs:detail", slug=slug, pk=job.pk)


def job_monitor(request, slug, job_id):
    """The run page's old address: a run has one page (runs:detail), where this one now leads."""
    _access, job = _job(request, slug, job_id)
    return redirect("runs:detail", slug=slug, pk=job.pk, permanent=True)


def checkpoints(request, slug, job_id):
    """The checkpoints tab as an HTML fragment: the job page swaps it in when the table changes.
    `back` is the page it sits on, where the tab's forms return to."""
    access, job = _job(request, slug, job_id)
    back = request.GET.get("back") or ""
    if not (back.startswith("/") and url_has_allowed_host_and_scheme(back, allowed_hosts={request.get_host()})):
        back = reverse("runs:detail", args=[slug, job.pk])
    return render(request, "monitoring/_checkpoints_fragment.html",
                  {"project": access.project, "access": access, "job": job, "back": back})


@require_POST
def promote(request, slug, job_id, step):
    _access, job = _job(request, slug, job_id, Role.ENGINEER)
    try:
        ckpt = services.checkpoint_get(job=job, step=step)
        services.checkpoint_promote(checkpoint=ckpt, user=request.user)
    except ApplicationError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Step {ckpt.step} of run #{job.pk} is now the project's active policy.")
    return _back(request, slug, job)


def rollback(request, slug, job_id, step):
    """GET: the confirm page (the dialog's no-JS twin); POST: roll back."""
    access, job = _job(request, slug, job_id, Role.ENGINEER)
    form = RollbackForm(request.POST or None, job=job)
    if request.method == "POST" and form.is_valid():
        try:
            child = services.job_rollback(job=job, step=step, user=request.user,
                                          reason=form.cleaned_data["reason"], hp_overrides=form.hp_overrides(),
                                          stop_parent=form.cleaned_data.get("stop_parent", False))
        except ApplicationError as exc:
            messages.error(request, exc.message)
            return _back(request, slug, job)
        messages.success(request, f"Run #{child.pk} resumes from step {step} of run #{job.pk}.")
        return redirect(f"/p/{slug}/jobs/{child.pk}/")
    return render(request, "monitoring/rollback.html", {"project": access.project, "access": access, "job": job,
                                                        "step": step, "form": form,
                                                        "hp": selectors.job_hp(job)})


@require_POST
def export(request, slug, job_id, step):
    """Download the checkpoint as an HF folder zip: at once when it is built, else built on a worker."""
    _access, job = _job(request, slug, job_id, Role.ENGINEER)
    form = ExportForm(request.POST)
    merge = not (form.is_valid() and form.cleaned_data.get("variant") == "adapter")
    try:
        ckpt = services.checkpoint_get(job=job, step=step)
        exp = services.export_request(checkpoint=ckpt, user=request.user, merge_lora=merge)
    except ApplicationError as exc:
        messages.error(request, exc.message)
        return _back(request, slug, job)
    if services.export_ready(exp):
        return _zip_response(exp)
    messages.info(request, f"Exporting step {step} ({exp.variant}) on a worker: its download link appears in "
                           "the Checkpoints tab when the zip is ready.")
    return _back(request, slug, job)


def export_download(request, slug, job_id, step, export_id):
    _access, job = _job(request, slug, job_id, Role.ENGINEER)
    exp = get_object_or_404(CheckpointExport.objects.select_related("checkpoint"), pk=export_id,
                            checkpoint__job=job, checkpoint__step=step)
    if not services.export_ready(exp):
        messages.error(request, f"The export of step {step} is not ready (or its checkpoint changed): export it again.")
        return redirect("runs:detail", slug=slug, pk=job.pk)
    return _zip_response(exp)


def _zip_response(exp: CheckpointExport) -> FileResponse:
    path = Path(exp.path)
    return FileResponse(open(path, "rb"), as_attachment=True, filename=path.name, content_type="application/zip")


@require_POST
def evaluate(request, slug, job_id, step):
    _access, job = _job(request, slug, job_id, Role.ENGINEER)
    try:
        ckpt = services.checkpoint_get(job=job, step=step)
        services.evaluation_request(checkpoint=ckpt, user=request.user)
    except ApplicationError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Evaluating step {ckpt.step}; the win rate appears in the checkpoint table.")
    return _back(request, slug, job)


@require_POST
def human_eval_create(request, slug, job_id, step):
    _access, job = _job(request, slug, job_id, Role.ENGINEER)
    form = HumanEvalForm(request.POST)
    limit = form.cleaned_data["limit"] if form.is_valid() else 50
    try:
        ckpt = services.checkpoint_get(job=job, step=step)
        task = services.human_eval_create(checkpoint=ckpt, user=request.user, limit=limit)
    except ApplicationError as exc:
        messages.error(request, exc.message)
        return _back(request, slug, job)
    messages.success(request, f"Human evaluation #{task.pk} is open: reviewers find it under Human evaluation.")
    return redirect("monitor-blind", slug=slug, task_id=task.pk)


def compare(request, slug):
    access = project_access(request.user, slug)
    jobs = list(Job.objects.filter(project=access.project).order_by("-created_at")[:200])
    try:
        selected = parse_ids(request.GET.getlist("jobs"))
    except ValueError:
        selected = []
    selected = [j.pk for j in jobs if j.pk in selected]
    names = sorted({n for j in jobs if j.pk in selected for n in selectors.metric_names(j)})
    name = request.GET.get("name") or ("critic/score/mean" if "critic/score/mean" in names else
                                       (names[0] if names else ""))
    compare_config = {"api": f"/api/projects/{slug}/monitor/compare/", "jobs": selected, "name": name}
    table = compare_table(load_jobs(access.project, selected)) if selected else None
    return render(request, "monitoring/compare.html", {
        "project": access.project, "access": access, "jobs": jobs, "selected": selected, "names": names,
        "name": name, "compare_config": compare_config, "table": table, "tie_rule": TIE_RULE,
        "is_win_rate": "win_rate" in name})
