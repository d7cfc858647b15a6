"""Blind pairwise tasks' API under /api/projects/<slug>/monitor/, one shape for every source (arena, periodic,
checkpoint): list and read tasks, the next pair for me, record a verdict (answering with the next pair), open or
close, assign, automatic judges; start an arena; export an arena's verdicts. Results only once a task is closed.
"""
from __future__ import annotations

from django.contrib.auth import get_user_model
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import PermissionDenied
from rest_framework.response import Response
from rest_framework.views import APIView

from webapp.core import jsonsafe
from webapp.core.access import project_access
from webapp.core.api import application_error_response
from webapp.core.models import Role
from webapp.core.services import ApplicationError
from webapp.datasets.models import DatasetVersion
from webapp.monitoring.api import _parse
from webapp.monitoring.blind_results import blind_results
from webapp.monitoring.models import BlindPair, BlindSource, BlindTask, EvaluationStatus, JudgeRun
from webapp.monitoring.services import arena as arena_svc
from webapp.monitoring.services import blind
from webapp.monitoring.services.arena_export import arena_export
from webapp.monitoring.services.judges import judge_choices, judge_request, judges_progress


def task_dict(task: BlindTask, user, access=None) -> dict:
    """A task as the API shows it to `user`: no model paths, no side of any pair, results only once closed,
    progress counts (no outcomes) to engineers while it is open."""
    done, total = blind.progress_of(task, user)
    ready = task.status == EvaluationStatus.SUCCEEDED
    out = {"id": task.pk, "source": task.source, "title": task.title, "status": task.status,
           "progress": task.progress, "finished": task.status in (EvaluationStatus.SUCCEEDED, EvaluationStatus.FAILED),
           "error": task.error, "is_open": task.is_open,
           "closed_at": task.closed_at.isoformat() if task.closed_at else None,
           "sides": {k: {kk: vv for kk, vv in v.items() if kk != "path"} for k, v in task.sides.items()},
           "origin": task.origin, "sampling": task.sampling, "seed": task.seed, "engine": task.engine,
           "prompts": len(task.prompts) or task.pairs.count(), "pairs": task.pairs.count(),
           "identical_pairs": task.pairs.filter(identical=True).count(),
           "anyone_may_judge": task.anyone_may_judge,
           "assignees": sorted(u.username for u in task.assignees.all()),
           "may_judge": blind.judge_refusal(task, user) is None, "why_not": blind.judge_refusal(task, user),
           "mine": {"judged": done, "to_judge": total}, "created_at": task.created_at.isoformat()}
    if ready and not task.is_open:
        out["results"] = blind_results(task).to_dict()
        if task.gap:
            out["gap"] = task.gap
    elif ready and access is not None and access.can_engineer:
        out["progress_counts"] = blind.progress_counts(task)
    return out


def _get(request, slug, pk, role=Role.VIEWER):
    access = project_access(request.user, slug, role)
    return access, get_object_or_404(BlindTask.objects.select_related("b_checkpoint__job"), pk=pk,
                                     project=access.project)


class EmptySerializer(serializers.Serializer):
    pass


class BlindListApi(APIView):
    """The project's blind tasks, newest first (`?source=arena|periodic|checkpoint`)."""

    serializer_class = EmptySerializer

    @extend_schema(responses=OpenApiTypes.OBJECT)
    def get(self, request, slug):
        access = project_access(request.user, slug)
        tasks = BlindTask.objects.filter(project=access.project)
        if request.query_params.get("source"):
            tasks = tasks.filter(source=request.query_params["source"])
        return Response({"tasks": [task_dict(t, request.user, access) for t in tasks[:100]]})


class BlindApi(APIView):
    """One task: its generation's status and progress, who may judge it, my progress; results once closed."""

    serializer_class = EmptySerializer

    @extend_schema(responses=OpenApiTypes.OBJECT)
    def get(self, request, slug, pk):
        access, task = _get(request, slug, pk)
        return Response(task_dict(task, request.user, access))


def _pair_dict(task: BlindTask, pair: BlindPair | None, user) -> dict:
    done, total = blind.progress_of(task, user)
    if pair is None:
        return {"pair": None, "judged": done, "to_judge": total}
    seen = blind.shown(pair, user)
    return {"pair": pair.pk, "index": pair.index, "prompt": pair.prompt_text, "left": seen["left_text"],
            "right": seen["right_text"], "left_cut": seen["left_cut"], "right_cut": seen["right_cut"],
            "your_verdict": seen["pressed"] or None, "judged": done, "to_judge": total}


class BlindNextApi(APIView):
    """The next pair I have not judged, as I see it (left / right, no sides); `pair` is null when I am done."""

    serializer_class = EmptySerializer

    @extend_schema(responses=OpenApiTypes.OBJECT)
    def get(self, request, slug, pk):
        _access, task = _get(request, slug, pk, Role.REVIEWER)
        refusal = blind.judge_refusal(task, request.user)
        if refusal:
            raise PermissionDenied(refusal)
        return Response(_pair_dict(task, blind.next_pair_for(task, request.user), request.user))


class VerdictSerializer(serializers.Serializer):
    pair = serializers.IntegerField()
    choice = serializers.ChoiceField(choices=list(blind.CHOICES), help_text="what I saw: left / right, tie, both_bad")


class BlindVerdictApi(APIView):
    """Record my verdict on a pair (or change it); answers with the next pair I have not judged."""

    serializer_class = VerdictSerializer

    def post(self, request, slug, pk):
        _access, task = _get(request, slug, pk, Role.REVIEWER)
        ser, err = _parse(VerdictSerializer, request.data)
        if err:
            return err
        pair = get_object_or_404(BlindPair, pk=ser.validated_data["pair"], task=task)
        refusal = blind.judge_refusal(task, request.user)
        if refusal and task.is_open and task.status == EvaluationStatus.SUCCEEDED:
            raise PermissionDenied(refusal)  # a reviewer the task is not assigned to
        try:
            blind.verdict_record(pair=pair, reviewer=request.user, choice=ser.validated_data["choice"])
        except ApplicationError as exc:
            return application_error_response(exc)
        task.refresh_from_db()
        nxt = blind.next_pair_for(task, request.user) if task.is_open else None
        return Response({"saved": True, "next": nxt.pk if nxt else None, "closed": not task.is_open},
                        status=status.HTTP_201_CREATED)


class OpenSerializer(serializers.Serializer):
    is_open = serializers.BooleanField()


class BlindOpenApi(APIView):
    """Close a task (its results show) or reopen it (engineers)."""

    serializer_class = OpenSerializer

    def post(self, request, slug, pk):
        access, task = _get(request, slug, pk, Role.ENGINEER)
        ser, err = _parse(OpenSerializer, request.data)
        if err:
            return err
        blind.task_set_open(task=task, user=request.user, is_open=ser.validated_data["is_open"])
        return Response(task_dict(task, request.user, access))


class AssignSerializer(serializers.Serializer):
    anyone = serializers.BooleanField(help_text="anyone in the project who may review can judge")
    assignees = serializers.ListField(child=serializers.CharField(), required=False, default=list,
                                      help_text="usernames")


class BlindAssignApi(APIView):
    """Who may judge a task: its assignees, or explicitly anyone who may review (engineers)."""

    serializer_class = AssignSerializer

    def post(self, request, slug, pk):
        access, task = _get(request, slug, pk, Role.ENGINEER)
        ser, err = _parse(AssignSerializer, request.data)
        if err:
            return err
        names = ser.validated_data["assignees"]
        users = list(get_user_model().objects.filter(username__in=names))
        try:
            if len(users) != len(set(names)):
                raise ApplicationError("Some of those usernames do not exist.", field="assignees")
            blind.task_assign(task=task, user=request.user, anyone=ser.validated_data["anyone"], assignees=users)
        except ApplicationError as exc:
            return application_error_response(exc)
        return Response(task_dict(task, request.user, access))


class JudgeRequestSerializer(serializers.Serializer):
    judge = serializers.CharField(help_text='"reward" (the run\'s reward) or "model:<id>" (a registered model)')


def judge_run_dict(run: JudgeRun) -> dict:
    result = run.result or {}
    return {"id": run.pk, "status": run.status, "error": run.error, "judge": run.label, "kind": run.kind,
            "wins": run.wins, "ties": run.ties, "losses": run.losses, "n": run.n, "win_rate": run.win_rate,
            "lo": run.win_rate_lo, "hi": run.win_rate_hi, "inconsistent": run.inconsistent,
            "position_bias_share": run.position_bias_share, "unjudged": run.unjudged,
            "interval": result.get("interval", ""), "all_scores_equal": bool(result.get("all_scores_equal"))}


class BlindJudgesApi(APIView):
    """Automatic judges of a task's pairs (list: viewers, with the live status the page follows; start:
    engineers). `choices` names each judge and, for one that cannot judge these pairs, why."""

    serializer_class = JudgeRequestSerializer

    def get(self, request, slug, pk):
        access, task = _get(request, slug, pk)
        runs = JudgeRun.objects.filter(task=task).order_by("created_at", "id")
        choices = judge_choices(task) if access.can_engineer and task.status == EvaluationStatus.SUCCEEDED else []
        return Response({"judges": [judge_run_dict(r) for r in runs], "choices": choices, **judges_progress(task)})

    def post(self, request, slug, pk):
        _access, task = _get(request, slug, pk, Role.ENGINEER)
        ser = JudgeRequestSerializer(data=request.data)
        if not ser.is_valid():
            return Response({"detail": "Name a judge: \"reward\" or \"model:<id>\".", "errors": ser.errors},
                            status=status.HTTP_400_BAD_REQUEST)
        try:
            run = judge_request(user=request.user, judge=ser.validated_data["judge"], task=task)
        except ApplicationError as exc:
            return application_error_response(exc)
        return Response(judge_run_dict(run), status=status.HTTP_202_ACCEPTED)


class ArenaCreateSerializer(serializers.Serializer):
    side_a = serializers.CharField(help_text="ckpt:<checkpoint id> or model:<registered model id>")
    side_b = serializers.CharField()
    prompts = serializers.ListField(child=jsonsafe.JSONField(), required=False, default=list,
                                    help_text="strings, message lists or {prompt, ground_truth, data_source, "
                                              "extra_info}; or give dataset_version")
    dataset_version = serializers.IntegerField(required=False)
    split = serializers.ChoiceField(choices=["val", "train", "all"], required=False, default="val")
    limit = serializers.IntegerField(required=False, default=20, min_value=1, max_value=arena_svc.MAX_PROMPTS)
    sampling = serializers.DictField(required=False, default=dict)
    seed = serializers.IntegerField(required=False, allow_null=True, default=None)
    title = serializers.CharField(required=False, allow_blank=True, default="")


class ArenaListApi(APIView):
    """The project's arenas (GET, viewers: the blind-task shape); start one (POST, engineers)."""

    serializer_class = ArenaCreateSerializer

    @extend_schema(operation_id="projects_monitor_arenas_list", responses=OpenApiTypes.OBJECT)
    def get(self, request, slug):
        access = project_access(request.user, slug)
        arenas = BlindTask.objects.filter(project=access.project, source=BlindSource.ARENA)[:100]
        return Response({"arenas": [task_dict(a, request.user, access) for a in arenas]})

    def post(self, request, slug):
        access = project_access(request.user, slug, Role.ENGINEER)
        ser, err = _parse(ArenaCreateSerializer, request.data)
        if err:
            return err
        d = ser.validated_data
        try:
            version, prompts = None, d["prompts"]
            if d.get("dataset_version"):
                version = DatasetVersion.objects.filter(pk=d["dataset_version"]).select_related("dataset").first()
                prompts = arena_svc.prompts_from_version(access.project, version, d["split"], d["limit"])
            arena = arena_svc.arena_create(project=access.project, user=request.user, side_a=d["side_a"],
                                           side_b=d["side_b"], prompts=prompts, sampling=d["sampling"],
                                           seed=d["seed"], dataset_version=version, title=d["title"])
        except ApplicationError as exc:
            return application_error_response(exc)
        return Response(task_dict(arena, request.user, access), status=status.HTTP_201_CREATED)


class ArenaExportSerializer(serializers.Serializer):
    name = serializers.CharField(required=False, allow_blank=True, default="")
    split = serializers.CharField(required=False, default="10%")
    agreed_only = serializers.BooleanField(required=False, default=False)


class ArenaExportApi(APIView):
    """Export a closed arena's verdicts with a winner as a new preference dataset version (engineers)."""

    serializer_class = ArenaExportSerializer

    def post(self, request, slug, pk):
        _access, task = _get(request, slug, pk, Role.ENGINEER)
        ser, err = _parse(ArenaExportSerializer, request.data)
        if err:
            return err
        try:
            version = arena_export(arena=task, user=request.user, **ser.validated_data)
        except ApplicationError as exc:
            return application_error_response(exc)
        return Response({"dataset": version.dataset.name, "dataset_id": version.dataset_id, "version": version.number,
                         "version_id": version.pk, "rows": version.row_count}, status=status.HTTP_201_CREATED)
