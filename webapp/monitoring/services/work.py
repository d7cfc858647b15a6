"""What evaluations and exports share: a queued row is claimed once, so a redelivered task does nothing."""
from __future__ import annotations

from django.utils import timezone

from webapp.monitoring.models import CheckpointWork, EvaluationStatus


def claim(model: type[CheckpointWork], pk: int, *related: str) -> tuple[CheckpointWork, bool]:
    """(the row, whether this call moved it from queued to running)."""
    claimed = model.objects.filter(pk=pk, status=EvaluationStatus.QUEUED).update(
        status=EvaluationStatus.RUNNING, started_at=timezone.now())
    return model.objects.select_related(*related).get(pk=pk), claimed == 1
