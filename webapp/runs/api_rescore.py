"""Re-score API: /api/projects/<slug>/jobs/<pk>/rescores/ (list, ask) and .../rescores/<rid>/ (progress, samples)."""
from __future__ import annotations

from django.core.paginator import Paginator
from django.http import Http404
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from webapp.core import jsonsafe
from webapp.core.access import project_access
from webapp.core.models import Role
from webapp.core.services import ApplicationError
from webapp.rewards.models import RewardVersion
from webapp.runs import selectors
from webapp.runs.api import error_response
from webapp.runs.models import Rescore, RescoreSample
from webapp.runs.services import rescore as service

PAGE = 200


class RescoreSerializer(serializers.ModelSerializer):
    reward_version = serializers.SerializerMethodField()
    changed_share = serializers.FloatField(read_only=True)

    class Meta:
        model = Rescore
        fields = ["id", "job", "reward_version", "component", "steps", "state", "sample_count", "done_count",
                  "changed_count", "changed_share", "summary", "error", "created_at", "started_at", "finished_at"]

    def get_reward_version(self, obj) -> dict:
        v = obj.reward_version
        return {"id": v.pk, "function": v.function.name, "number": v.number}


class RescoreSampleSerializer(serializers.ModelSerializer):
    class Meta:
        model = RescoreSample
        fields = ["step", "row", "uid", "prompt", "response", "old_score", "new_score", "delta", "changed", "error",
                  "log"]


class RescoreCreateSerializer(serializers.Serializer):
    version = serializers.IntegerField()
    steps = jsonsafe.JSONField(required=False, default=None)  # [3, 5] or "3, 5-8"; absent = every stored step
    component = serializers.CharField(required=False, allow_blank=True, allow_null=True, default=None)


def _job(request, slug, pk, role=Role.VIEWER):
    access = project_access(request.user, slug, role)
    job = selectors.job_get(project=access.project, pk=pk)
    if job is None:
        raise Http404("No such job")
    return access, job


class RescoreListApi(APIView):
    serializer_class = RescoreSerializer

    def get(self, request, slug, pk):
        _, job = _job(request, slug, pk)
        return Response(RescoreSerializer(selectors.job_rescores(job), many=True).data)

    def post(self, request, slug, pk):
        access, job = _job(request, slug, pk, Role.ENGINEER)
        ser = RescoreCreateSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        data = ser.validated_data
        version = RewardVersion.objects.filter(pk=data["version"], function__project=access.project).first()
        try:
            steps = data["steps"]
            rescore = service.rescore_create(job=job, user=request.user, version=version,
                                             steps=service.parse_steps(steps if isinstance(steps, (list, str))
                                                                       or steps is None else str(steps)),
                                             component=data["component"])
        except ApplicationError as exc:
            return error_response(exc)
        return Response(RescoreSerializer(rescore).data, status=status.HTTP_202_ACCEPTED)


class RescoreDetailApi(APIView):
    """The re-score with one page of its samples (?show=changed|unchanged|errors, ?sort=-delta, ?step=, ?page=)."""

    serializer_class = RescoreSerializer

    def get(self, request, slug, pk, rid):
        access, job = _job(request, slug, pk)
        rescore = selectors.rescore_get(project=access.project, pk=rid)
        if rescore is None or rescore.job_id != job.pk:
            raise Http404("No such re-score")
        sort = request.query_params.get("sort", "step")
        show = request.query_params.get("show", "all")
        if sort not in selectors.RESCORE_SORTS or show not in selectors.RESCORE_SHOWS:
            return Response({"detail": f"sort is one of {', '.join(selectors.RESCORE_SORTS)}; show is one of "
                                       f"{', '.join(selectors.RESCORE_SHOWS)}."}, status=status.HTTP_400_BAD_REQUEST)
        step = request.query_params.get("step")
        try:
            step = int(step) if step not in (None, "") else None
        except ValueError:
            return Response({"detail": "step must be a number.", "field": "step"}, status=status.HTTP_400_BAD_REQUEST)
        page = Paginator(selectors.rescore_samples(rescore, sort=sort, show=show, step=step,
                                                   text=request.query_params.get("q", "")[:200]), PAGE).get_page(
            request.query_params.get("page"))
        return Response({**RescoreSerializer(rescore).data, "page": page.number, "pages": page.paginator.num_pages,
                         "count": page.paginator.count, "samples": RescoreSampleSerializer(page, many=True).data})
