"""Arena API under /api/projects/<slug>/monitor/arenas/: start, follow, judge blind, export."""
from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from webapp.core import jsonsafe
from webapp.core.access import project_access
from webapp.core.api import application_error_response
from webapp.core.models import Role
from webapp.core.services import ApplicationError
from webapp.datasets.models import DatasetVersion
from webapp.monitoring.api import _parse
from webapp.monitoring.arena_results import arena_results, next_pair_for
from webapp.monitoring.models import Arena, ArenaPair, EvaluationStatus
from webapp.monitoring.services import arena as svc
from webapp.monitoring.services.arena_export import arena_export


def arena_dict(arena: Arena, *, results: bool = False) -> dict:
    out = {"id": arena.pk, "title": arena.title, "status": arena.status, "progress": arena.progress,
           "error": arena.error, "is_open": arena.is_open, "sides": {k: {kk: vv for kk, vv in v.items() if kk != "path"}
                                                                    for k, v in arena.sides.items()},
           "sampling": arena.sampling, "seed": arena.seed, "engine": arena.engine, "prompts": len(arena.prompts),
           "created_at": arena.created_at.isoformat()}
    if results and arena.status == EvaluationStatus.SUCCEEDED:
        out["results"] = arena_results(arena).to_dict()
    return out


class ArenaCreateSerializer(serializers.Serializer):
    side_a = serializers.CharField(help_text="ckpt:<checkpoint id> or model:<registered model id>")
    side_b = serializers.CharField()
    prompts = serializers.ListField(child=jsonsafe.JSONField(), required=False, default=list,
                                    help_text="strings or message lists; or give dataset_version")
    dataset_version = serializers.IntegerField(required=False)
    split = serializers.ChoiceField(choices=["val", "train", "all"], required=False, default="val")
    limit = serializers.IntegerField(required=False, default=20, min_value=1, max_value=svc.MAX_PROMPTS)
    sampling = serializers.DictField(required=False, default=dict)
    seed = serializers.IntegerField(required=False, allow_null=True, default=None)
    title = serializers.CharField(required=False, allow_blank=True, default="")


class ArenaListApi(APIView):
    """The project's arenas (GET, viewers); start one (POST, engineers)."""

    serializer_class = ArenaCreateSerializer

    @extend_schema(operation_id="projects_monitor_arenas_list", responses=OpenApiTypes.OBJECT)
    def get(self, request, slug):
        access = project_access(request.user, slug)
        return Response({"arenas": [arena_dict(a) for a in Arena.objects.filter(project=access.project)[:100]]})

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
                prompts = svc.prompts_from_version(access.project, version, d["split"], d["limit"])
            arena = svc.arena_create(project=access.project, user=request.user, side_a=d["side_a"],
                                     side_b=d["side_b"], prompts=prompts, sampling=d["sampling"], seed=d["seed"],
                                     dataset_version=version, title=d["title"])
        except ApplicationError as exc:
            return application_error_response(exc)
        return Response(arena_dict(arena), status=status.HTTP_201_CREATED)


class ArenaApi(APIView):
    """One arena: its status, progress and (once generated) results."""

    @extend_schema(responses=OpenApiTypes.OBJECT)
    def get(self, request, slug, arena_id):
        access = project_access(request.user, slug)
        arena = get_object_or_404(Arena, pk=arena_id, project=access.project)
        return Response(arena_dict(arena, results=True))


class JudgementSerializer(serializers.Serializer):
    pair = serializers.IntegerField()
    choice = serializers.ChoiceField(choices=sorted(svc.CHOICES), help_text="what the reviewer saw: left / right")


class ArenaJudgementApi(APIView):
    """Record a reviewer's blind verdict on a pair; answers with the next pair they have not judged."""

    serializer_class = JudgementSerializer

    def post(self, request, slug, arena_id):
        access = project_access(request.user, slug, Role.REVIEWER)
        ser, err = _parse(JudgementSerializer, request.data)
        if err:
            return err
        pair = get_object_or_404(ArenaPair, pk=ser.validated_data["pair"], arena_id=arena_id,
                                 arena__project=access.project)
        try:
            svc.arena_judge(pair=pair, reviewer=request.user, choice=ser.validated_data["choice"])
        except ApplicationError as exc:
            return application_error_response(exc)
        nxt = next_pair_for(pair.arena, request.user)
        return Response({"saved": True, "next": nxt.pk if nxt else None}, status=status.HTTP_201_CREATED)


class ArenaExportSerializer(serializers.Serializer):
    name = serializers.CharField(required=False, allow_blank=True, default="")
    split = serializers.CharField(required=False, default="10%")
    agreed_only = serializers.BooleanField(required=False, default=False)


class ArenaExportApi(APIView):
    """Export the decisive judgements as a new preference dataset version (engineers)."""

    serializer_class = ArenaExportSerializer

    def post(self, request, slug, arena_id):
        access = project_access(request.user, slug, Role.ENGINEER)
        arena = get_object_or_404(Arena, pk=arena_id, project=access.project)
        ser, err = _parse(ArenaExportSerializer, request.data)
        if err:
            return err
        try:
            version = arena_export(arena=arena, user=request.user, **ser.validated_data)
        except ApplicationError as exc:
            return application_error_response(exc)
        return Response({"dataset": version.dataset.name, "dataset_id": version.dataset_id, "version": version.number,
                         "version_id": version.pk, "rows": version.row_count}, status=status.HTTP_201_CREATED)
