"""Blind pairwise tasks' pages, one set for every source: the arena list (start one) and the human-evaluation
list, a task's page (generation, who may judge, results once closed, automatic judges, export), the judging
screen, and the actions on a task. Old arena and human-evaluation addresses redirect here."""
from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from webapp.core.access import project_access
from webapp.core.models import Membership, Role
from webapp.core.services import ApplicationError
from webapp.core.text import count
from webapp.datasets.models import DatasetVersion, VersionStatus
from webapp.monitoring.blind_results import RULE, blind_results
from webapp.monitoring.forms import ArenaExportForm, ArenaForm
from webapp.monitoring.models import BlindSource, BlindTask, EvaluationStatus
from webapp.monitoring.services import arena as arena_svc
from webapp.monitoring.services import blind
from webapp.monitoring.services.arena_export import arena_export, default_name, export_rows
from webapp.monitoring.services.gap import gap_rule, schedule_of
from webapp.monitoring.services.judges import judge_choices, judge_request, judges_progress


def version_choices(project) -> list[tuple[int, str]]:
    versions = DatasetVersion.objects.filter(dataset__project=project, status=VersionStatus.READY) \
        .select_related("dataset").order_by("dataset__name", "-number")[:300]
    return [(v.pk, f"{v.dataset.name} v{v.number} ({count(v.row_count, 'row')})") for v in versions]


def _form(project, data=None, job: str = "") -> ArenaForm:
    sides = arena_svc.side_choices(project)
    initial = {}
    if job.isdigit():  # from a run's checkpoint table: its first and last checkpoints
        mine = [v for v, label in sides if label.startswith(f"Run #{job} ")]
        if len(mine) >= 2:
            initial = {"side_a": mine[-1], "side_b": mine[0]}
    return ArenaForm(data, sides=sides, versions=version_choices(project), initial=initial)


def _create(request, access, form: ArenaForm) -> BlindTask:
    d = form.cleaned_data
    version = None
    if d["source"] == "dataset":
        version = DatasetVersion.objects.filter(pk=d.get("dataset_version") or 0).select_related("dataset").first()
        prompts = arena_svc.prompts_from_version(access.project, version, d.get("split") or "val",
                                                 d.get("limit") or 20)
    else:
        prompts = arena_svc.prompts_typed(d.get("prompts") or "")
    return arena_svc.arena_create(project=access.project, user=request.user, side_a=d["side_a"], side_b=d["side_b"],
                                  prompts=prompts, sampling=form.sampling(), seed=d.get("seed"),
                                  dataset_version=version, title=d.get("title") or "")


def _rows(request, tasks) -> list[dict]:
    rows = []
    for task in tasks[:100]:
        done, total = blind.progress_of(task, request.user)
        closed = not task.is_open and task.status == EvaluationStatus.SUCCEEDED
        rows.append({"task": task, "done": done, "total": total, "pairs": task.pairs.count(),
                     "refusal": blind.judge_refusal(task, request.user),
                     "assigned": task.assignees.filter(pk=request.user.pk).exists(),
                     "results": blind_results(task) if closed else None})
    return rows


def arena_list(request, slug):
    access = project_access(request.user, slug)
    form = None
    if access.can_engineer:
        form = _form(access.project, request.POST if request.method == "POST" else None, request.GET.get("job", ""))
        if request.method == "POST" and form.is_valid():
            try:
                arena = _create(request, access, form)
            except ApplicationError as exc:
                form.add_error(exc.field if exc.field in form.fields else None, exc.message)
            else:
                messages.success(request, f"Arena #{arena.pk} is generating both sides on a worker.")
                return redirect("monitor-blind", slug=slug, task_id=arena.pk)
    elif request.method == "POST":
        project_access(request.user, slug, Role.ENGINEER)  # refuses with the usual 403
    tasks = BlindTask.objects.filter(project=access.project, source=BlindSource.ARENA).select_related("created_by")
    return render(request, "monitoring/blind_list.html", {
        "project": access.project, "access": access, "rows": _rows(request, tasks), "form": form, "arenas": True})


def human_eval_list(request, slug):
    access = project_access(request.user, slug)
    tasks = BlindTask.objects.filter(project=access.project).exclude(source=BlindSource.ARENA) \
        .select_related("created_by", "b_checkpoint")
    return render(request, "monitoring/blind_list.html", {
        "project": access.project, "access": access, "rows": _rows(request, tasks), "form": None, "arenas": False})


def _task(request, slug, task_id, role=Role.VIEWER):
    access = project_access(request.user, slug, role)
    return access, get_object_or_404(BlindTask.objects.select_related("b_checkpoint__job"), pk=task_id,
                                      project=access.project)


def blind_detail(request, slug, task_id):
    access, task = _task(request, slug, task_id)
    ready = task.status == EvaluationStatus.SUCCEEDED
    closed = ready and not task.is_open
    results = blind_results(task) if closed else None
    arena = task.source == BlindSource.ARENA
    skipped = {}
    if closed and arena and access.can_engineer:
        skipped = {**export_rows(task)[1], "disagreed": export_rows(task, agreed_only=True)[1]["disagreed"]}
    done, total = blind.progress_of(task, request.user)
    members = Membership.objects.filter(project=task.project).select_related("user").order_by("user__username")
    return render(request, "monitoring/blind_detail.html", {
        "project": access.project, "access": access, "task": task, "ready": ready, "closed": closed,
        "results": results, "rule": RULE, "arena": arena, "skipped": skipped, "done": done, "total": total,
        "refusal": blind.judge_refusal(task, request.user), "assignment": blind.assignment_text(task),
        "progress": blind.progress_counts(task) if ready and task.is_open and access.can_engineer else None,
        "pairs": task.pairs.prefetch_related("verdicts__reviewer")[:500] if closed else None,
        "export_form": ArenaExportForm(initial={"name": default_name(task)}),
        "percent": round(100 * task.progress), "stalled": arena_svc.is_stalled(task),
        "judge_runs": list(task.judge_runs.order_by("created_at", "id")),
        "judges_live": judges_progress(task), "judge_choices": judge_choices(task) if ready else [],
        "members": [m.user for m in members if m.has_role(Role.REVIEWER)],
        "gap_rule": gap_rule(schedule_of(task.b_checkpoint.job)) if task.source == BlindSource.PERIODIC
        and task.b_checkpoint_id else ""})


def blind_judge(request, slug, task_id):
    """The judging screen: one pair, sides in this reviewer's secret order, no labels, no scores."""
    access, task = _task(request, slug, task_id, Role.REVIEWER)
    refusal = blind.judge_refusal(task, request.user)
    pair = None
    if not refusal:
        if request.GET.get("pair", "").isdigit():
            pair = blind.judgeable(task).filter(pk=int(request.GET["pair"])).first()
        pair = pair or blind.next_pair_for(task, request.user)
    done, total = blind.progress_of(task, request.user)
    if refusal and not task.is_open and total and done >= total:
        refusal = None  # the last verdict closed it: say "all judged", with the way to the results
    pairs = blind.judgeable(task)
    return render(request, "monitoring/blind_judge.html", {
        "project": access.project, "access": access, "task": task, "pair": pair, "refusal": refusal,
        "done": done, "total": total, **(blind.shown(pair, request.user) if pair else {}),
        "identical": task.pairs.filter(identical=True).count(),
        "prev_pair": pairs.filter(index__lt=pair.index).order_by("-index").first() if pair else None,
        "next_pair": pairs.filter(index__gt=pair.index).order_by("index").first() if pair else None})


@require_POST
def blind_toggle(request, slug, task_id):
    _access, task = _task(request, slug, task_id, Role.ENGINEER)
    blind.task_set_open(task=task, user=request.user, is_open=not task.is_open)
    messages.success(request, "Reopened: verdicts are hidden again until it closes." if task.is_open
                     else "Closed: no more verdicts; the results are shown.")
    return redirect("monitor-blind", slug=slug, task_id=task.pk)


@require_POST
def blind_assign(request, slug, task_id):
    _access, task = _task(request, slug, task_id, Role.ENGINEER)
    ids = [int(v) for v in request.POST.getlist("assignees") if v.isdigit()]
    users = list(get_user_model().objects.filter(pk__in=ids))
    try:
        blind.task_assign(task=task, user=request.user, anyone=request.POST.get("anyone") == "on", assignees=users)
    except ApplicationError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, blind.assignment_text(task))
    return redirect("monitor-blind", slug=slug, task_id=task.pk)


@require_POST
def blind_auto_judge(request, slug, task_id):
    _access, task = _task(request, slug, task_id, Role.ENGINEER)
    try:
        run = judge_request(task=task, user=request.user, judge=request.POST.get("judge", ""))
    except ApplicationError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"{run.label} is judging the pairs on a worker (each twice, positions swapped).")
    return redirect("monitor-blind", slug=slug, task_id=task.pk)


@require_POST
def arena_retry(request, slug, task_id):
    _access, task = _task(request, slug, task_id, Role.ENGINEER)
    try:
        arena_svc.arena_retry(arena=task, user=request.user)
    except (ApplicationError, BlindTask.DoesNotExist):
        messages.error(request, "Only a failed or stalled arena can be generated again.")
    else:
        messages.success(request, "Generating both sides again, with the same prompts, settings and seed.")
    return redirect("monitor-blind", slug=slug, task_id=task.pk)


@require_POST
def arena_export_view(request, slug, task_id):
    _access, task = _task(request, slug, task_id, Role.ENGINEER)
    form = ArenaExportForm(request.POST)
    form.is_valid()
    try:
        version = arena_export(arena=task, user=request.user, name=form.cleaned_data.get("name") or "",
                               split=form.cleaned_data.get("split") or "10%",
                               agreed_only=bool(form.cleaned_data.get("agreed_only")))
    except ApplicationError as exc:
        messages.error(request, exc.message)
        return redirect("monitor-blind", slug=slug, task_id=task.pk)
    messages.success(request, f"Exported {count(version.row_count, 'preference pair')} as {version}. "
                              "Review them, or train a reward model on them "
                              "(tick “Include unreviewed pairs” to use them before review).")
    return redirect(reverse("datasets-version", args=[slug, version.dataset_id, version.number]))


def legacy(request, slug, task_id, page=""):
    """/monitor/arenas/<id>/… and /monitor/human-evals/<id>/… (links in older notifications) → the task."""
    project_access(request.user, slug)
    return redirect("monitor-blind-judge" if page == "judge" else "monitor-blind", slug=slug, task_id=task_id)
