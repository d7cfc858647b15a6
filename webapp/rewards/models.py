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
    # what "scores low" means for the built-in probes (training.reward_probes.LowRule)
    probe_scale = models.CharField(max_length=16, default="unit")
    probe_threshold = models.FloatField(default=0.0)  # the "custom" scale: built-ins must score at most this

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


class RewardTestRunState(models.TextChoices):
    QUEUED = "queued", "Queued"  # waiting for a worker (test-runs never run in a web process)
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"  # every sample got a score
    ERRORS = "errors", "Finished with errors"  # it ran, but some samples raised or timed out: "N errors"
    FAILED = "failed", "Failed"  # the reward could not be loaded or the sandbox gave up


class RewardTestRunMode(models.TextChoices):
    REFERENCE = "reference", "reference answers of a prompt set"
    PREFERENCE = "preference", "chosen and rejected of a preference set"
    RESPONSES = "responses", "pasted responses"
    ROLLOUTS = "rollouts", "stored rollouts of a run"
    MODEL = "model", "responses sampled from a registered model"


class RewardTestRun(models.Model):
    """A stored test-run: a reward source scored on dataset rows or pasted responses, in the sandbox.

    `source` is kept even when `version` is set, so an unsaved draft tested from the editor can be
    revisited; `version` is set when the source is exactly a saved version (same hash).
    """


    function = models.ForeignKey(RewardFunction, on_delete=models.CASCADE, related_name="test_runs")
    version = models.ForeignKey(RewardVersion, null=True, blank=True, on_delete=models.SET_NULL,
                                related_name="test_runs")
    source = models.TextField()
    sha256 = models.CharField(max_length=64)
    entry_point = models.CharField(max_length=100, default="compute_score")
    dataset_version = models.ForeignKey("datasets.DatasetVersion", null=True, blank=True,
                                        on_delete=models.SET_NULL, related_name="+")
    split = models.CharField(max_length=8, blank=True)  # "" (all rows), "train" or "val"
    mode = models.CharField(max_length=16, choices=RewardTestRunMode.choices)
    sample_count = models.PositiveIntegerField(default=0)
    # what the worker needs to build the samples again (they are checked when the run is asked for)
    limit = models.PositiveIntegerField(null=True, blank=True)
    responses_text = models.TextField(blank=True)
    # stored rollouts (samples/rollout/<step>.jsonl of a job of this project), or a model to sample from
    rollout_job_id = models.PositiveIntegerField(null=True, blank=True)
    rollout_step = models.PositiveIntegerField(null=True, blank=True)
    sample_model_id = models.PositiveIntegerField(null=True, blank=True)
    origin = models.CharField(max_length=300, blank=True)  # what was scored, in words
    done_count = models.PositiveIntegerField(default=0)  # samples scored so far, for the page's progress
    state = models.CharField(max_length=16, choices=RewardTestRunState.choices, default=RewardTestRunState.SUCCEEDED)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    isolation = models.CharField(max_length=32, blank=True)
    summary = models.JSONField(default=dict, blank=True)
    results = models.JSONField(default=list, blank=True)
    error = models.TextField(blank=True)
    error_lineno = models.PositiveIntegerField(null=True, blank=True)
    error_traceback = models.TextField(blank=True)
    duration_ms = models.FloatField(default=0.0)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"test-run {self.pk} of {self.function.name}"

    @property
    def project(self) -> Project:
        return self.function.project

    @property
    def is_active(self) -> bool:
        return self.state in (RewardTestRunState.QUEUED, RewardTestRunState.RUNNING)

    @property
    def error_count(self) -> int:
        return int((self.summary.get("all") or {}).get("errors") or 0)

    @property
    def state_words(self) -> str:
        """The badge: "succeeded" only when every sample got a score; else "N errors"."""
        if self.state == RewardTestRunState.ERRORS:
            n = self.error_count
            return f"{n} error{'s' if n != 1 else ''}"
        return self.state

    @property
    def is_reference_check(self) -> bool:
        """A prompt set without responses: each ground truth was scored against itself."""
        return self.mode == RewardTestRunMode.REFERENCE and any(r.get("role") == "ground_truth"
                                                                for r in self.results)

    @property
    def error_lines(self) -> list[int]:
        """Source lines to mark in the editor: where loading failed and where samples raised."""
        lines = set(self.summary.get("error_lines") or [])
        if self.error_lineno:
            lines.add(self.error_lineno)
        return sorted(lines)

    @property
    def has_logs(self) -> bool:
        """Whether the reward printed anything for some sample (the results then show a "Printed" column)."""
        return any(r.get("log") for r in self.results)

    @property
    def summary_rows(self) -> list[tuple[str, dict]]:
        rows = [("All", self.summary["all"])] if self.summary.get("all") else []
        for key in ("chosen", "rejected"):
            if self.summary.get(key):
                rows.append((key.capitalize(), self.summary[key]))
        return rows

    @property
    def histogram(self) -> dict:
        """Scores per trace for the Plotly histogram: all samples, or chosen and rejected."""
        if self.mode == RewardTestRunMode.PREFERENCE:
            traces = [{"name": role, "scores": [r["score"] for r in self.results
                                                if r["role"] == role and r["score"] is not None]}
                      for role in ("chosen", "rejected")]
        else:
            traces = [{"name": "score", "scores": [r["score"] for r in self.results if r["score"] is not None]}]
        return {"traces": traces}


class RewardProbe(models.Model):
    """An author's probe of a reward function (every version is checked with it): one input and the
    range its score must fall in. Editing the probes makes every version's stored verdict stale."""

    function = models.ForeignKey(RewardFunction, on_delete=models.CASCADE, related_name="probes")
    name = models.CharField(max_length=100)
    prompt = models.TextField(blank=True)  # only shown, and echoed by the built-in "prompt echoed back"
    solution_str = models.TextField(blank=True)
    ground_truth = models.JSONField(default=str, blank=True)
    data_source = models.CharField(max_length=200, blank=True)
    extra_info = models.JSONField(default=dict, blank=True)
    lo = models.FloatField(null=True, blank=True)
    hi = models.FloatField(null=True, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["function", "id"]

    def __str__(self) -> str:
        return f"probe {self.name} of {self.function.name}"


class ProbeRunState(models.TextChoices):
    QUEUED = "queued", "Probes pending"
    RUNNING = "running", "Probes running"
    PASSED = "passed", "Probes passed"
    FAILED = "failed", "Probes failed"


class RewardProbeRun(models.Model):
    """One run of the probe suite on a version. `suite_sha` names the suite it ran (built-ins, the
    author's probes, the low rule): a run of another suite is stale and does not count."""

    version = models.ForeignKey(RewardVersion, on_delete=models.CASCADE, related_name="probe_runs")
    suite_sha = models.CharField(max_length=64, db_index=True)
    state = models.CharField(max_length=16, choices=ProbeRunState.choices, default=ProbeRunState.QUEUED)
    trigger = models.CharField(max_length=32, blank=True)  # save, launch, probes changed, asked
    results = models.JSONField(default=list, blank=True)
    failed_count = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)  # the reward could not be loaded, or the sandbox failed
    isolation = models.CharField(max_length=32, blank=True)
    duration_ms = models.FloatField(default=0.0)
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                     related_name="+")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    override_reason = models.TextField(blank=True)
    overridden_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                      related_name="+")
    overridden_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"probes of {self.version} ({self.state})"

    @property
    def is_pending(self) -> bool:
        return self.state in (ProbeRunState.QUEUED, ProbeRunState.RUNNING)

    @property
    def overridden(self) -> bool:
        return self.state == ProbeRunState.FAILED and bool(self.override_reason)

    @property
    def failures(self) -> list[dict]:
        return [r for r in self.results if not r.get("passed")]
