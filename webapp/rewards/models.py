"""Reward functions and their immutable versions (VERL's compute_score contract)."""
from __future__ import annotations

from django.conf import settings
from django.db import models

from webapp.core.models import Project, TimeStampedModel


class RewardFunction(TimeStampedModel):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="reward_functions")
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="unique_reward_name")]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def latest_version(self):
        return self.versions.order_by("-number").first()


class RewardVersion(models.Model):
    """An immutable snapshot of a reward function's source; jobs pin one."""

    function = models.ForeignKey(RewardFunction, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    source = models.TextField()
    entry_point = models.CharField(max_length=100, default="compute_score")
    sha256 = models.CharField(max_length=64, db_index=True)
    message = models.CharField(max_length=300, blank=True)
    author = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                               related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["function", "number"], name="unique_reward_version")]
        ordering = ["function", "-number"]

    def __str__(self) -> str:
        return f"{self.function.name} v{self.number}"

    @property
    def project(self) -> Project:
        return self.function.project
