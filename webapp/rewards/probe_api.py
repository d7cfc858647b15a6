"""REST endpoints of reward probes (/api/projects/<slug>/rewards/<pk>/probes/ and .../versions/<n>/probes/)."""
from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from webapp.core import jsonsafe
from webapp.core.access import project_access
from webapp.core.models import Role
from webapp.core.services import ApplicationError
from webapp.rewards import probes, selectors
from webapp.rewards.api import error_response
from webapp.rewards.models import RewardProbe


class ProbeSerializer(serializers.ModelSerializer):
    class Meta:
        model = RewardProbe
        fields = ["id", "name", "prompt", "solution_str", "ground_truth", "data_source", "extra_info", "lo", "hi",
                  "created_at"]


class ProbeInputSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100)
    solution_str = serializers.CharField(allow_blank=True, trim_whitespace=False)
    ground_truth = jsonsafe.JSONField(required=False, default="")
    data_source = serializers.CharField(required=False, allow_blank=True, default="")
    extra_info = jsonsafe.JSONField(required=False, default=dict)
    prompt = serializers.CharField(required=False, allow_blank=True, default="")
    lo = serializers.FloatField(required=False, allow_null=True, default=None)
    hi = serializers.FloatField(required=False, allow_null=True, default=None)


class OverrideSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=2000)


class ScaleSerializer(serializers.Serializer):
    scale = serializers.ChoiceField(choices=["unit", "signed", "custom"])
    threshold = serializers.FloatField(required=False, allow_null=True, default=None)


class ProbeStatusSerializer(serializers.Serializer):
    version = serializers.IntegerField()
    state = serializers.CharField(help_text="pending, passed, failed or overridden")
    words = serializers.CharField()
    blocks_launch = serializers.BooleanField()
    rule = serializers.CharField()
    run = serializers.DictField(allow_null=True)


def status_body(version) -> dict:
    st = probes.probe_status(version)
    run = st.run
    body = None
    if run is not None:
        body = {"id": run.pk, "state": run.state, "trigger": run.trigger, "failed_count": run.failed_count,
                "error": run.error, "isolation": run.isolation, "duration_ms": run.duration_ms,
                "finished_at": run.finished_at, "results": run.results,
                "override": ({"reason": run.override_reason, "by": getattr(run.overridden_by, "username", None),
                              "at": run.overridden_at} if run.override_reason else None)}
    return {"version": version.number, "state": st.state, "words": st.words, "blocks_launch": st.blocks_launch,
            "rule": f"built-in probes must score {probes.low_rule(version.function).words}", "run": body}


class ProbeListApi(APIView):
    """The author's probes of a reward function; adding one runs the latest version's probes again."""

    serializer_class = ProbeSerializer

    @extend_schema(responses=ProbeSerializer(many=True), operation_id="projects_rewards_probes_list")
    def get(self, request, slug, pk):
        access = project_access(request.user, slug)
        function = selectors.reward_function_get(project=access.project, pk=pk)
        return Response(ProbeSerializer(probes.author_probes(function), many=True).data)

    @extend_schema(request=ProbeInputSerializer, responses={201: ProbeSerializer})
    def post(self, request, slug, pk):
        access = project_access(request.user, slug, Role.ENGINEER)
        function = selectors.reward_function_get(project=access.project, pk=pk)
        ser = ProbeInputSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        try:
            probe = probes.probe_create(function=function, user=request.user, **ser.validated_data)
        except ApplicationError as exc:
            return error_response(exc)
        return Response(ProbeSerializer(probe).data, status=status.HTTP_201_CREATED)


class ProbeDetailApi(APIView):
    serializer_class = ProbeSerializer

    def delete(self, request, slug, pk, probe_id):
        access = project_access(request.user, slug, Role.ENGINEER)
        function = selectors.reward_function_get(project=access.project, pk=pk)
        probe = function.probes.filter(pk=probe_id).first()
        if probe is None:
            return Response({"detail": f"{function.name} has no probe {probe_id}."}, status=status.HTTP_404_NOT_FOUND)
        probes.probe_delete(probe=probe, user=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ProbeScaleApi(APIView):
    """What "scores low" means for the built-in probes: unit (below 0.5), signed (at most 0) or custom."""

    serializer_class = ScaleSerializer

    @extend_schema(request=ScaleSerializer, responses={200: ScaleSerializer})
    def post(self, request, slug, pk):
        access = project_access(request.user, slug, Role.ENGINEER)
        function = selectors.reward_function_get(project=access.project, pk=pk)
        ser = ScaleSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        try:
            probes.probe_scale_set(function=function, user=request.user, **ser.validated_data)
        except ApplicationError as exc:
            return error_response(exc)
        return Response({"scale": function.probe_scale, "threshold": function.probe_threshold,
                         "rule": f"built-in probes must score {probes.low_rule(function).words}"})


class VersionProbesApi(APIView):
    """A version's probe verdicts (GET); POST runs them now in the sandbox and returns the verdicts."""

    serializer_class = ProbeStatusSerializer

    def _version(self, request, slug, pk, number, role=Role.VIEWER):
        access = project_access(request.user, slug, role)
        function = selectors.reward_function_get(project=access.project, pk=pk)
        return selectors.reward_version_get(function=function, number=number)

    @extend_schema(responses=ProbeStatusSerializer, operation_id="projects_rewards_versions_probes_retrieve")
    def get(self, request, slug, pk, number):
        return Response(status_body(self._version(request, slug, pk, number)))

    @extend_schema(request=None, responses=ProbeStatusSerializer, operation_id="projects_rewards_versions_probes_run")
    def post(self, request, slug, pk, number):
        version = self._version(request, slug, pk, number, Role.ENGINEER)
        probes.probe_run_now(version=version, user=request.user)
        return Response(status_body(version))


class VersionProbeOverrideApi(APIView):
    """Let a version with failing probes launch; the reason is audited and shown next to the probes."""

    serializer_class = OverrideSerializer

    @extend_schema(request=OverrideSerializer, responses=ProbeStatusSerializer)
    def post(self, request, slug, pk, number):
        access = project_access(request.user, slug, Role.ENGINEER)
        function = selectors.reward_function_get(project=access.project, pk=pk)
        version = selectors.reward_version_get(function=function, number=number)
        ser = OverrideSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        try:
            probes.probe_override(version=version, user=request.user, reason=ser.validated_data["reason"])
        except ApplicationError as exc:
            return error_response(exc)
        return Response(status_body(version))
