"""Zero-signal dry runs under /api/projects/<slug>/jobs/zero-signal/ (the services of the Quality tab)."""
from __future__ import annotations

from django.http import Http404
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from webapp.core.access import project_access
from webapp.core.models import Role
from webapp.core.services import ApplicationError
from webapp.datasets import selectors as dataset_selectors
from webapp.runs.models import ZeroSignalRun
from webapp.runs.services import zero_signal as zs


def _error(exc: ApplicationError) -> Response:
    return Response({"detail": exc.message, "field": exc.field}, status=status.HTTP_400_BAD_REQUEST)


class DryRunRequestSerializer(serializers.Serializer):
    dataset = serializers.CharField(help_text="dataset name or id (a verifiable prompt set)")
    version = serializers.IntegerField(required=False, allow_null=True, help_text="version number (default latest)")
    model = serializers.IntegerField(required=False, allow_null=True, help_text="a registered model's id")
    checkpoint = serializers.IntegerField(required=False, allow_null=True, help_text="or a checkpoint's id")
    reward_version = serializers.IntegerField(help_text="a reward function version's id")
    group_size = serializers.IntegerField(required=False, allow_null=True, help_text="samples per prompt (default 4)")
    max_response_length = serializers.IntegerField(required=False, allow_null=True,
                                                   help_text="tokens per sample at most (default 64)")
    max_prompts = serializers.IntegerField(required=False, allow_null=True)
    temperature = serializers.FloatField(required=False, allow_null=True)
    seed = serializers.IntegerField(required=False, allow_null=True)

    def validate(self, attrs):
        unknown = sorted(set(self.initial_data) - set(self.fields))
        if unknown:  # e.g. an old client's "n": refused, never silently the default
            raise serializers.ValidationError({unknown[0]: [f"unknown field; the fields are {', '.join(self.fields)}"]})
        return attrs


def _run(project, pk) -> ZeroSignalRun:
    run = ZeroSignalRun.objects.filter(pk=pk, version__dataset__project=project).select_related(
        "version__dataset", "model", "checkpoint", "reward_version__function", "derived").first()
    if run is None:
        raise Http404("No such dry run.")
    return run


def _batch(request) -> int | None:
    try:
        return max(1, int(request.query_params.get("batch")))
    except (TypeError, ValueError):
        return None


class ZeroSignalListApi(APIView):
    """GET: the project's dry runs (latest first); POST: queue a dry run (202)."""

    serializer_class = DryRunRequestSerializer

    def get(self, request, slug):
        access = project_access(request.user, slug)
        runs = ZeroSignalRun.objects.filter(version__dataset__project=access.project).select_related(
            "version__dataset", "model", "checkpoint", "reward_version__function", "derived")[:50]
        return Response([zs.run_payload(r) for r in runs])

    def post(self, request, slug):
        access = project_access(request.user, slug, Role.ENGINEER)
        ser = DryRunRequestSerializer(data=request.data)
        if not ser.is_valid():
            field, errors = next(iter(ser.errors.items()))
            return Response({"detail": f"{field}: {errors[0]}", "field": field}, status=status.HTTP_400_BAD_REQUEST)
        data = ser.validated_data
        try:
            version = dataset_selectors.version_get(project=access.project, dataset_id=data["dataset"],
                                                    number=data.get("version"))
        except Http404:
            return Response({"detail": "No such ready dataset version.", "field": "dataset"},
                            status=status.HTTP_400_BAD_REQUEST)
        try:
            run = zs.dry_run_request(version=version, user=request.user, model_id=data.get("model"),
                                     checkpoint_id=data.get("checkpoint"), reward_version_id=data["reward_version"],
                                     params={k: data.get(k) for k in zs.PARAMS})
        except ApplicationError as exc:
            return _error(exc)
        return Response(zs.run_payload(run), status=status.HTTP_202_ACCEPTED)


class ZeroSignalDetailApi(APIView):
    """GET: a dry run's status, progress and result (?batch=N for the effective batch size)."""

    def get(self, request, slug, pk):
        access = project_access(request.user, slug)
        return Response(zs.run_payload(_run(access.project, pk), _batch(request)))


class ZeroSignalDeriveApi(APIView):
    """POST: a new version of the prompt set without the dry run's tied prompts (201)."""

    def post(self, request, slug, pk):
        access = project_access(request.user, slug, Role.ENGINEER)
        run = _run(access.project, pk)
        try:
            version = zs.dry_run_derive(run=run, user=request.user)
        except ApplicationError as exc:
            return _error(exc)
        return Response({"dataset": version.dataset_id, "version": version.number, "id": version.pk,
                         "row_count": version.row_count, "lineage": version.lineage},
                        status=status.HTTP_201_CREATED)
