"""API of a run's diagnostic bundles: ask for one (a worker builds it), follow it, download it."""
from __future__ import annotations

from django.http import FileResponse
from django.shortcuts import get_object_or_404
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from webapp.core.models import Role
from webapp.core.services import ApplicationError
from webapp.monitoring.api import _job
from webapp.monitoring.models import DiagnosticBundle
from webapp.monitoring.services import bundle as bundles


class BundleSerializer(serializers.Serializer):
    sample_steps = serializers.IntegerField(min_value=0, max_value=bundles.MAX_SAMPLE_STEPS, default=5)


def bundle_json(request, b: DiagnosticBundle) -> dict:
    ready = bundles.bundle_file(b) is not None
    return {"id": b.pk, "status": b.status, "error": b.error, "sample_steps": b.sample_steps, "bytes": b.size_bytes,
            "files": b.files, "left_out": b.left_out, "created_at": b.created_at,
            "download": request.build_absolute_uri(f"/api/projects/{b.job.project.slug}/monitor/jobs/{b.job_id}/"
                                                   f"bundles/{b.pk}/download/") if ready else None}


class BundleListApi(APIView):
    serializer_class = BundleSerializer

    def get(self, request, slug, job_id):
        _access, job = _job(request, slug, job_id, Role.ENGINEER)
        return Response([bundle_json(request, b) for b in DiagnosticBundle.objects.filter(job=job)
                         .select_related("job__project")[:20]])

    def post(self, request, slug, job_id):
        _access, job = _job(request, slug, job_id, Role.ENGINEER)
        ser = BundleSerializer(data=request.data)
        if not ser.is_valid():
            return Response({"detail": ser.errors}, status=status.HTTP_400_BAD_REQUEST)
        try:
            b = bundles.bundle_request(job=job, user=request.user, sample_steps=ser.validated_data["sample_steps"])
        except ApplicationError as exc:
            return Response({"detail": exc.message}, status=status.HTTP_400_BAD_REQUEST)
        return Response(bundle_json(request, b), status=status.HTTP_202_ACCEPTED)


class BundleApi(APIView):
    serializer_class = BundleSerializer

    def get(self, request, slug, job_id, bundle_id):
        _access, job = _job(request, slug, job_id, Role.ENGINEER)
        return Response(bundle_json(request, get_object_or_404(DiagnosticBundle.objects.select_related(
            "job__project"), pk=bundle_id, job=job)))


class BundleDownloadApi(APIView):
    serializer_class = BundleSerializer

    def get(self, request, slug, job_id, bundle_id):
        _access, job = _job(request, slug, job_id, Role.ENGINEER)
        path = bundles.bundle_file(get_object_or_404(DiagnosticBundle, pk=bundle_id, job=job))
        if path is None:
            return Response({"detail": "This bundle is not ready, or its file is gone."},
                            status=status.HTTP_409_CONFLICT)
        return FileResponse(open(path, "rb"), as_attachment=True, content_type="application/zip",
                            filename=f"run{job.pk}-diagnostics-{bundle_id}.zip")
