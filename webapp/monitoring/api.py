"""Monitoring API under /api/projects/<slug>/monitor/: metric series, live updates, checkpoints, rollback."""
from __future__ import annotations

from django.http import Http404
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from training.winrate import WinRateSummary
from webapp.core.access import project_access
from webapp.core.api import application_error_response
from webapp.core.models import Role
from webapp.core.params import parse_ids
from webapp.core.services import ApplicationError
from webapp.monitoring import charts, compare, live, selectors, services
from webapp.runs.models import Job

CHECKPOINT_METRICS = ["critic/score/mean", "actor/kl_loss"]


def _job(request, slug: str, job_id: int, role: str = Role.VIEWER):
    access = project_access(request.user, slug, role)
    return access, get_object_or_404(Job, pk=job_id, project=access.project)


def _csv(value: str | None) -> list[str]:
    return [v for v in (value or "").split(",") if v.strip()]


class SeriesQuerySerializer(serializers.Serializer):
    names = serializers.CharField(required=False, allow_blank=True, help_text="comma-separated metric names")
    lower = serializers.CharField(required=False, allow_blank=True, help_text="band lower edges (bucket minima)")
    upper = serializers.CharField(required=False, allow_blank=True, help_text="band upper edges (bucket maxima)")
    since_step = serializers.IntegerField(required=False, help_text="only points after this step (live polling)")
    x0 = serializers.FloatField(required=False, help_text="visible step range start (zoom)")
    x1 = serializers.FloatField(required=False)
    t0 = serializers.FloatField(required=False, help_text="visible wall-time range start (unix s)")
    t1 = serializers.FloatField(required=False)
    points = serializers.IntegerField(required=False, min_value=10, max_value=selectors.MAX_POINTS,
                                      default=selectors.DEFAULT_POINTS, help_text="chart width in points")
    raw = serializers.BooleanField(required=False, default=False, help_text="every point, no downsampling")
    since_event = serializers.IntegerField(required=False)

    def validate(self, attrs):
        if ("x0" in attrs) != ("x1" in attrs) or ("t0" in attrs) != ("t1" in attrs):
            raise serializers.ValidationError("Give both ends of a range (x0 and x1, or t0 and t1).")
        for a, b in (("x0", "x1"), ("t0", "t1")):
            if a in attrs and attrs[a] > attrs[b]:
                raise serializers.ValidationError(f"{a} must not be after {b}.")
        return attrs

    def query(self) -> selectors.SeriesQuery:
        d = self.validated_data
        return selectors.SeriesQuery(
            names=_csv(d.get("names")), lower=_csv(d.get("lower")), upper=_csv(d.get("upper")),
            since_step=d.get("since_step"),
            step_range=(d["x0"], d["x1"]) if "x0" in d else None,
            time_range=(d["t0"], d["t1"]) if "t0" in d else None,
            max_points=d["points"], raw=d["raw"])


def _parse(serializer_cls, data):
    ser = serializer_cls(data=data)
    if not ser.is_valid():
        first = next(iter(ser.errors.values()))
        detail = first[0] if isinstance(first, list) else first
        return None, Response({"detail": str(detail), "errors": ser.errors}, status=status.HTTP_400_BAD_REQUEST)
    return ser, None


class MetricsApi(APIView):
    """Downsampled (spike-keeping) metric series of a job; `raw=1` returns every point."""

    serializer_class = SeriesQuerySerializer

    @extend_schema(parameters=[SeriesQuerySerializer], responses=OpenApiTypes.OBJECT)
    def get(self, request, slug, job_id):
        _access, job = _job(request, slug, job_id)
        ser, err = _parse(SeriesQuerySerializer, request.query_params)
        if err:
            return err
        query = ser.query()
        if not (query.names or query.lower or query.upper):
            return Response({"detail": "Name at least one metric (names=...)."}, status=status.HTTP_400_BAD_REQUEST)
        return Response(selectors.metric_series(job, query))


class LiveApi(APIView):
    """One poll for the job page: new points since a step, new events, state and last step."""

    serializer_class = SeriesQuerySerializer

    @extend_schema(parameters=[SeriesQuerySerializer], responses=OpenApiTypes.OBJECT)
    def get(self, request, slug, job_id):
        access = project_access(request.user, slug, Role.VIEWER)  # before anything of the job is read
        job = selectors.live_job(access.project, job_id)
        if job is None:
            raise Http404("No such run.")
        ser, err = _parse(SeriesQuerySerializer, request.query_params)
        if err:
            return err
        return Response(live.live_poll(job, ser.query(), ser.validated_data.get("since_event")))


class EmptySerializer(serializers.Serializer):
    pass


class MetricNamesApi(APIView):
    serializer_class = EmptySerializer

    def get(self, request, slug, job_id):
        _access, job = _job(request, slug, job_id)
        names = selectors.metric_names(job)
        return Response({"names": names, "charts": charts.default_charts(job.kind, names, job.config)})


class EventsApi(APIView):
    serializer_class = EmptySerializer

    def get(self, request, slug, job_id):
        _access, job = _job(request, slug, job_id)
        return Response({"events": selectors.events(job), "marks": selectors.win_rate_marks(job)})


def evaluation_rate(ev) -> dict:
    """An evaluation's win rate as every win rate reads: wins, ties, losses, rate, interval, too few samples
    (an evaluation stored before counts were kept has null counts)."""
    result = ev.result or {}
    summary = WinRateSummary(ev.win_rate, ev.win_rate_lo, ev.win_rate_hi, ev.n, *(
        int(result.get(k) or 0) for k in ("wins", "ties", "losses")))
    out = summary.to_dict() if ev.win_rate is not None else {"win_rate": None, "lo": None, "hi": None, "n": ev.n}
    if ev.win_rate is not None and any(result.get(k) is None for k in ("wins", "ties", "losses")):
        out.update(wins=None, ties=None, losses=None, without_ties="")
    return out


def checkpoint_json(row: dict) -> dict:
    c, ev = row["checkpoint"], row["evaluation"]
    return {"id": c.pk, "step": c.step, "time": c.created_at.isoformat(), "path": c.path, "size_bytes": c.size_bytes,
            "status": row["status"], "promoted": c.promoted, "active": row["is_active"], "metrics": row["metrics"],
            "children": [j.pk for j in row["children"]],
            "evaluation": None if ev is None else {"id": ev.pk, "status": ev.status, "error": ev.error,
                                                   **evaluation_rate(ev)}}


class CheckpointListApi(APIView):
    serializer_class = EmptySerializer

    def get(self, request, slug, job_id):
        _access, job = _job(request, slug, job_id)
        rows = selectors.checkpoint_rows(job, CHECKPOINT_METRICS)
        return Response({"checkpoints": [checkpoint_json(r) for r in rows]})


class PromoteApi(APIView):
    serializer_class = EmptySerializer

    def post(self, request, slug, job_id, step):
        _access, job = _job(request, slug, job_id, Role.ENGINEER)
        try:
            ckpt = services.checkpoint_get(job=job, step=step)
            services.checkpoint_promote(checkpoint=ckpt, user=request.user)
        except ApplicationError as exc:
            return application_error_response(exc)
        return Response({"checkpoint": ckpt.pk, "step": ckpt.step, "active": True})


class RollbackSerializer(serializers.Serializer):
    step = serializers.IntegerField()
    reason = serializers.CharField(required=False, allow_blank=True, max_length=400, default="")
    hp_overrides = serializers.DictField(child=serializers.CharField(allow_blank=True), required=False, default=dict)
    stop_parent = serializers.BooleanField(required=False, default=False)


class RollbackApi(APIView):
    """Start a child run from one of this run's checkpoints (optionally with a new lr / kl_coef)."""

    serializer_class = RollbackSerializer

    def post(self, request, slug, job_id):
        _access, job = _job(request, slug, job_id, Role.ENGINEER)
        ser, err = _parse(RollbackSerializer, request.data)
        if err:
            return err
        try:
            child = services.job_rollback(job=job, user=request.user, **ser.validated_data)
        except ApplicationError as exc:
            return application_error_response(exc)
        return Response({"child": child.pk, "parent": job.pk, "step": ser.validated_data["step"],
                         "url": f"/p/{slug}/jobs/{child.pk}/"}, status=status.HTTP_201_CREATED)


class EvaluateApi(APIView):
    serializer_class = EmptySerializer

    def post(self, request, slug, job_id, step):
        _access, job = _job(request, slug, job_id, Role.ENGINEER)
        try:
            ckpt = services.checkpoint_get(job=job, step=step)
            ev = services.evaluation_request(checkpoint=ckpt, user=request.user)
        except ApplicationError as exc:
            return application_error_response(exc)
        return Response({"evaluation": ev.pk, "status": ev.status}, status=status.HTTP_202_ACCEPTED)


class CompareApi(APIView):
    """One metric of several runs of the project, for overlaying."""

    serializer_class = EmptySerializer

    def get(self, request, slug):
        access = project_access(request.user, slug)
        name = (request.query_params.get("name") or "").strip()
        try:
            ids = parse_ids(_csv(request.query_params.get("jobs")))
        except ValueError:
            return Response({"detail": "jobs must be a comma-separated list of run ids."}, status=400)
        if not name or not ids:
            return Response({"detail": "Pick at least one run and a metric."}, status=400)
        if len(ids) > 20:
            return Response({"detail": "Compare at most 20 runs at once."}, status=400)
        jobs = compare.load_jobs(access.project, ids)
        if len(jobs) != len(set(ids)):
            return Response({"detail": "Some of those runs do not exist in this project."}, status=404)
        return Response({"name": name, "runs": selectors.compare_series(jobs, name, labels=compare.labels_for(jobs))})


class GuardRulesSerializer(serializers.Serializer):
    guard_rules = serializers.ListField(child=serializers.DictField(), allow_empty=True)


class GuardRulesApi(APIView):
    """A run's health rules with each rule's state (GET, viewers); replace them (PUT, engineers)."""

    serializer_class = GuardRulesSerializer

    def _body(self, job):
        from training.guard_builtins import BUILTIN, METRIC_SOURCES

        return {"guard_rules": (job.config or {}).get("guard_rules") or [], "status": services.rules_status(job),
                "builtin": {name: {**rule, "sources": METRIC_SOURCES[name]} for name, rule in BUILTIN.items()}}

    def get(self, request, slug, job_id):
        _access, job = _job(request, slug, job_id)
        return Response(self._body(job))

    def put(self, request, slug, job_id):
        _access, job = _job(request, slug, job_id, Role.ENGINEER)
        ser, err = _parse(GuardRulesSerializer, request.data)
        if err:
            return err
        try:
            services.job_rules_set(job=job, user=request.user, rules=ser.validated_data["guard_rules"])
        except ApplicationError as exc:
            return application_error_response(exc)
        return Response(self._body(job))
