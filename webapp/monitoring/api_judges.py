"""API: automatic judges on a human evaluation's or an arena's pairs (list: viewers; start: engineers)."""
from __future__ import annotations

from django.shortcuts import get_object_or_404
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from webapp.core.access import project_access
from webapp.core.api import application_error_response
from webapp.core.models import Role
from webapp.core.services import ApplicationError
from webapp.monitoring import services
from webapp.monitoring.models import Arena, HumanEvalTask, JudgeRun


class JudgeRequestSerializer(serializers.Serializer):
    judge = serializers.CharField(help_text='"reward" (the run\'s reward) or "model:<id>" (a registered model)')


def judge_run_dict(run: JudgeRun) -> dict:
    return {"id": run.pk, "status": run.status, "error": run.error, "judge": run.label, "kind": run.kind,
            "wins": run.wins, "ties": run.ties, "losses": run.losses, "n": run.n, "win_rate": run.win_rate,
            "lo": run.win_rate_lo, "hi": run.win_rate_hi, "inconsistent": run.inconsistent,
            "position_bias_share": run.position_bias_share, "unjudged": run.unjudged,
            "interval": (run.result or {}).get("interval", "")}


class _JudgesApi(APIView):
    serializer_class = JudgeRequestSerializer

    def target(self, project, pk):  # -> {"task": ...} or {"arena": ...}
        raise NotImplementedError

    def get(self, request, slug, pk):
        access = project_access(request.user, slug)
        target = self.target(access.project, pk)
        runs = JudgeRun.objects.filter(**target).order_by("created_at", "id")
        choices = services.judge_choices(**target) if access.can_engineer else []
        return Response({"judges": [judge_run_dict(r) for r in runs],
                         "choices": [{"value": v, "label": label} for v, label in choices]})

    def post(self, request, slug, pk):
        access = project_access(request.user, slug, Role.ENGINEER)
        target = self.target(access.project, pk)
        ser = JudgeRequestSerializer(data=request.data)
        if not ser.is_valid():
            return Response({"detail": "Name a judge: \"reward\" or \"model:<id>\".", "errors": ser.errors},
                            status=status.HTTP_400_BAD_REQUEST)
        try:
            run = services.judge_request(user=request.user, judge=ser.validated_data["judge"], **target)
        except ApplicationError as exc:
            return application_error_response(exc)
        return Response(judge_run_dict(run), status=status.HTTP_202_ACCEPTED)


class HumanEvalJudgesApi(_JudgesApi):
    def target(self, project, pk):
        return {"task": get_object_or_404(HumanEvalTask.objects.select_related("checkpoint__job"), pk=pk,
                                          project=project)}


class ArenaJudgesApi(_JudgesApi):
    def target(self, project, pk):
        return {"arena": get_object_or_404(Arena, pk=pk, project=project)}
