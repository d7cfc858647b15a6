"""API: attach a run the app did not launch (VERL or TRL output folder), or stop following one."""
from __future__ import annotations

from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from webapp.core.access import project_access
from webapp.core.models import Role
from webapp.core.services import ApplicationError
from webapp.datasets.models import DatasetVersion
from webapp.registry.models import ModelEntry
from webapp.rewards.models import RewardVersion
from webapp.runs.api import JobSerializer, _job, error_response
from webapp.runs.services import attach


class AttachSerializer(serializers.Serializer):
    path = serializers.CharField(max_length=500)
    name = serializers.CharField(max_length=200, required=False, default="", allow_blank=True)
    base_model = serializers.IntegerField(required=False, allow_null=True, default=None)
    dataset_version = serializers.IntegerField(required=False, allow_null=True, default=None)
    reward_version = serializers.IntegerField(required=False, allow_null=True, default=None)
    preset = serializers.CharField(max_length=64, required=False, default="", allow_blank=True)


def _own(model, pk, field: str, **scope):
    if pk is None:
        return None
    obj = model.objects.filter(pk=pk, **scope).first()
    if obj is None:
        raise ApplicationError(f"There is no {field.replace('_', ' ')} {pk} in this project.", field=field)
    return obj


class AttachApi(APIView):
    serializer_class = AttachSerializer

    def post(self, request, slug):
        access = project_access(request.user, slug, Role.ENGINEER)
        ser = AttachSerializer(data=request.data)
        if not ser.is_valid():
            return Response({"detail": ser.errors}, status=status.HTTP_400_BAD_REQUEST)
        d, project = ser.validated_data, access.project
        try:
            job = attach.attach_run(
                project=project, user=request.user, path=d["path"], name=d["name"], preset=d["preset"],
                base_model=_own(ModelEntry, d["base_model"], "base_model", project=project),
                dataset_version=_own(DatasetVersion, d["dataset_version"], "dataset_version",
                                     dataset__project=project),
                reward_version=_own(RewardVersion, d["reward_version"], "reward_version", function__project=project))
        except ApplicationError as exc:
            return error_response(exc)
        return Response(JobSerializer(job).data, status=status.HTTP_201_CREATED)


class AttachStopApi(APIView):
    serializer_class = JobSerializer

    def post(self, request, slug, pk):
        _, job = _job(request, slug, pk, Role.ENGINEER)
        try:
            job = attach.stop_following(job=job, user=request.user)
        except ApplicationError as exc:
            return error_response(exc)
        return Response(JobSerializer(job).data)
