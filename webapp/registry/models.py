"""The model registry: base, teacher and reward models a project can train from, registered by path."""
from __future__ import annotations

from django.conf import settings
from django.db import models

from webapp.core.models import Project, TimeStampedModel


class ModelKind(models.TextChoices):
    CAUSAL_LM = "causal_lm", "Causal LM (policy / teacher)"
    REWARD_MODEL = "reward_model", "Sequence-classification reward model"


class ModelEntry(TimeStampedModel):
    """A registered model: a local HF directory, or a hub id for GPU workers that have hub access."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="models")
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=16, choices=ModelKind.choices, default=ModelKind.CAUSAL_LM)
    path = models.CharField(max_length=500, blank=True)  # absolute local directory (HF format, safetensors)
    hub_id = models.CharField(max_length=200, blank=True)
    description = models.TextField(blank=True)
    num_parameters = models.BigIntegerField(null=True, blank=True)
    source_job = models.ForeignKey("runs.Job", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")

    class Meta:
        db_table = "runs_modelentry"  # the table predates the registry app
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="unique_model_name")]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def location(self) -> str:
        return self.path or self.hub_id
