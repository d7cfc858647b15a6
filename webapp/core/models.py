"""Projects (workspaces), their members and roles, and the audit log."""
from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.contrib.sessions.base_session import AbstractBaseSession
from django.db import models


class TimeStampedModel(models.Model):
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True


class Role(models.TextChoices):
    VIEWER = "viewer", "Viewer"
    REVIEWER = "reviewer", "Reviewer"
    ENGINEER = "engineer", "Engineer"
    ADMIN = "admin", "Admin"


# Each role includes every permission of the roles before it.
ROLE_RANK = {Role.VIEWER: 0, Role.REVIEWER: 1, Role.ENGINEER: 2, Role.ADMIN: 3}


class Project(TimeStampedModel):
    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                   on_delete=models.SET_NULL, related_name="+")
    # Review settings (admins set them): each pair is reviewed by `review_overlap` reviewers,
    # who do not see each other's decisions unless `review_blind` is off.
    review_overlap = models.PositiveSmallIntegerField(default=1)
    review_blind = models.BooleanField(default=True)
    # The project's active policy: a checkpoint promoted by an engineer (an alias; nothing moves on disk).
    active_checkpoint = models.ForeignKey("runs.Checkpoint", null=True, blank=True,
                                          on_delete=models.SET_NULL, related_name="+")

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def runs_root(self) -> Path:
        """The folder that holds this project's run directories (`<job id>-<run id>`, see training.rundir)."""
        return Path(settings.RUNS_ROOT) / self.slug


class Membership(TimeStampedModel):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "user"], name="unique_membership")]
        ordering = ["project", "user__username"]

    def __str__(self) -> str:
        return f"{self.user} @ {self.project} ({self.role})"

    def has_role(self, role: str) -> bool:
        return ROLE_RANK[Role(self.role)] >= ROLE_RANK[Role(role)]


class Invitation(TimeStampedModel):
    """An admin's invitation of a username into a project; membership starts only when that user accepts.

    Stored by username whether or not such an account exists, so inviting tells a project admin nothing about
    which accounts do; its link lets the person invited create the account when there is none."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="invitations")
    username = models.CharField(max_length=150)
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.VIEWER)
    invited_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    # SHA-256 of the secret in the invitation's link (/join/<secret>/), which is shown once to the admin: whoever
    # opens it signs in as `username`, or creates that account if there is none, and joins.
    token_hash = models.CharField(max_length=64, blank=True, db_index=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "username"], name="unique_invitation")]
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"invitation of {self.username} to {self.project} ({self.role})"


class AuditLog(models.Model):
    """Who did what, when, to which object; append-only."""

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    project = models.ForeignKey(Project, null=True, blank=True, on_delete=models.CASCADE, related_name="audit_entries")
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                              related_name="+")
    action = models.CharField(max_length=64, db_index=True)
    object_type = models.CharField(max_length=64, blank=True)
    object_id = models.CharField(max_length=64, blank=True, db_index=True)
    summary = models.CharField(max_length=500, blank=True)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["project", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M} {self.actor} {self.action} {self.object_type}:{self.object_id}"


class UserSession(AbstractBaseSession):
    """A browser's session with its signed-in user as a column, read together (webapp.core.sessions)."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE,
                             related_name="+")

    @classmethod
    def get_session_store_class(cls):
        from webapp.core.sessions import SessionStore

        return SessionStore
