"""Review API under /api/projects/<slug>/review/ (token or session auth). The review screen uses it too."""
from __future__ import annotations

from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import ParseError
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from webapp.core.access import project_access
from webapp.core.models import Role
from webapp.core.services import ApplicationError
from webapp.datasets.api import FormatIsOurs
from webapp.datasets.models import DatasetRow
from webapp.datasets.views import export_response
from webapp.review import exports, selectors, services, tally
from webapp.review.models import PairState, Side
from webapp.review.stats import version_stats


def _error(exc: ApplicationError) -> Response:
    return Response({"detail": exc.message, "field": exc.field}, status=status.HTTP_400_BAD_REQUEST)


def _invalid(ser: serializers.Serializer) -> Response:
    field, messages = next(iter(ser.errors.items()))
    message = messages[0] if isinstance(messages, list) else str(messages)
    detail = message if field == "non_field_errors" else f"{field}: {message}"
    return Response({"detail": detail, "field": field, "errors": ser.errors}, status=status.HTTP_400_BAD_REQUEST)


def _row(version, row_id: int) -> DatasetRow:
    row = selectors.load_row(version, row_id)
    if row is None:
        raise Http404("No such pair in this dataset version.")
    return row


def _int_param(request, name: str) -> int | None:
    raw = request.query_params.get(name)
    if raw in (None, ""):
        return None
    try:
        return int(raw)
    except ValueError:
        raise ParseError(f"{name} must be a whole number.") from None


def _item_response(access, version, assignment, user, stats=None) -> Response:
    item = None
    if assignment is not None:
        row = getattr(assignment, "claimed_row", None)  # a claim may have read it (services._claim_after)
        if row is not None:
            row.version = version
        else:
            row = _row(version, assignment.row_id)
        item = selectors.item_payload(row=row, user=user, access=access, assignment=assignment)
    body = {"item": item, "progress": selectors.progress(version=version, user=user, stats=stats,
                                                         sums=getattr(assignment, "counters", None))}
    if item is None:
        body["message"] = "Nothing left for you to review in this version. Thank you!"
    return Response(body)


class NextItemApi(APIView):
    """The reviewer's next pair (claims a new one when needed). ?after=<row index> walks forward."""

    @extend_schema(responses=OpenApiTypes.OBJECT)
    def get(self, request, slug, version_id):
        access, version = selectors.review_access(request.user, slug, version_id, Role.REVIEWER)
        try:
            stats = services.ensure_pair_states(version=version)
        except ApplicationError as exc:
            return _error(exc)
        assignment = services.assignment_next(version=version, reviewer=request.user,
                                              overlap=access.project.review_overlap,
                                              after_index=_int_param(request, "after"))
        return _item_response(access, version, assignment, request.user, stats)


class PrevItemApi(APIView):
    """The reviewer's previous pair before ?before=<row index> (to revisit a decision)."""

    @extend_schema(responses=OpenApiTypes.OBJECT)
    def get(self, request, slug, version_id):
        access, version = selectors.review_access(request.user, slug, version_id, Role.REVIEWER)
        before = _int_param(request, "before")
        if before is None:
            return Response({"detail": "Give ?before=<row index>.", "field": "before"}, status=400)
        assignment = selectors.assignment_prev(version=version, reviewer=request.user, before_index=before)
        body = _item_response(access, version, assignment, request.user)
        if assignment is None:
            body.data["message"] = "This is your first pair."
        return body


class ItemApi(APIView):
    @extend_schema(responses=OpenApiTypes.OBJECT)
    def get(self, request, slug, version_id, row_id):
        access, version = selectors.review_access(request.user, slug, version_id, Role.VIEWER)
        row = _row(version, row_id)
        return Response({"item": selectors.item_payload(row=row, user=request.user, access=access),
                         "progress": selectors.progress(version=version, user=request.user)})


class ReviewInputSerializer(serializers.Serializer):
    choice = serializers.ChoiceField(choices=tally.CHOICES,
                                     help_text="left/right = that response is better; approve, swap, reject, flag")
    reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=services.REASON_MAX)
    time_ms = serializers.IntegerField(required=False, default=0, min_value=0)


class SubmitReviewApi(APIView):
    serializer_class = ReviewInputSerializer

    def post(self, request, slug, version_id, row_id):
        access, version = selectors.review_access(request.user, slug, version_id, Role.REVIEWER)
        # The pair is read with its locked state (a missing pair's 404 still comes before a 400).
        ser = ReviewInputSerializer(data=request.data)
        if not ser.is_valid():
            _row(version, row_id)
            return _invalid(ser)
        try:
            review = services.review_submit(actor=request.user, project=access.project, version=version,
                                            row_id=row_id, **ser.validated_data)
        except PairState.DoesNotExist:
            raise Http404("No such pair in this dataset version.") from None
        except ApplicationError as exc:
            _row(version, row_id)
            return _error(exc)
        # Lean on purpose: the screen moves on to the next pair; GET the item for everything else.
        progress = selectors.progress(version=version, user=request.user, **review.progress)
        return Response({"row_id": review.row.pk, "index": review.row.index, "my_review": selectors.review_json(review),
                         "progress": progress}, status=status.HTTP_201_CREATED)


class EditInputSerializer(serializers.Serializer):
    side = serializers.ChoiceField(choices=Side.values)
    text = serializers.CharField(allow_blank=True, trim_whitespace=False)


class EditApi(APIView):
    serializer_class = EditInputSerializer

    def post(self, request, slug, version_id, row_id):
        access, version = selectors.review_access(request.user, slug, version_id, Role.REVIEWER)
        row = _row(version, row_id)
        ser = EditInputSerializer(data=request.data)
        if not ser.is_valid():
            return _invalid(ser)
        try:
            edit = services.response_edit(actor=request.user, project=access.project, row=row, **ser.validated_data)
        except ApplicationError as exc:
            return _error(exc)
        row = _row(version, row_id)  # its review state changed
        return Response({"revision": edit.revision, "side": edit.side,
                         "item": selectors.item_payload(row=row, user=request.user, access=access)},
                        status=status.HTTP_201_CREATED)


class CommentInputSerializer(serializers.Serializer):
    text = serializers.CharField(allow_blank=True)


class CommentApi(APIView):
    serializer_class = CommentInputSerializer

    def post(self, request, slug, version_id, row_id):
        access, version = selectors.review_access(request.user, slug, version_id, Role.REVIEWER)
        row = _row(version, row_id)
        ser = CommentInputSerializer(data=request.data)
        if not ser.is_valid():
            return _invalid(ser)
        try:
            services.comment_add(actor=request.user, project=access.project, row=row, **ser.validated_data)
        except ApplicationError as exc:
            return _error(exc)
        row = _row(version, row_id)  # its review state changed
        return Response({"item": selectors.item_payload(row=row, user=request.user, access=access)},
                        status=status.HTTP_201_CREATED)


class ResolveInputSerializer(serializers.Serializer):
    label = serializers.ChoiceField(choices=services.RESOLVE_LABELS)


class ResolveApi(APIView):
    serializer_class = ResolveInputSerializer

    def post(self, request, slug, version_id, row_id):
        access, version = selectors.review_access(request.user, slug, version_id, Role.ADMIN)
        row = _row(version, row_id)
        ser = ResolveInputSerializer(data=request.data)
        if not ser.is_valid():
            return _invalid(ser)
        try:
            state = services.conflict_resolve(actor=request.user, project=access.project, row=row,
                                              **ser.validated_data)
        except ApplicationError as exc:
            return _error(exc)
        return Response({"row_id": row.pk, "state": state.state, "final_label": state.final_label,
                         "final_swap": state.final_swap, "source": state.decision_source})


class StatsApi(APIView):
    @extend_schema(responses=OpenApiTypes.OBJECT)
    def get(self, request, slug, version_id):
        access, version = selectors.review_access(request.user, slug, version_id, Role.VIEWER)
        return Response(version_stats(version=version, overlap=access.project.review_overlap))


class ConflictsApi(APIView):
    """Pairs waiting for an admin (conflicts and flagged pairs), 50 at a time: ?after=<row index>."""

    @extend_schema(responses=OpenApiTypes.OBJECT)
    def get(self, request, slug, version_id):
        access, version = selectors.review_access(request.user, slug, version_id, Role.ENGINEER)
        page, next_after = selectors.conflicts_page(version=version, after=_int_param(request, "after"))
        reviews = selectors.reviews_by_row([s.pk for s in page])
        items = [{"row_id": s.pk, "index": s.row_index, "state": s.state, "votes": list(s.votes),
                  "reviews": [{"reviewer": r.reviewer.username, "label": r.label, "reason": r.reason}
                              for r in reviews.get(s.pk, [])]} for s in page]
        return Response({"results": items, "next_after": next_after})


class BulkInputSerializer(serializers.Serializer):
    action = serializers.ChoiceField(choices=services.BULK_ACTIONS)
    row_ids = serializers.ListField(child=serializers.IntegerField(min_value=1), allow_empty=False,
                                    max_length=services.BULK_MAX_ROWS)


class BulkApi(APIView):
    serializer_class = BulkInputSerializer

    def post(self, request, slug, version_id):
        access, version = selectors.review_access(request.user, slug, version_id, Role.ENGINEER)
        ser = BulkInputSerializer(data=request.data)
        if not ser.is_valid():
            return _invalid(ser)
        try:
            n = services.bulk_apply(actor=request.user, project=access.project, version=version,
                                    **ser.validated_data)
        except ApplicationError as exc:
            return _error(exc)
        return Response({"changed": n, "action": ser.validated_data["action"]})


class VersionListApi(APIView):
    @extend_schema(responses=OpenApiTypes.OBJECT)
    def get(self, request, slug):
        access = project_access(request.user, slug, Role.VIEWER)
        out = []
        for v in selectors.review_versions(access.project):
            p = selectors.progress(version=v, user=request.user)
            out.append({"version_id": v.pk, "dataset": v.dataset.name, "number": v.number, "rows": v.row_count, **p})
        return Response(out)


class ExportApi(APIView):
    """The approved pairs of a version as a download: ?format=verl|trl|jsonl[&trl_style=...]."""

    content_negotiation_class = FormatIsOurs
    renderer_classes = [JSONRenderer]

    @extend_schema(responses=OpenApiTypes.BINARY)
    def get(self, request, slug, version_id):
        access, version = selectors.review_access(request.user, slug, version_id, Role.ENGINEER)
        fmt = request.query_params.get("format", "")
        style = request.query_params.get("trl_style") or "auto"
        if fmt not in ("verl", "trl", "jsonl") or style not in ("auto", "standard", "conversational"):
            return Response({"detail": "format must be verl, trl or jsonl; trl_style auto, standard or "
                             "conversational.", "field": "format"}, status=status.HTTP_400_BAD_REQUEST)

        def on_error(message):
            return Response({"detail": message}, status=status.HTTP_400_BAD_REQUEST)

        return export_response(version, {"format": fmt, "trl_style": style}, user=request.user, on_error=on_error,
                               rows=exports.approved_rows(version), label=exports.LABEL)
