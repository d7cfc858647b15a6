"""Arena pages: start one, watch it generate, judge pairs blind with the keyboard, see results, export."""
from __future__ import annotations

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from webapp.core.access import project_access
from webapp.core.models import Role
from webapp.core.services import ApplicationError
from webapp.datasets.models import DatasetVersion, VersionStatus
from webapp.monitoring.arena_results import arena_results, next_pair_for
from webapp.monitoring.forms import ArenaExportForm, ArenaForm
from webapp.monitoring.models import Arena, EvaluationStatus
from webapp.monitoring.services import arena as svc
from webapp.monitoring.services.arena_export import arena_export, default_name, export_rows
from webapp.monitoring.services.judges import judge_choices


def version_choices(project) -> list[tuple[int, str]]:
    versions = DatasetVersion.objects.filter(dataset__project=project, status=VersionStatus.READY) \
        .select_related("dataset").order_by("dataset__name", "-number")[:300]
    return [(v.pk, f"{v.dataset.name} v{v.number} ({v.row_count} rows)") for v in versions]


def _form(project, data=None, job: str = "") -> ArenaForm:
    sides = svc.side_choices(project)
    initial = {}
    if job.isdigit():  # from a run's checkpoint table: its first and last checkpoints
        mine = [v for v, label in sides if label.startswith(f"Run #{job} ")]
        if len(mine) >= 2:
            initial = {"side_a": mine[-1], "side_b": mine[0]}
    return ArenaForm(data, sides=sides, versions=version_choices(project), initial=initial)


def _create(request, access, form: ArenaForm) -> Arena:
    d = form.cleaned_data
    version = None
    if d["source"] == "dataset":
        version = DatasetVersion.objects.filter(pk=d.get("dataset_version") or 0).select_related("dataset").first()
        prompts = svc.prompts_from_version(access.project, version, d.get("split") or "val", d.get("limit") or 20)
    else:
        prompts = svc.prompts_typed(d.get("prompts") or "")
    return svc.arena_create(project=access.project, user=request.user, side_a=d["side_a"], side_b=d["side_b"],
                            prompts=prompts, sampling=form.sampling(), seed=d.get("seed"), dataset_version=version,
                            title=d.get("title") or "")


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
                return redirect("monitor-arena", slug=slug, arena_id=arena.pk)
    elif request.method == "POST":
        project_access(request.user, slug, Role.ENGINEER)  # refuses with the usual 403
    arenas = Arena.objects.filter(project=access.project).select_related("created_by")[:100]
    rows = [{"arena": a, "judged": a.pairs.filter(judgements__reviewer=request.user).count(),
             "pairs": a.pairs.count()} for a in arenas]
    return render(request, "monitoring/arena_list.html", {"project": access.project, "access": access,
                                                          "rows": rows, "form": form})


def _arena(request, slug, arena_id, role=Role.VIEWER):
    access = project_access(request.user, slug, role)
    return access, get_object_or_404(Arena, pk=arena_id, project=access.project)


def arena_detail(request, slug, arena_id):
    access, arena = _arena(request, slug, arena_id)
    results = arena_results(arena) if arena.status == EvaluationStatus.SUCCEEDED else None
    skipped = {}
    if results and access.can_engineer:
        skipped = {**export_rows(arena)[1], "disagreed": export_rows(arena, agreed_only=True)[1]["disagreed"]}
    return render(request, "monitoring/arena_detail.html", {
        "project": access.project, "access": access, "arena": arena, "results": results, "skipped": skipped,
        "mine": arena.pairs.filter(judgements__reviewer=request.user).count(),
        # which model wrote what is shown only once judging is over: the page must not unblind reviewers
        "pairs": arena.pairs.prefetch_related("judgements__reviewer")[:500] if results and not arena.is_open else None,
        "export_form": ArenaExportForm(initial={"name": default_name(arena)}),
        "percent": round(100 * arena.progress), "stalled": svc.is_stalled(arena),
        "judge_runs": list(arena.judge_runs.order_by("created_at", "id")),
        "judge_choices": judge_choices(arena=arena) if results else []})


def arena_judge(request, slug, arena_id):
    """The blind judging screen: one pair, sides in this reviewer's random order, no labels."""
    access, arena = _arena(request, slug, arena_id, Role.REVIEWER)
    pair = None
    if request.GET.get("pair", "").isdigit():
        pair = arena.pairs.filter(pk=int(request.GET["pair"])).first()
    pair = pair or next_pair_for(arena, request.user)
    judgement = pair.judgements.filter(reviewer=request.user).first() if pair else None
    left = svc.shown_left(pair, request.user) if pair else "a"
    right = "b" if left == "a" else "a"
    pressed = ""
    if judgement:
        pressed = {left: "left", right: "right"}.get(judgement.choice, judgement.choice)
    total = arena.pairs.count()
    return render(request, "monitoring/arena_judge.html", {
        "project": access.project, "access": access, "arena": arena, "pair": pair, "pressed": pressed,
        "done": arena.pairs.filter(judgements__reviewer=request.user).count(), "total": total,
        "left_text": pair.response(left) if pair else "", "right_text": pair.response(right) if pair else "",
        "left_cut": getattr(pair, f"truncated_{left}", False), "right_cut": getattr(pair, f"truncated_{right}", False),
        "prev_pair": arena.pairs.filter(index__lt=pair.index).order_by("-index").first() if pair else None,
        "next_pair": arena.pairs.filter(index__gt=pair.index).order_by("index").first() if pair else None})


@require_POST
def arena_toggle(request, slug, arena_id):
    _access, arena = _arena(request, slug, arena_id, Role.ENGINEER)
    svc.arena_set_open(arena=arena, user=request.user, is_open=not arena.is_open)
    messages.success(request, "Arena reopened." if arena.is_open else "Arena closed: no more judgements.")
    return redirect("monitor-arena", slug=slug, arena_id=arena.pk)


@require_POST
def arena_retry(request, slug, arena_id):
    _access, arena = _arena(request, slug, arena_id, Role.ENGINEER)
    try:
        svc.arena_retry(arena=arena, user=request.user)
    except ApplicationError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, "Generating both sides again, with the same prompts, settings and seed.")
    return redirect("monitor-arena", slug=slug, arena_id=arena.pk)


@require_POST
def arena_export_view(request, slug, arena_id):
    _access, arena = _arena(request, slug, arena_id, Role.ENGINEER)
    form = ArenaExportForm(request.POST)
    form.is_valid()
    try:
        version = arena_export(arena=arena, user=request.user, name=form.cleaned_data.get("name") or "",
                               split=form.cleaned_data.get("split") or "10%",
                               agreed_only=bool(form.cleaned_data.get("agreed_only")))
    except ApplicationError as exc:
        messages.error(request, exc.message)
        return redirect("monitor-arena", slug=slug, arena_id=arena.pk)
    messages.success(request, f"Exported {version.row_count} preference pairs as {version}. Review them, or train a "
                              "reward model on them (tick “Include unreviewed pairs” to use them before review).")
    return redirect(reverse("datasets-version", args=[slug, version.dataset_id, version.number]))
