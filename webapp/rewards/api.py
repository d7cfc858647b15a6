"""REST endpoints for reward functions, versions, checks and test-runs (/api/projects/<slug>/rewards/)."""
from __future__ import annotations

import json

from django.urls import reverse
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from webapp.core import jsonsafe
from webapp.core.access import project_access
from webapp.core.models import Role
from webapp.core.services import ApplicationError
from webapp.rewards import scoring, selectors, services
from webapp.rewards.models import RewardFunction, RewardTestRun, RewardVersion
from webapp.rewards.samples import MAX_SAMPLES


def error_response(exc: ApplicationError) -> Response:
    body = {"detail": exc.message, "field": exc.field}
    if isinstance(exc, services.SourceError):
        body.update(lineno=exc.lineno, problems=exc.problems)
    return Response(body, status=status.HTTP_400_BAD_REQUEST)


class RewardVersionSerializer(serializers.ModelSerializer):
    author = serializers.CharField(source="author.username", default=None)
    probes = serializers.SerializerMethodField(help_text="pending, passed, failed or overridden (current probes)")

    class Meta:
        model = RewardVersion
        fields = ["id", "number", "sha256", "entry_point", "message", "author", "created_at", "probes"]

    def get_probes(self, obj) -> str:
        from webapp.rewards.probes import probe_status

        return probe_status(obj).state


class RewardVersionSourceSerializer(RewardVersionSerializer):
    class Meta(RewardVersionSerializer.Meta):
        fields = [*RewardVersionSerializer.Meta.fields, "source"]


class RewardFunctionSerializer(serializers.ModelSerializer):
    latest_version = RewardVersionSerializer(read_only=True)

    class Meta:
        model = RewardFunction
        fields = ["id", "name", "description", "created_at", "updated_at", "latest_version"]


class TemplateSerializer(serializers.Serializer):
    name = serializers.CharField()
    title = serializers.CharField()
    description = serializers.CharField()
    source = serializers.CharField()


class RewardModelSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    path = serializers.CharField()
    hub_id = serializers.CharField()
    description = serializers.CharField()
    source_job = serializers.IntegerField(source="source_job_id", allow_null=True)
    created_at = serializers.DateTimeField()


class RewardCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100)
    description = serializers.CharField(required=False, allow_blank=True, default="")
    source = serializers.CharField(trim_whitespace=False)
    entry_point = serializers.CharField(required=False, default="compute_score")
    message = serializers.CharField(required=False, allow_blank=True, default="", max_length=300)


class VersionCreateSerializer(serializers.Serializer):
    source = serializers.CharField(trim_whitespace=False)
    entry_point = serializers.CharField(required=False, allow_blank=True, default="")
    message = serializers.CharField(required=False, allow_blank=True, default="", max_length=300)


class SourceCheckSerializer(serializers.Serializer):
    source = serializers.CharField(trim_whitespace=False, allow_blank=True)
    entry_point = serializers.CharField(required=False, default="compute_score")


class RewardTestRunInputSerializer(serializers.Serializer):

    version = serializers.IntegerField(required=False, min_value=1,
                                       help_text="Version number to run (default: the latest); ignored with source.")
    source = serializers.CharField(required=False, trim_whitespace=False,
                                   help_text="Unsaved source to run instead of a saved version.")
    entry_point = serializers.CharField(required=False, allow_blank=True, default="")
    dataset_version = serializers.IntegerField(required=False, allow_null=True, default=None,
                                               help_text="Id of a ready dataset version of this project.")
    split = serializers.ChoiceField(choices=["", "train", "val"], required=False, default="")
    limit = serializers.IntegerField(required=False, min_value=1, max_value=MAX_SAMPLES, allow_null=True,
                                     default=None)
    responses = jsonsafe.JSONField(required=False, default=None,
                                      help_text="Text (one response per line) or a JSON list of strings/objects.")
    rollout_run = serializers.IntegerField(required=False, allow_null=True, default=None,
                                           help_text="Score the stored rollouts of this job (samples/rollout).")
    rollout_step = serializers.IntegerField(required=False, allow_null=True, default=None, min_value=0,
                                            help_text="The step of the rollouts (default: the latest).")
    sample_model = serializers.IntegerField(required=False, allow_null=True, default=None,
                                            help_text="Score responses this registered causal LM gives to the "
                                                      "prompts of dataset_version.")


class RewardTestRunSerializer(serializers.ModelSerializer):

    function = serializers.IntegerField(source="function_id")
    version = serializers.IntegerField(source="version.number", default=None)
    dataset_version = serializers.IntegerField(source="dataset_version_id", default=None)
    created_by = serializers.CharField(source="created_by.username", default=None)
    rollout_run = serializers.IntegerField(source="rollout_job_id", default=None)
    sample_model = serializers.IntegerField(source="sample_model_id", default=None)
    state_words = serializers.CharField(read_only=True, help_text="'succeeded' only when every sample got a "
                                                                  "score; else 'N errors', 'failed', ...")
    error_count = serializers.IntegerField(read_only=True)
    is_reference_check = serializers.BooleanField(read_only=True, help_text="A prompt set without responses: "
                                                  "each ground truth was scored against itself.")
    url = serializers.SerializerMethodField()
    results_url = serializers.SerializerMethodField()
    api_url = serializers.SerializerMethodField()

    class Meta:
        model = RewardTestRun
        fields = ["id", "function", "version", "sha256", "entry_point", "dataset_version", "split", "mode",
                  "origin", "rollout_run", "rollout_step", "sample_model",
                  "limit", "sample_count", "done_count", "state", "state_words", "error_count", "is_reference_check",
                  "isolation", "summary", "error", "error_lineno",
                  "error_traceback",
                  "duration_ms", "created_by", "created_at", "url", "results_url", "api_url",
                  "results"]

    def _url(self, obj) -> str:
        return reverse("rewards:test-run", kwargs={"slug": obj.function.project.slug, "pk": obj.pk})

    def get_url(self, obj) -> str:
        return self._url(obj)

    def get_results_url(self, obj) -> str:
        return self._url(obj) + "?fragment=1"

    def get_api_url(self, obj) -> str:
        return reverse("rewards-api:test-run-detail", kwargs={"slug": obj.function.project.slug, "pk": obj.pk})


class RewardListApi(APIView):
    serializer_class = RewardFunctionSerializer

    @extend_schema(responses=RewardFunctionSerializer(many=True), operation_id="projects_rewards_list")
    def get(self, request, slug):
        access = project_access(request.user, slug)
        functions = selectors.reward_function_list(project=access.project)
        return Response(RewardFunctionSerializer(functions, many=True).data)

    @extend_schema(request=RewardCreateSerializer, responses={201: RewardFunctionSerializer})
    def post(self, request, slug):
        access = project_access(request.user, slug, Role.ENGINEER)
        ser = RewardCreateSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        try:
            function = services.reward_function_create(project=access.project, user=request.user,
                                                       **ser.validated_data)
        except ApplicationError as exc:
            return error_response(exc)
        return Response(RewardFunctionSerializer(function).data, status=status.HTTP_201_CREATED)


class RewardDetailApi(APIView):
    serializer_class = RewardFunctionSerializer

    def get(self, request, slug, pk):
        access = project_access(request.user, slug)
        function = selectors.reward_function_get(project=access.project, pk=pk)
        data = RewardFunctionSerializer(function).data
        data["versions"] = RewardVersionSerializer(selectors.reward_versions(function=function), many=True).data
        return Response(data)


class RewardVersionListApi(APIView):
    serializer_class = RewardVersionSerializer

    @extend_schema(responses=RewardVersionSerializer(many=True), operation_id="projects_rewards_versions_list")
    def get(self, request, slug, pk):
        access = project_access(request.user, slug)
        function = selectors.reward_function_get(project=access.project, pk=pk)
        return Response(RewardVersionSerializer(selectors.reward_versions(function=function), many=True).data)

    @extend_schema(request=VersionCreateSerializer, responses={200: RewardVersionSerializer,
                                                              201: RewardVersionSerializer})
    def post(self, request, slug, pk):
        """Save a new version; 201 when created, 200 with created=false when identical to the latest."""
        access = project_access(request.user, slug, Role.ENGINEER)
        function = selectors.reward_function_get(project=access.project, pk=pk)
        ser = VersionCreateSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        data = ser.validated_data
        try:
            outcome = services.reward_version_save(function=function, user=request.user, source=data["source"],
                                                   message=data["message"], entry_point=data["entry_point"] or None)
        except ApplicationError as exc:
            return error_response(exc)
        body = RewardVersionSerializer(outcome.version).data | {
            "created": outcome.created, "detail": outcome.message, "warnings": outcome.warnings}
        return Response(body, status=status.HTTP_201_CREATED if outcome.created else status.HTTP_200_OK)


class RewardVersionDetailApi(APIView):
    serializer_class = RewardVersionSourceSerializer

    def get(self, request, slug, pk, number):
        access = project_access(request.user, slug)
        function = selectors.reward_function_get(project=access.project, pk=pk)
        version = selectors.reward_version_get(function=function, number=number)
        return Response(RewardVersionSourceSerializer(version).data)


class SourceCheckApi(APIView):
    """Static syntax and signature check (nothing is executed); the editor's Check button."""

    serializer_class = SourceCheckSerializer

    def post(self, request, slug):
        project_access(request.user, slug, Role.ENGINEER)
        ser = SourceCheckSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        entry_point = ser.validated_data["entry_point"]
        if not entry_point.isidentifier():
            return Response({"detail": f"'{entry_point}' is not a Python function name.", "field": "entry_point"},
                            status=status.HTTP_400_BAD_REQUEST)
        problems = services.source_problems(ser.validated_data["source"], entry_point)
        return Response({"ok": not any(p["severity"] == "error" for p in problems), "problems": problems})


class TemplateListApi(APIView):
    serializer_class = TemplateSerializer

    @extend_schema(responses=TemplateSerializer(many=True))
    def get(self, request, slug):
        project_access(request.user, slug)
        return Response(TemplateSerializer(selectors.reward_templates(), many=True).data)


class RewardModelListApi(APIView):
    """The project's reward models (registry.ModelEntry of kind reward_model); register them under /jobs/models/."""

    serializer_class = RewardModelSerializer

    @extend_schema(responses=RewardModelSerializer(many=True))
    def get(self, request, slug):
        access = project_access(request.user, slug)
        return Response(RewardModelSerializer(selectors.reward_models(project=access.project), many=True).data)


class RewardTestRunCreateApi(APIView):
    """Queue a test-run of a version (or unsaved `source`) on dataset rows or pasted responses: a worker scores
    it in the sandbox; follow it at `url` (the test-run's GET) until `state` is succeeded or failed."""

    serializer_class = RewardTestRunInputSerializer

    @extend_schema(request=RewardTestRunInputSerializer, responses={202: RewardTestRunSerializer})
    def post(self, request, slug, pk):
        access = project_access(request.user, slug, Role.ENGINEER)
        function = selectors.reward_function_get(project=access.project, pk=pk)
        ser = RewardTestRunInputSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        data = ser.validated_data
        responses = data.get("responses")
        if responses is not None and not isinstance(responses, str):
            responses = json.dumps(responses)  # a JSON list: parsed like pasted JSON
        dataset_version = None
        if data.get("dataset_version") is not None:
            dataset_version = selectors.dataset_version_get(project=access.project, pk=data["dataset_version"])
            if dataset_version is None:
                return Response({"detail": f"No dataset version {data['dataset_version']} in this project.",
                                 "field": "dataset_version"}, status=status.HTTP_400_BAD_REQUEST)
        version = None
        if data.get("version") and not data.get("source"):
            version = function.versions.filter(number=data["version"]).first()
            if version is None:
                return Response({"detail": f"{function.name} has no version {data['version']}.", "field": "version"},
                                status=status.HTTP_400_BAD_REQUEST)
        try:
            run = scoring.reward_test_run_create(function=function, user=request.user, version=version,
                                                 source=data.get("source"), entry_point=data["entry_point"] or None,
                                                 dataset_version=dataset_version, split=data["split"],
                                                 limit=data["limit"] or 20,
                                                 responses_text=responses or "", rollout_job_id=data["rollout_run"],
                                                 rollout_step=data["rollout_step"],
                                                 sample_model_id=data["sample_model"])
        except ApplicationError as exc:
            return error_response(exc)
        return Response(RewardTestRunSerializer(run).data, status=status.HTTP_202_ACCEPTED)


class RewardTestRunDetailApi(APIView):
    serializer_class = RewardTestRunSerializer

    def get(self, request, slug, pk):
        access = project_access(request.user, slug)
        return Response(RewardTestRunSerializer(selectors.reward_test_run_get(project=access.project, pk=pk)).data)
