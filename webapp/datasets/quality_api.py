"""Quality report API: request (cached) and read a version's report, follow its progress, clean by it."""
from __future__ import annotations

from rest_framework import serializers, status
from rest_framework.parsers import FormParser, JSONParser
from rest_framework.response import Response
from rest_framework.views import APIView

from webapp.core.access import project_access
from webapp.core.models import Role
from webapp.core.services import ApplicationError
from webapp.datasets import cleaning, quality_service, selectors
from webapp.datasets.api import VersionSerializer
from webapp.datasets.models import ReportStatus


class ReportRequestSerializer(serializers.Serializer):
    eval_versions = serializers.ListField(child=serializers.IntegerField(), required=False, default=list)
    ngram = serializers.IntegerField(required=False, allow_null=True, default=None)
    threshold = serializers.FloatField(required=False, allow_null=True, default=None)
    recompute = serializers.BooleanField(required=False, default=False)


class CleanSerializer(serializers.Serializer):
    categories = serializers.ListField(child=serializers.CharField(), allow_empty=False)


def _error(message: str, field: str | None = None, http_status: int = status.HTTP_400_BAD_REQUEST, **extra):
    return Response({"detail": message, "field": field, **extra}, status=http_status)


def _flag(request, name: str) -> bool:
    return request.query_params.get(name, "") in ("1", "true", "yes")


def _eval_ids(request) -> list[str]:
    raw = request.query_params.getlist("eval_versions")
    return [part for value in raw for part in value.split(",") if part.strip()]


class VersionQualityApi(APIView):
    """GET: the report for the options in the query (the latest one without options); POST: ask for one."""

    serializer_class = ReportRequestSerializer
    parser_classes = [JSONParser, FormParser]

    def get(self, request, slug, dataset_id, number):
        access = project_access(request.user, slug)
        version = selectors.version_get(project=access.project, dataset_id=dataset_id, number=number)
        query = request.query_params
        try:
            if any(k in query for k in ("eval_versions", "ngram", "threshold")):
                report = quality_service.report_find(version=version, eval_versions=_eval_ids(request),
                                                     ngram=query.get("ngram"), threshold=query.get("threshold"))
            else:
                report = quality_service.report_latest(version)
        except ApplicationError as exc:
            return _error(exc.message, exc.field)
        if report is None:
            return _error("No quality report for these options yet: POST to this address to compute one.",
                          http_status=status.HTTP_404_NOT_FOUND)
        return Response(quality_service.report_payload(report, figures=_flag(request, "figures"),
                                                       rows=_flag(request, "rows")))

    def post(self, request, slug, dataset_id, number):
        """200 with the stored report when it is ready (cached), 202 while a worker computes it."""
        access = project_access(request.user, slug, Role.ENGINEER)
        version = selectors.version_get(project=access.project, dataset_id=dataset_id, number=number)
        ser = ReportRequestSerializer(data=request.data)
        if not ser.is_valid():
            field, errors = next(iter(ser.errors.items()))
            return _error(f"{field}: {errors[0] if isinstance(errors, list) else errors}", field, errors=ser.errors)
        d = ser.validated_data
        try:
            report = quality_service.report_request(version=version, user=request.user,
                                                    eval_versions=d["eval_versions"], ngram=d["ngram"],
                                                    threshold=d["threshold"], recompute=d["recompute"])
        except ApplicationError as exc:
            return _error(exc.message, exc.field)
        ready = report.status == ReportStatus.READY
        return Response(quality_service.report_payload(report),
                        status=status.HTTP_200_OK if ready else status.HTTP_202_ACCEPTED)


class QualityReportApi(APIView):
    """One report: its status while it runs (poll this), then its sections (?figures=1, ?rows=1 for more)."""

    def get(self, request, slug, dataset_id, number, report_id):
        access = project_access(request.user, slug)
        version = selectors.version_get(project=access.project, dataset_id=dataset_id, number=number)
        report = quality_service.report_get(version, report_id)
        if report is None:
            return _error("No such report.", http_status=status.HTTP_404_NOT_FOUND)
        return Response(quality_service.report_payload(report, figures=_flag(request, "figures"),
                                                       rows=_flag(request, "rows")))


class QualityCleanApi(APIView):
    """POST {"categories": [...]}: a new version without those rows (201), its lineage naming the report."""

    serializer_class = CleanSerializer
    parser_classes = [JSONParser, FormParser]

    def post(self, request, slug, dataset_id, number, report_id):
        access = project_access(request.user, slug, Role.ENGINEER)
        version = selectors.version_get(project=access.project, dataset_id=dataset_id, number=number)
        report = quality_service.report_get(version, report_id)
        if report is None:
            return _error("No such report.", http_status=status.HTTP_404_NOT_FOUND)
        ser = CleanSerializer(data=request.data)
        if not ser.is_valid():
            return _error("categories: choose at least one of " + ", ".join(report.drops or {}) + ".", "categories")
        try:
            new = cleaning.clean_version(report=report, user=request.user, categories=ser.validated_data["categories"])
        except ApplicationError as exc:
            return _error(exc.message, exc.field)
        return Response({"dataset_id": new.dataset_id, "version": VersionSerializer(new).data,
                         "lineage": new.lineage}, status=status.HTTP_201_CREATED)
