"""Jobs and models API under /api/projects/<slug>/jobs/ (same services as the pages and the CLI)."""
from __future__ import annotations

from django.http import Http404
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from training import hparams as cfg
from training.presets import DEFAULT_PRESET
from training.reward_mix import SHAPINGS
from webapp.core import jsonsafe
from webapp.core.access import project_access
from webapp.core.models import Role
from webapp.core.services import ApplicationError
from webapp.registry import services as registry
from webapp.registry.models import ModelEntry, ModelKind
from webapp.runs import selectors
from webapp.runs.models import Job, JobAttempt, JobKind
from webapp.runs.services import launch
from webapp.runs.services import plan as plan_service
from webapp.runs.services.inputs import dry_run, plan_inputs


def error_response(exc: ApplicationError) -> Response:
    body = {"detail": exc.message, "field": exc.field}
    if getattr(exc, "errors", None):
        body["errors"] = exc.errors
    if getattr(exc, "warnings", None):
        body["warnings"] = exc.warnings
    return Response(body, status=status.HTTP_400_BAD_REQUEST)


class AttemptSerializer(serializers.ModelSerializer):
    class Meta:
        model = JobAttempt
        fields = ["number", "reason", "state", "resume_from", "supervisor_pid", "host", "started_at", "ended_at",
                  "returncode"]


class JobSerializer(serializers.ModelSerializer):
    attempts = AttemptSerializer(many=True, read_only=True)
    progress = serializers.SerializerMethodField()
    total_steps = serializers.SerializerMethodField()
    reward_versions = serializers.PrimaryKeyRelatedField(many=True, read_only=True)

    class Meta:
        model = Job
        fields = ["id", "name", "kind", "backend", "state", "preset", "queue", "config", "reward_spec",
                  "reward_versions", "data_manifest", "dataset_version", "base_model", "teacher_model", "parent",
                  "resume_checkpoint", "run_dir", "attempt_count", "cancel_requested", "last_step", "total_steps",
                  "progress", "error", "created_at", "started_at", "finished_at", "heartbeat_at", "attempts",
                  "attached_dir", "attached"]

    def get_progress(self, job: Job) -> float | None:
        return selectors.job_progress(job)

    def get_total_steps(self, job: Job) -> int | None:
        return (job.config or {}).get("total_steps")


class JobCreateSerializer(serializers.Serializer):
    name = serializers.CharField(required=False, allow_blank=True, default="")
    kind = serializers.ChoiceField(choices=JobKind.values)
    backend = serializers.ChoiceField(choices=["local", "verl"], default="local")
    preset = serializers.ChoiceField(choices=list(cfg.PRESETS), default=DEFAULT_PRESET)
    dataset = serializers.CharField(required=False, allow_blank=True,
                                    help_text="NAME[:VERSION] or a dataset version id; default: newest fitting one.")
    include_unreviewed = serializers.BooleanField(default=False)
    model = serializers.CharField(required=False, allow_blank=True, help_text="Registered model name or id.")
    teacher = serializers.CharField(required=False, allow_blank=True, help_text="Distillation teacher name or id.")
    reward = serializers.ListField(child=serializers.CharField(), required=False,
                                   help_text="Reward function NAME[:VERSION] or reward model names (weight 1).")
    reward_spec = jsonsafe.JSONField(required=False, help_text='{"shaping", "components": [...]} (wins over reward)')
    shaping = serializers.ChoiceField(choices=SHAPINGS, required=False)
    set = serializers.DictField(required=False, default=dict, help_text="Setting overrides, e.g. {\"lr\": 1e-5}.")
    dry_run = serializers.BooleanField(default=False)
    launch_token = serializers.UUIDField(required=False, help_text="Launch once: the same token again answers 409 "
                                                                   "with the job it made, and launches nothing.")


class JobListApi(APIView):
    serializer_class = JobCreateSerializer

    def get(self, request, slug):
        access = project_access(request.user, slug)
        jobs = selectors.job_list(project=access.project).prefetch_related("attempts", "reward_versions")
        state = request.query_params.get("state")
        if state:
            jobs = jobs.filter(state=state)
        return Response(JobSerializer(jobs[:200], many=True).data)

    def post(self, request, slug):
        access = project_access(request.user, slug, Role.ENGINEER)
        ser = JobCreateSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        data = ser.validated_data
        try:
            plan = plan_inputs(access.project, data)
            if data["dry_run"]:
                return Response(dry_run(plan))
            job = plan_service.job_create(plan=plan, user=request.user, name=data.get("name") or None,
                                          launch_token=data.get("launch_token"))
        except plan_service.AlreadyLaunched as exc:
            return Response({"detail": exc.message, "job": JobSerializer(exc.job).data},
                            status=status.HTTP_409_CONFLICT)
        except ApplicationError as exc:
            return error_response(exc)
        return Response(JobSerializer(job).data, status=status.HTTP_201_CREATED)


def _job(request, slug, pk, role=Role.VIEWER) -> tuple:
    access = project_access(request.user, slug, role)
    job = selectors.job_get(project=access.project, pk=pk)
    if job is None:
        raise Http404("No such job")
    return access, job


class JobDetailApi(APIView):
    serializer_class = JobSerializer

    def get(self, request, slug, pk):
        _, job = _job(request, slug, pk)
        return Response(JobSerializer(job).data)


class JobCancelApi(APIView):
    serializer_class = JobSerializer

    def post(self, request, slug, pk):
        _, job = _job(request, slug, pk, Role.ENGINEER)
        try:
            job = launch.job_cancel(job=job, user=request.user)
        except ApplicationError as exc:
            return error_response(exc)
        return Response(JobSerializer(job).data)


class ResumeSerializer(serializers.Serializer):
    checkpoint_step = serializers.IntegerField(required=False, min_value=0)
    set = serializers.DictField(required=False, default=dict)


class JobResumeApi(APIView):
    serializer_class = ResumeSerializer

    def post(self, request, slug, pk):
        _, job = _job(request, slug, pk, Role.ENGINEER)
        ser = ResumeSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        checkpoint = None
        if "checkpoint_step" in ser.validated_data:
            checkpoint = job.checkpoints.filter(step=ser.validated_data["checkpoint_step"]).first()
            if checkpoint is None:
                return Response({"detail": f"No checkpoint at step {ser.validated_data['checkpoint_step']}.",
                                 "field": "checkpoint_step"}, status=status.HTTP_400_BAD_REQUEST)
        try:
            attempt = launch.job_resume(job=job, user=request.user, checkpoint=checkpoint,
                                        hp_overrides=ser.validated_data.get("set") or None)
        except ApplicationError as exc:
            return error_response(exc)
        return Response(AttemptSerializer(attempt).data, status=status.HTTP_202_ACCEPTED)


class JobLogApi(APIView):
    def get(self, request, slug, pk):
        _, job = _job(request, slug, pk)
        return Response(selectors.log_tail(job))


class ModelSerializer(serializers.ModelSerializer):
    class Meta:
        model = ModelEntry
        fields = ["id", "name", "kind", "path", "hub_id", "description", "num_parameters", "source_job", "created_at"]
        read_only_fields = ["num_parameters", "source_job", "created_at"]
        extra_kwargs = {"kind": {"required": False, "allow_blank": True}, "path": {"required": False},
                        "hub_id": {"required": False}, "description": {"required": False},
                        "name": {"validators": []}}


class ModelListApi(APIView):
    serializer_class = ModelSerializer

    def get(self, request, slug):
        access = project_access(request.user, slug)
        return Response(ModelSerializer(selectors.model_list(project=access.project), many=True).data)

    def post(self, request, slug):
        access = project_access(request.user, slug, Role.ENGINEER)
        ser = ModelSerializer(data=request.data)
        ser.is_valid(raise_exception=True)
        d = ser.validated_data
        kind = d.get("kind") or ""
        if kind and kind not in ModelKind.values:
            return Response({"detail": f"Unknown kind {kind!r}.", "field": "kind"}, status=400)
        try:
            entry = registry.model_register(project=access.project, user=request.user, name=d["name"],
                                            path=d.get("path", ""), hub_id=d.get("hub_id", ""), kind=kind,
                                            description=d.get("description", ""))
        except ApplicationError as exc:
            return error_response(exc)
        return Response(ModelSerializer(entry).data, status=status.HTTP_201_CREATED)
