"""Dataset API: list and upload, import status and mapping, versions, keyset rows, export."""
from __future__ import annotations

from django.http import HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import reverse
from rest_framework import serializers, status
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.parsers import FormParser, JSONParser, MultiPartParser
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from webapp.core import jsonsafe
from webapp.core.access import project_access
from webapp.core.models import Role
from webapp.core.services import ApplicationError
from webapp.datasets import selectors, services
from webapp.datasets.forms import RowFilterForm
from webapp.datasets.models import Dataset, DatasetImport, DatasetRow, DatasetVersion, ImportStatus, VersionStatus
from webapp.datasets.shapes import parse_column_map
from webapp.datasets.views import errors_response, export_response, import_status_payload, upload_too_large


class VersionSerializer(serializers.ModelSerializer):
    parent_number = serializers.SerializerMethodField()

    class Meta:
        model = DatasetVersion
        fields = ["number", "status", "row_count", "train_count", "val_count", "content_hash", "source_filename",
                  "source_format", "detected_shape", "column_map", "split_spec", "split_seed", "report",
                  "created_at", "parent_number", "lineage"]

    def get_parent_number(self, obj) -> int | None:
        """The version this one was derived from (cleaning), in the same dataset."""
        return (obj.lineage or {}).get("parent", {}).get("number") if obj.parent_id else None


class DatasetSerializer(serializers.ModelSerializer):
    latest_version = serializers.SerializerMethodField()

    class Meta:
        model = Dataset
        fields = ["id", "name", "kind", "description", "created_at", "latest_version"]

    def get_latest_version(self, obj) -> int | None:
        return getattr(obj, "latest_number", None) if hasattr(obj, "latest_number") else (
            obj.latest_version.number if obj.latest_version else None)


class DatasetDetailSerializer(DatasetSerializer):
    versions = serializers.SerializerMethodField()

    class Meta(DatasetSerializer.Meta):
        fields = [*DatasetSerializer.Meta.fields, "versions"]

    def get_versions(self, obj) -> list[dict]:
        qs = obj.versions.filter(status=VersionStatus.READY).order_by("-number")
        return [{k: v for k, v in VersionSerializer(v).data.items() if k != "report"} for v in qs]


class RowSerializer(serializers.ModelSerializer):
    review_state = serializers.SerializerMethodField()

    class Meta:
        model = DatasetRow
        fields = ["index", "split", "source_line", "data_source", "ability", "prompt", "chosen", "rejected",
                  "ground_truth", "extra_info", "row_hash", "review_state"]

    def get_review_state(self, obj) -> str:
        return getattr(obj, "review_state", "unreviewed")


class ColumnMapField(serializers.Field):
    """A JSON object, a JSON string of one, or 'prompt=question,ground_truth=answer'."""

    def to_internal_value(self, data):
        if isinstance(data, dict):
            return data
        text = str(data or "").strip()
        try:
            if text.startswith("{"):
                value = jsonsafe.loads(text)
                if not isinstance(value, dict):
                    raise ValueError("The column mapping must be an object.")
                return value
            return parse_column_map(text)
        except ValueError as exc:
            raise serializers.ValidationError(str(exc)) from None

    def to_representation(self, value):
        return value


class UploadSerializer(serializers.Serializer):
    file = serializers.FileField()
    name = serializers.CharField(max_length=200)
    kind = serializers.ChoiceField(choices=["", "preference", "prompts"], required=False, allow_blank=True)
    column_map = ColumnMapField(required=False)
    skip_bad_rows = serializers.BooleanField(required=False, default=False)
    split = serializers.CharField(required=False, default="10%", max_length=32)
    split_seed = serializers.IntegerField(required=False, default=0)


class MappingSerializer(serializers.Serializer):
    column_map = ColumnMapField()
    kind = serializers.ChoiceField(choices=["", "preference", "prompts"], required=False, allow_blank=True)
    skip_bad_rows = serializers.BooleanField(required=False, allow_null=True, default=None)
    split = serializers.CharField(required=False, max_length=32, allow_blank=True)
    split_seed = serializers.IntegerField(required=False, allow_null=True, default=None)


class ImportSerializer(serializers.ModelSerializer):
    class Meta:
        model = DatasetImport
        fields = ["id", "name", "kind", "filename", "size_bytes", "status", "phase", "progress", "error", "report",
                  "inspection", "options", "created_at"]


class FormatIsOurs(DefaultContentNegotiation):
    """On download endpoints `?format=` names the file format, not one of DRF's renderers."""

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


def _error(message: str, http_status: int = status.HTTP_400_BAD_REQUEST, **extra) -> Response:
    return Response({"detail": message, **extra}, status=http_status)


def import_response(record: DatasetImport) -> Response:
    """201 when imported, 202 while queued, 400 with the reason (and what to map) otherwise."""
    body = {"import": ImportSerializer(record).data, "status": import_status_payload(record)}
    if record.status == ImportStatus.SUCCEEDED:
        body["version"] = VersionSerializer(record.version).data
        body["dataset_id"] = record.version.dataset_id
        return Response(body, status=status.HTTP_201_CREATED)
    if record.status in (ImportStatus.QUEUED, ImportStatus.RUNNING):
        return Response(body, status=status.HTTP_202_ACCEPTED)
    inspection = record.inspection or {}
    code = "needs_mapping" if record.status == ImportStatus.NEEDS_MAPPING else "import_failed"
    return _error(record.error, code=code, **body,
                  columns=inspection.get("columns"), suggested_map=inspection.get("suggested_map"),
                  preview=inspection.get("preview"))


class DatasetListApi(APIView):
    serializer_class = DatasetSerializer
    parser_classes = [MultiPartParser, FormParser, JSONParser]

    def get(self, request, slug):
        access = project_access(request.user, slug)
        return Response(DatasetSerializer(selectors.dataset_list(project=access.project), many=True).data)

    def post(self, request, slug):
        """Upload a file (multipart) and import it: see `import_response` for the status codes."""
        access = project_access(request.user, slug, Role.ENGINEER)
        too_large = upload_too_large(request)
        if too_large:
            return _error(too_large, http_status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE, field="file")
        ser = UploadSerializer(data=request.data)
        if not ser.is_valid():
            first = next(iter(ser.errors.items()))
            return _error(f"{first[0]}: {first[1][0]}", field=first[0], errors=ser.errors)
        d = ser.validated_data
        try:
            record = services.import_upload(project=access.project, user=request.user, uploaded_file=d["file"],
                                            name=d["name"], kind=d.get("kind") or None,
                                            column_map=d.get("column_map"), skip_bad_rows=d["skip_bad_rows"],
                                            split=d["split"], split_seed=d["split_seed"])
        except ApplicationError as exc:
            return _error(exc.message, field=exc.field)
        return import_response(record)


class ImportDetailApi(APIView):
    serializer_class = ImportSerializer

    def get(self, request, slug, pk):
        access = project_access(request.user, slug, Role.ENGINEER)
        record = get_object_or_404(DatasetImport, pk=pk, project=access.project)
        return Response({"import": ImportSerializer(record).data, "status": import_status_payload(record)})


class ImportMappingApi(APIView):
    serializer_class = MappingSerializer

    def post(self, request, slug, pk):
        access = project_access(request.user, slug, Role.ENGINEER)
        record = get_object_or_404(DatasetImport, pk=pk, project=access.project)
        ser = MappingSerializer(data=request.data)
        if not ser.is_valid():
            return _error("Invalid mapping.", errors=ser.errors)
        d = ser.validated_data
        try:
            record = services.import_set_mapping(record=record, user=request.user, column_map=d["column_map"],
                                                 kind=d.get("kind"), skip_bad_rows=d.get("skip_bad_rows"),
                                                 split=d.get("split") or None, split_seed=d.get("split_seed"))
        except ApplicationError as exc:
            return _error(exc.message, field=exc.field)
        return import_response(record)


class ImportErrorsApi(APIView):
    content_negotiation_class = FormatIsOurs
    renderer_classes = [JSONRenderer]

    def get(self, request, slug, pk):
        access = project_access(request.user, slug, Role.ENGINEER)
        record = get_object_or_404(DatasetImport, pk=pk, project=access.project)
        fmt = request.query_params.get("format", "json")
        if fmt not in ("csv", "json"):
            return _error("format must be csv or json.")
        return errors_response(record, fmt)


class DatasetDetailApi(APIView):
    serializer_class = DatasetDetailSerializer

    def get(self, request, slug, dataset_id):
        access = project_access(request.user, slug)
        dataset = selectors.dataset_get(project=access.project, dataset_ref=dataset_id)
        return Response(DatasetDetailSerializer(dataset).data)


class VersionDetailApi(APIView):
    serializer_class = VersionSerializer

    def get(self, request, slug, dataset_id, number):
        access = project_access(request.user, slug)
        version = selectors.version_get(project=access.project, dataset_id=dataset_id, number=number)
        return Response(VersionSerializer(version).data)


class VersionRowsApi(APIView):
    """Keyset pages: follow `next_after` (?after=) and `prev_before` (?before=); filters as on the page."""

    serializer_class = RowSerializer

    def get(self, request, slug, dataset_id, number):
        access = project_access(request.user, slug)
        version = selectors.version_get(project=access.project, dataset_id=dataset_id, number=number)
        form = RowFilterForm(request.query_params)
        if request.query_params and not form.is_valid():
            return _error("Invalid filter.", errors=form.errors)
        params = {}
        for key in ("after", "before", "limit"):
            raw = request.query_params.get(key)
            if raw not in (None, ""):
                try:
                    params[key] = int(raw)
                except ValueError:
                    return _error(f"{key} must be a whole number.", field=key)
        page = selectors.rows_page(version, form.filters(), full=True, **params)
        return Response({"results": RowSerializer(page.rows, many=True).data, "next_after": page.next_after,
                         "prev_before": page.prev_before})


class VersionExportApi(APIView):
    content_negotiation_class = FormatIsOurs
    renderer_classes = [JSONRenderer]

    def get(self, request, slug, dataset_id, number):
        access = project_access(request.user, slug, Role.ENGINEER)
        version = selectors.version_get(project=access.project, dataset_id=dataset_id, number=number)
        fmt = request.query_params.get("format", "")
        if fmt not in ("verl", "trl", "jsonl"):
            return _error("format must be verl, trl or jsonl.", field="format")
        style = request.query_params.get("trl_style") or "auto"
        if style not in ("auto", "standard", "conversational"):
            return _error("trl_style must be auto, standard or conversational.", field="trl_style")
        if request.query_params.get("approved_only", "") in ("1", "true", "yes"):  # the review app decides
            return HttpResponseRedirect(reverse("api-review-export", args=[slug, version.pk])
                                        + "?" + request.query_params.urlencode())
        return export_response(version, {"format": fmt, "trl_style": style},
                               user=request.user, on_error=lambda msg: _error(msg))
