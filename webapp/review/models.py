"""Review of preference pairs: per-row state, per-reviewer assignments and reviews, edits, comments,
and the counters that keep the review screen and the stats fast on a million rows.

Dataset rows stay immutable: everything a reviewer changes lives here, keyed by row.
"""
from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from webapp.datasets.models import DatasetRow, DatasetVersion


class State(models.TextChoices):
    UNREVIEWED = "unreviewed", "Unreviewed"
    APPROVED = "approved", "Approved"
    REJECTED = "rejected", "Rejected"
    FLAGGED = "flagged", "Flagged"
    CONFLICT = "conflict", "Conflict"


class Label(models.TextChoices):
    """A review's effective verdict on the pair, the unit of agreement statistics."""

    APPROVE = "approve", "Approve (chosen is better)"
    SWAP = "swap", "Swap (rejected is better)"
    REJECT = "reject", "Reject (exclude)"
    FLAG = "flag", "Flag"


LABELS: tuple[str, ...] = tuple(Label.values)  # the order of VoteProfile's columns


class Decision(models.TextChoices):
    APPROVE = "approve", "Approve"
    REJECT = "reject", "Reject"
    FLAG = "flag", "Flag"


class Source(models.TextChoices):
    NONE = "", "None"
    CONSENSUS = "consensus", "Consensus of reviewers"
    ADMIN = "admin", "Resolved by an admin"
    BULK = "bulk", "Bulk action"


class Side(models.TextChoices):
    CHOSEN = "chosen", "Chosen"
    REJECTED = "rejected", "Rejected"


class PairState(models.Model):
    """The review state of one preference pair; `claims` counts the reviewers assigned to it."""

    row = models.OneToOneField(DatasetRow, primary_key=True, on_delete=models.CASCADE, related_name="pair_state")
    version = models.ForeignKey(DatasetVersion, on_delete=models.CASCADE, related_name="+")
    row_index = models.PositiveIntegerField()  # copy of row.index: keyset order without a join
    state = models.CharField(max_length=16, choices=State.choices, default=State.UNREVIEWED)
    final_label = models.CharField(max_length=8, blank=True, default="")  # a Label once decided
    final_swap = models.BooleanField(default=False)
    decision_source = models.CharField(max_length=16, choices=Source.choices, blank=True, default="")
    claims = models.PositiveSmallIntegerField(default=0)
    review_count = models.PositiveSmallIntegerField(default=0)
    votes_approve = models.PositiveSmallIntegerField(default=0)
    votes_swap = models.PositiveSmallIntegerField(default=0)
    votes_reject = models.PositiveSmallIntegerField(default=0)
    votes_flag = models.PositiveSmallIntegerField(default=0)
    disagreement = models.BooleanField(default=False)
    n_edits = models.PositiveIntegerField(default=0)  # lets the review screen skip empty lookups
    n_comments = models.PositiveIntegerField(default=0)
    resolved_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                    related_name="+")
    resolved_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [
            # "next row with a free reviewer slot after my cursor": one seek per claims value.
            models.Index(fields=["version", "state", "claims", "row_index"], name="review_ps_claim"),
            models.Index(fields=["version", "state", "row_index"], name="review_ps_state"),
            models.Index(fields=["version", "row_index"], name="review_ps_order"),
            models.Index(fields=["version", "row_index"], condition=Q(disagreement=True), name="review_ps_disagree"),
            models.Index(fields=["version", "row_index"], condition=Q(votes_flag__gt=0), name="review_ps_flag"),
        ]

    def __str__(self) -> str:
        return f"row {self.row_id}: {self.state}"

    @property
    def votes(self) -> tuple[int, int, int, int]:
        return (self.votes_approve, self.votes_swap, self.votes_reject, self.votes_flag)


class Assignment(models.Model):
    """A reviewer's claim on a pair; the side shown on the left is drawn here and kept."""

    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="review_assignments")
    row = models.ForeignKey(DatasetRow, on_delete=models.CASCADE, related_name="review_assignments")
    version = models.ForeignKey(DatasetVersion, on_delete=models.CASCADE, related_name="+")
    row_index = models.PositiveIntegerField()
    left_is_chosen = models.BooleanField()
    done = models.BooleanField(default=False)
    claimed_at = models.DateTimeField(auto_now_add=True)
    done_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["reviewer", "row"], name="review_unique_assignment")]
        indexes = [
            models.Index(fields=["reviewer", "version", "row_index"], name="review_asg_cursor"),
            models.Index(fields=["reviewer", "version", "done", "row_index"], name="review_asg_open"),
        ]

    def __str__(self) -> str:
        return f"user {self.reviewer_id} holds row {self.row_id}"


class Review(models.Model):
    """A reviewer's current decision on a pair (changes are updates; the audit log keeps the history)."""

    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="reviews")
    row = models.ForeignKey(DatasetRow, on_delete=models.CASCADE, related_name="reviews")
    version = models.ForeignKey(DatasetVersion, on_delete=models.CASCADE, related_name="+")
    decision = models.CharField(max_length=8, choices=Decision.choices)
    swap = models.BooleanField(default=False)
    reason = models.CharField(max_length=500, blank=True, default="")
    label = models.CharField(max_length=8, choices=Label.choices)  # decision + swap, resolved
    left_is_chosen = models.BooleanField()
    choice = models.CharField(max_length=8, blank=True, default="")  # "left"/"right" when chosen by position
    time_ms = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["reviewer", "row"], name="review_unique_review")]
        indexes = [models.Index(fields=["version", "reviewer", "time_ms"], name="review_rev_time")]

    def __str__(self) -> str:
        return f"user {self.reviewer_id} on row {self.row_id}: {self.label}"


class ResponseEdit(models.Model):
    """A revision of the chosen or rejected response; the latest revision of a side is what training sees."""

    row = models.ForeignKey(DatasetRow, on_delete=models.CASCADE, related_name="response_edits")
    version = models.ForeignKey(DatasetVersion, on_delete=models.CASCADE, related_name="+")
    side = models.CharField(max_length=8, choices=Side.choices)
    revision = models.PositiveIntegerField()
    text = models.TextField()
    author = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["row", "side", "revision"], name="review_unique_revision")]
        ordering = ["row", "side", "revision"]

    def __str__(self) -> str:
        return f"row {self.row_id} {self.side} revision {self.revision}"


class Comment(models.Model):
    row = models.ForeignKey(DatasetRow, on_delete=models.CASCADE, related_name="review_comments")
    version = models.ForeignKey(DatasetVersion, on_delete=models.CASCADE, related_name="+")
    author = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    text = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"comment on row {self.row_id}"


class VersionReviewStats(models.Model):
    """Counters per dataset version, kept in step with PairState so no page counts a million rows."""

    version = models.OneToOneField(DatasetVersion, primary_key=True, on_delete=models.CASCADE,
                                   related_name="review_stats")
    total = models.PositiveIntegerField(default=0)
    n_unreviewed = models.IntegerField(default=0)
    n_approved = models.IntegerField(default=0)
    n_rejected = models.IntegerField(default=0)
    n_flagged = models.IntegerField(default=0)
    n_conflict = models.IntegerField(default=0)
    reviews = models.IntegerField(default=0)
    # The version's distinct data sources, for the list filter (rows are immutable, so this never goes stale).
    data_sources = models.JSONField(default=list, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"review counters of version {self.version_id}"

    def count(self, state: str) -> int:
        return getattr(self, f"n_{state}")

    @property
    def decided(self) -> int:
        return self.n_approved + self.n_rejected + self.n_flagged


class ReviewerStats(models.Model):
    version = models.ForeignKey(DatasetVersion, on_delete=models.CASCADE, related_name="+")
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    assigned = models.IntegerField(default=0)
    done = models.IntegerField(default=0)
    time_ms_total = models.BigIntegerField(default=0)
    final_total = models.IntegerField(default=0)  # reviews on pairs that have a final decision
    final_agree = models.IntegerField(default=0)  # ... whose label equals that final decision

    class Meta:
        constraints = [models.UniqueConstraint(fields=["version", "reviewer"], name="review_unique_reviewer_stats")]

    def __str__(self) -> str:
        return f"user {self.reviewer_id} on version {self.version_id}"


class VoteProfile(models.Model):
    """How many pairs of a version have exactly these vote counts: the input of Fleiss/Krippendorff."""

    version = models.ForeignKey(DatasetVersion, on_delete=models.CASCADE, related_name="+")
    approve = models.PositiveSmallIntegerField()
    swap = models.PositiveSmallIntegerField()
    reject = models.PositiveSmallIntegerField()
    flag = models.PositiveSmallIntegerField()
    count = models.IntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["version", "approve", "swap", "reject", "flag"],
                                               name="review_unique_profile")]

    def __str__(self) -> str:
        return f"{self.count} pairs voted {(self.approve, self.swap, self.reject, self.flag)}"


class PairAgreement(models.Model):
    """Contingency table of two reviewers on the pairs both reviewed (rater_a.id < rater_b.id)."""

    version = models.ForeignKey(DatasetVersion, on_delete=models.CASCADE, related_name="+")
    rater_a = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    rater_b = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    label_a = models.CharField(max_length=8)
    label_b = models.CharField(max_length=8)
    count = models.IntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["version", "rater_a", "rater_b", "label_a", "label_b"],
                                               name="review_unique_pair_cell")]

    def __str__(self) -> str:
        return f"{self.rater_a_id}/{self.rater_b_id}: {self.label_a}/{self.label_b} x{self.count}"
