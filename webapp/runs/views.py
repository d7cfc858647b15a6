"""Thin views for jobs and models: parse, check access, call one service, render."""
from __future__ import annotations

import contextlib
import json
import uuid
from pathlib import Path

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from training import hparams as cfg
from training.rundir import RunDir
from webapp.core.access import project_access
from webapp.core.forms import apply_error
from webapp.core.models import Role
from webapp.core.services import ApplicationError
from webapp.core.workers import worker_online
from webapp.registry import services as registry
from webapp.runs import selectors
from webapp.runs.forms import (
    INPUT_FIELDS,
    CheckpointModelForm,
    ModelRegisterForm,
    ResumeForm,
    bind_job_forms,
    preset_backends,
    preset_table,
    settings_initial,
    submit_job_form,
)
from webapp.runs.models import Job, JobState
from webapp.runs.services import checkpoint_models, launch, prelaunch
from webapp.runs.services.lengths import figure as lengths_figure
from webapp.runs.services.model_fit import model_fit
from webapp.runs.services.plan import launched_job
from webapp.runs.services.spec import dry_run_text, job_spec, plan_preview, run_dir_for, spec_yaml


def _job_or_404(access, pk: int) -> Job:
    job = selectors.job_get(project=access.project, pk=pk)
    if job is None:
        raise Http404("No such job")
    return job


def job_list(request, slug):
    access = project_access(request.user, slug)
    jobs = selectors.job_list(project=access.project)
    state = request.GET.get("state", "")
    if state in JobState.values:
        jobs = jobs.filter(state=state)
    page = Paginator(jobs, 50).get_page(request.GET.get("page"))
    rows = [(job, selectors.job_progress(job)) for job in page]
    return render(request, "runs/job_list.html", {"project": access.project, "access": access, "page": page,
                                                  "rows": rows, "state": state, "states": JobState.choices})


# -- launch form ---------------------------------------------------------------------------------

def _render_form(request, access, form, reward_form, clone_of=None, status=200):
    return render(request, "runs/job_form.html", {
        "project": access.project, "access": access, "form": form, "reward_form": reward_form,
        "clone_of": clone_of, "presets": preset_table(), "preset_backends": preset_backends()}, status=status)


def _default_inputs(project, kind: str) -> dict:
    """Sensible first choices: the newest dataset version that fits, the demo (or only) model."""
    out = {}
    with contextlib.suppress(ApplicationError):
        out["dataset_version"] = selectors.dataset_version_by_ref(project=project, ref=None, kind=kind).pk
    base = selectors.default_base_model(project=project, kind=kind)
    if base is not None:
        out["base_model"] = base.pk
    teacher = selectors.model_by_ref(project=project, ref=None, default_names=("demo-teacher",))
    if teacher is not None and kind == "distill":
        out["teacher_model"] = teacher.pk
    return out


def job_new(request, slug):
    access = project_access(request.user, slug, Role.ENGINEER)
    project = access.project
    if request.method != "POST":
        kind, preset = request.GET.get("kind", "grpo"), request.GET.get("preset", "demo-cpu")
        kind = kind if kind in cfg.KINDS else "grpo"
        preset = preset if preset in cfg.PRESETS else "demo-cpu"
        initial = {"kind": kind, "preset": preset, "backend": cfg.PRESETS[preset].get("backend", "local"),
                   **_default_inputs(project, kind), **settings_initial(cfg.base_config(kind, preset))}
        form, reward_form = bind_job_forms(project, initial=initial,
                                           reward_initial=selectors.default_reward_spec(project=project, kind=kind))
        return _render_form(request, access, form, reward_form)
    action = request.POST.get("action", "review")
    if action == "preset":  # no-JS path: refill the settings from the chosen preset
        kind, preset = request.POST.get("kind", "grpo"), request.POST.get("preset", "demo-cpu")
        if kind in cfg.KINDS and preset in cfg.PRESETS:
            initial = {n: request.POST.get(n) for n in INPUT_FIELDS if request.POST.get(n) not in (None, "")}
            initial.update(settings_initial(cfg.base_config(kind, preset)))
            form, reward_form = bind_job_forms(project, initial=initial)
            return _render_form(request, access, form, reward_form)
    token = _launch_token(request.POST.get("launch_token")) if action == "launch" else None
    submitted = submit_job_form(project=project, user=request.user, data=request.POST, launch_now=action == "launch",
                                launch_token=token)
    if submitted.launched_before is not None:  # Back after Launch, a double click: this review was launched already
        return _already_launched(request, access, submitted.launched_before)
    if submitted.job is not None:
        for message in submitted.plan.warnings.values():
            messages.warning(request, message)
        messages.success(request, f"Job #{submitted.job.pk} queued on the {submitted.job.queue} queue.")
        return redirect("runs:detail", slug=slug, pk=submitted.job.pk)
    if not submitted.ok or action in ("edit", "launch"):  # a launch that made no job: its errors are on the form
        return _render_form(request, access, submitted.form, submitted.reward_form,
                            status=200 if action == "edit" else 400)
    plan = submitted.plan
    check = prelaunch.prelaunch_check(plan=plan, user=request.user)
    return render(request, "runs/job_review.html", {
        "project": project, "access": access, "plan": plan, "hidden": _hidden(request),
        "name": submitted.form.cleaned_data["name"], "launch_token": uuid.uuid4(), **plan_preview(plan),
        "check": prelaunch.verdict(check) if check else None})


def _hidden(request) -> list[tuple[str, str]]:
    """The form's fields, carried by the review page (a new review draws a new launch token)."""
    skip = ("csrfmiddlewaretoken", "action", "launch_token")
    return [(k, v) for k in request.POST for v in request.POST.getlist(k) if k not in skip]


def _launch_token(raw: str | None) -> uuid.UUID | None:
    try:
        return uuid.UUID(raw) if raw else None
    except ValueError:
        return None


def _already_launched(request, access, job: Job):
    return render(request, "runs/job_already_launched.html", {
        "project": access.project, "access": access, "job": job, "hidden": _hidden(request)}, status=409)


@require_GET
def job_launched(request, slug, token):
    """Whether a review's launch token made a job yet: the review page asks when it is shown again (Back)."""
    access = project_access(request.user, slug, Role.ENGINEER)
    job = launched_job(access.project, token)
    return JsonResponse({"job": job.pk if job else None,
                         "url": reverse("runs:detail", args=[slug, job.pk]) if job else None})


@require_POST
def job_preview(request, slug):
    """Live preview for the form: resolved YAML, exact command, and errors keyed by form field."""
    access = project_access(request.user, slug, Role.ENGINEER)
    submitted = submit_job_form(project=access.project, user=request.user, data=request.POST)
    form, reward_form, plan = submitted.form, submitted.reward_form, submitted.plan
    errors = {name: [str(e) for e in errs] for name, errs in form.errors.items()}
    errors.update({f"reward-{name}": [str(e) for e in errs] for name, errs in reward_form.errors.items()})
    body = {"ok": plan is not None and not plan.errors and not errors, "errors": errors,
            "warnings": {cfg.BY_KEY[k].form_name if k in cfg.BY_KEY else k: v
                         for k, v in (plan.warnings if plan else {}).items()}}
    data = form.cleaned_data
    if plan is not None:  # a model the preset was not made for: said even while other fields have errors
        body["model_fit"] = model_fit(kind=data["kind"], backend=data["backend"], preset=data["preset"],
                                      model=data.get("base_model"), values=request.POST)
    if body["ok"]:
        preview = plan_preview(plan)
        body.update(yaml=preview["yaml"], command=preview["command"], counts=preview["manifest"].get("counts"),
                    lengths=_lengths_brief(plan.lengths))
    return JsonResponse(body)


def _lengths_brief(lengths: dict | None) -> dict | None:
    keys = ("rows", "over", "share", "max", "unit", "max_prompt_length")
    return {k: lengths[k] for k in keys} if lengths else None


def job_clone(request, slug, pk):
    access = project_access(request.user, slug, Role.ENGINEER)
    job = _job_or_404(access, pk)
    initial = {"name": f"{job.name} (clone)", "kind": job.kind, "backend": job.backend, "preset": job.preset,
               "dataset_version": job.dataset_version_id, "base_model": job.base_model_id,
               "teacher_model": job.teacher_model_id,
               "include_unreviewed": bool((job.config or {}).get("include_unreviewed")),
               **settings_initial({**cfg.base_config(job.kind, job.preset), **{
                   k: v for k, v in (job.config or {}).items() if k in ("hp", "verl", "guard_rules")}})}
    form, reward_form = bind_job_forms(access.project, initial=initial, reward_initial=job.reward_spec)
    return _render_form(request, access, form, reward_form, clone_of=job)


# -- job detail ----------------------------------------------------------------------------------

def _job_yaml_and_command(job: Job) -> tuple[str, str]:
    run_dir = Path(job.run_dir) if job.run_dir else run_dir_for(job.project, job.pk)
    try:
        spec = json.loads(RunDir(run_dir).job_spec.read_text())
    except (OSError, ValueError):
        if job.base_model is None:  # not launched by this app (nothing to rebuild job.json from)
            return "# no job.json in the run directory\n", "# no command recorded for this run\n"
        spec = job_spec(job, resume_from=job.resume_checkpoint.path if job.resume_checkpoint else None)
    attempt = launch.current_attempt(job)
    command = ""
    if attempt is not None:
        try:
            argv = json.loads(RunDir(run_dir).attempt(attempt.number).launch.read_text())["argv"]
            command = f"# attempt {attempt.number}, run dir {run_dir}\n" + " \\\n  ".join(argv)
        except (OSError, ValueError, KeyError):
            command = ""
    if not command:
        command = dry_run_text(spec, run_dir)
    return spec_yaml(spec, job.config or {}), command


def job_detail(request, slug, pk):
    access = project_access(request.user, slug)
    job = _job_or_404(access, pk)
    spec_yaml, command = _job_yaml_and_command(job)
    lengths = (job.data_manifest or {}).get("lengths")
    return render(request, "runs/job_detail.html", {
        "lengths": lengths, "lengths_figure": lengths_figure(lengths) if lengths else None,
        "clip_ratio": selectors.clip_ratio(job) if lengths else None,
        "project": access.project, "access": access, "job": job, "spec_yaml": spec_yaml, "command": command,
        "attempts": job.attempts.order_by("number"), "events": selectors.job_events(job),
        "manifest": job.data_manifest or {}, "reward_versions": selectors.reward_versions_of(job),
        "checkpoints": selectors.available_checkpoints(job), "can_resume": selectors.can_resume(job),
        "resume_target": launch.resume_target(job), "children": job.children.order_by("-created_at"),
        "progress": selectors.job_progress(job), "resume_form": ResumeForm(), "worker_online": worker_online()})


@require_GET
def job_log(request, slug, pk):
    access = project_access(request.user, slug)
    job = _job_or_404(access, pk)
    try:
        attempt = int(request.GET["attempt"]) if request.GET.get("attempt") else None
    except ValueError:
        return JsonResponse({"detail": "attempt must be a number"}, status=400)
    return JsonResponse(selectors.log_tail(job, attempt))


@require_POST
def job_cancel(request, slug, pk):
    access = project_access(request.user, slug, Role.ENGINEER)
    job = _job_or_404(access, pk)
    try:
        launch.job_cancel(job=job, user=request.user)
    except ApplicationError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Cancel requested for job #{job.pk}.")
    return redirect("runs:detail", slug=slug, pk=job.pk)


@require_POST
def job_resume(request, slug, pk):
    access = project_access(request.user, slug, Role.ENGINEER)
    job = _job_or_404(access, pk)
    form = ResumeForm(request.POST)
    checkpoint = None
    if form.is_valid() and form.cleaned_data["checkpoint"] is not None:
        checkpoint = job.checkpoints.filter(step=form.cleaned_data["checkpoint"]).first()
        if checkpoint is None:
            messages.error(request, f"Job #{job.pk} has no checkpoint at step {form.cleaned_data['checkpoint']}.")
            return redirect("runs:detail", slug=slug, pk=job.pk)
    try:
        attempt = launch.job_resume(job=job, user=request.user, checkpoint=checkpoint)
    except ApplicationError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"Attempt {attempt.number} queued: resuming from {Path(attempt.resume_from).name}.")
    return redirect("runs:detail", slug=slug, pk=job.pk)


@require_POST
def job_register_model(request, slug, pk):
    """Register one of the job's checkpoints as a model (e.g. a trained reward model for GRPO)."""
    access = project_access(request.user, slug, Role.ENGINEER)
    job = _job_or_404(access, pk)
    form = CheckpointModelForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Choose a checkpoint step.")
        return redirect("runs:detail", slug=slug, pk=job.pk)
    checkpoint = job.checkpoints.filter(step=form.cleaned_data["step"]).first()
    try:
        if checkpoint is None:
            raise ApplicationError(f"Job #{job.pk} has no checkpoint at step {form.cleaned_data['step']}.")
        entry = checkpoint_models.model_register_from_checkpoint(checkpoint=checkpoint, user=request.user,
                                                        name=form.cleaned_data["name"])
    except ApplicationError as exc:
        messages.error(request, exc.message)
        return redirect("runs:detail", slug=slug, pk=job.pk)
    messages.success(request, f"Registered {entry.name} ({entry.get_kind_display()}) from step {checkpoint.step}.")
    return redirect("runs:models", slug=slug)


# -- models --------------------------------------------------------------------------------------

def model_list(request, slug):
    access = project_access(request.user, slug)
    form = ModelRegisterForm(request.POST or None)
    if request.method == "POST":
        project_access(request.user, slug, Role.ENGINEER)
        if form.is_valid():
            try:
                entry = registry.model_register(project=access.project, user=request.user, **form.cleaned_data)
            except ApplicationError as exc:
                apply_error(form, exc)
            else:
                messages.success(request, f"Registered {entry.name} ({entry.get_kind_display()}).")
                return redirect("runs:models", slug=slug)
    return render(request, "runs/model_list.html", {"project": access.project, "access": access, "form": form,
                                                    "models": selectors.model_list(project=access.project)},
                  status=400 if form.errors else 200)
