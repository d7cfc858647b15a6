"""Per-project notification hooks (webhooks and e-mail) and the log of every delivery."""
from __future__ import annotations

from django.conf import settings
from django.db import models

from webapp.core.models import Project

EVENTS = ("job.finished", "job.failed", "job.lost", "job.stalled", "guard.tripped", "evaluation.finished",
          "human_eval.assigned", "human_eval.gap")


class HookKind(models.TextChoices):
    SLACK = "slack", "Slack-compatible webhook"
    JSON = "json", "JSON webhook (HMAC-SHA256 signed)"
    EMAIL = "email", "E-mail"


class Hook(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="hooks")
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=8, choices=HookKind.choices)
    url = models.CharField(max_length=1000, blank=True)  # never shown back whole: it may hold a secret
    secret = models.CharField(max_length=200, blank=True)  # json hooks: the HMAC key
    emails = models.CharField(max_length=1000, blank=True)  # email hooks: comma-separated
    events = models.JSONField(default=list)  # empty: every event
    enabled = models.BooleanField(default=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["project", "name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"

    def wants(self, event: str) -> bool:
        return self.enabled and (not self.events or event in self.events)


class DeliveryStatus(models.TextChoices):
    PENDING = "pending"
    SENT = "sent"
    FAILED = "failed"


class Delivery(models.Model):
    hook = models.ForeignKey(Hook, on_delete=models.CASCADE, related_name="deliveries")
    event = models.CharField(max_length=40)
    payload = models.JSONField(default=dict)
    status = models.CharField(max_length=8, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    response_code = models.IntegerField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    error = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.event} → {self.hook_id}: {self.status}"
