"""Datasets, their immutable versions and rows.

A version is never modified after its import finished: review decisions and edits live in the
review app, keyed by row, and a job pins the rows it trained on (see webapp.runs).
"""
from __future__ import annotations

from django.conf import settings
from django.db import models

from webapp.core.models import Project, TimeStampedModel
from webapp.datasets.shapes import TEXT_STORED_FIELDS, restore_stored, stored_value  # noqa: F401 - re-exported


class DatasetKind(models.TextChoices):
    PREFERENCE = "preference", "Preference pairs"
    PROMPTS = "prompts", "Verifiable prompts"


class Dataset(TimeStampedModel):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="datasets")
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=16, choices=DatasetKind.choices)
    description = models.TextField(blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="unique_dataset_name")]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def latest_version(self):
        return self.versions.filter(status=VersionStatus.READY).order_by("-number").first()


class VersionStatus(models.TextChoices):
    IMPORTING = "importing", "Importing"
    READY = "ready", "Ready"
    FAILED = "failed", "Failed"


class DatasetVersion(TimeStampedModel):
    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    status = models.CharField(max_length=16, choices=VersionStatus.choices, default=VersionStatus.IMPORTING)
    progress = models.FloatField(default=0.0)  # 0..1 while importing
    content_hash = models.CharField(max_length=64, blank=True, db_index=True)
    row_count = models.PositiveIntegerField(default=0)
    train_count = models.PositiveIntegerField(default=0)
    val_count = models.PositiveIntegerField(default=0)
    source_filename = models.CharField(max_length=300, blank=True)
    source_format = models.CharField(max_length=32, blank=True)  # jsonl / json / csv / parquet
    # trl_standard / trl_conversational / hh_rlhf / prompts / verl
    detected_shape = models.CharField(max_length=32, blank=True)
    column_map = models.JSONField(default=dict, blank=True)
    split_seed = models.IntegerField(default=0)
    split_spec = models.CharField(max_length=32, default="10%")  # "10%" or a count "200"
    report = models.JSONField(default=dict, blank=True)  # bad rows, duplicates, skipped counts
    error = models.TextField(blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    # A version derived from another (cleaning): the version it came from, and what was done —
    # {"operation", "parent": {id, number}, "quality_report", "dropped": {category: count}, "kept", ...}.
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children")
    lineage = models.JSONField(default=dict, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["dataset", "number"], name="unique_dataset_version")]
        ordering = ["dataset", "-number"]

    def __str__(self) -> str:
        return f"{self.dataset.name} v{self.number}"

    @property
    def project(self) -> Project:
        return self.dataset.project


class Split(models.TextChoices):
    TRAIN = "train", "Train"
    VAL = "val", "Validation"


class DatasetRow(models.Model):
    """One preference pair or one verifiable prompt. Immutable once its version is ready."""

    # No index of its own: the unique (version, index) index serves every lookup by version, and one
    # index less makes bulk imports faster. No database foreign key either: its check, one lookup of the version
    # per row, was about a third of the database's work in an import. Only the import writes rows, after
    # creating their version, and it deletes its rows when that version was discarded while it ran
    # (services.dataset_import); deletions cascade in the ORM as before.
    version = models.ForeignKey(DatasetVersion, on_delete=models.CASCADE, related_name="rows", db_index=False,
                                db_constraint=False)
    index = models.PositiveIntegerField()  # 0-based position in the imported file (after skipped rows)
    source_line = models.PositiveIntegerField(default=0)  # 1-based line/row number in the source file
    split = models.CharField(max_length=5, choices=Split.choices, default=Split.TRAIN)
    data_source = models.CharField(max_length=200, blank=True, default="")
    ability = models.CharField(max_length=100, blank=True, default="")
    # Original structure: a string, or a list of {"role", "content"} messages (TRL conversational). A plain,
    # non-empty string is stored once, in its text column below, with NULL here: storing every text twice made
    # an import write twice the bytes (about 1 s of PostgreSQL's 2.7 s at 100k rows). Instances read it back
    # (`from_db`); `values()` readers use `stored_value`.
    prompt = models.JSONField(null=True, blank=True)
    chosen = models.JSONField(null=True, blank=True)
    rejected = models.JSONField(null=True, blank=True)
    ground_truth = models.TextField(blank=True, default="")
    extra_info = models.JSONField(default=dict, blank=True)
    # Flattened text for search, display and length filters.
    prompt_text = models.TextField(blank=True, default="")
    chosen_text = models.TextField(blank=True, default="")
    rejected_text = models.TextField(blank=True, default="")
    prompt_chars = models.PositiveIntegerField(default=0)
    chosen_chars = models.PositiveIntegerField(default=0)
    rejected_chars = models.PositiveIntegerField(default=0)
    row_hash = models.CharField(max_length=64)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["version", "index"], name="unique_row_index")]
        indexes = [
            # Validation rows only (about a tenth): a filter on the training split reads the unique index, and
            # every import fills a tenth of an index instead of a whole one.
            models.Index(fields=["version", "index"], condition=models.Q(split="val"), name="row_val_split"),
            models.Index(fields=["version", "data_source", "index"]),
        ]
        ordering = ["version", "index"]

    def __str__(self) -> str:
        return f"row {self.index} of {self.version_id}"

    @classmethod
    def from_db(cls, db, field_names, values):
        row = super().from_db(db, field_names, values)
        loaded = row.__dict__
        for name in TEXT_STORED_FIELDS:
            if name in loaded and loaded[name] is None:
                loaded[name] = stored_value(None, getattr(row, f"{name}_text"))  # loads a deferred text
        return row


class ImportStatus(models.TextChoices):
    NEEDS_MAPPING = "needs_mapping", "Needs a column mapping"
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Importing"
    SUCCEEDED = "succeeded", "Imported"
    FAILED = "failed", "Failed"


class DatasetImport(TimeStampedModel):
    """One attempt to import a file: its options, progress and bad-row report.

    It outlives a failed import (whose version and rows are deleted: all-or-nothing), so the
    report of every bad row stays downloadable.
    """

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="dataset_imports")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    name = models.CharField(max_length=200)  # the dataset name the file is imported into
    kind = models.CharField(max_length=16, blank=True)  # requested kind; blank = detect
    filename = models.CharField(max_length=300, blank=True)
    upload_path = models.CharField(max_length=500, blank=True)  # server copy of an uploaded file, removed after
    size_bytes = models.BigIntegerField(default=0)
    options = models.JSONField(default=dict, blank=True)  # column_map, skip_bad_rows, split, split_seed
    inspection = models.JSONField(default=dict, blank=True)  # format, columns, preview, suggested mapping
    status = models.CharField(max_length=16, choices=ImportStatus.choices, default=ImportStatus.QUEUED)
    phase = models.CharField(max_length=32, blank=True)
    progress = models.FloatField(default=0.0)
    version = models.ForeignKey(DatasetVersion, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    report = models.JSONField(default=dict, blank=True)
    errors_path = models.CharField(max_length=500, blank=True)  # every bad row, one JSON object per line
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["project", "-created_at"])]

    def __str__(self) -> str:
        return f"import {self.pk} of {self.filename} into {self.name}"

    @property
    def finished(self) -> bool:
        return self.status in (ImportStatus.SUCCEEDED, ImportStatus.FAILED)


class ReportStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    READY = "ready", "Ready"
    FAILED = "failed", "Failed"


class QualityReport(TimeStampedModel):
    """A version's quality report (webapp.datasets.quality_service), cached per version, algorithm and options.

    A ready version never changes, so a report stays valid until the report's rules change (`algorithm`)
    or someone asks to recompute it. `result` holds the sections the page, the API and the command show;
    `drops` the full lists of row indices that cleaning may drop, per category.
    """

    version = models.ForeignKey(DatasetVersion, on_delete=models.CASCADE, related_name="quality_reports")
    algorithm = models.PositiveIntegerField()
    params_key = models.CharField(max_length=64)  # sha256 of the canonical options
    params = models.JSONField(default=dict, blank=True)  # eval_versions (ids), ngram, near_dup_threshold
    status = models.CharField(max_length=16, choices=ReportStatus.choices, default=ReportStatus.QUEUED)
    phase = models.CharField(max_length=64, blank=True)
    progress = models.FloatField(default=0.0)
    result = models.JSONField(default=dict, blank=True)
    drops = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    seconds = models.FloatField(default=0.0)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["version", "algorithm", "params_key"],
                                               name="unique_quality_report")]
        ordering = ["-updated_at", "-id"]

    def __str__(self) -> str:
        return f"quality report {self.pk} of {self.version}"

    @property
    def finished(self) -> bool:
        return self.status in (ReportStatus.READY, ReportStatus.FAILED)
