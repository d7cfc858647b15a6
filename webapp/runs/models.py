"""Models, training jobs (runs), their attempts, metrics, checkpoints and events."""
from __future__ import annotations

from django.conf import settings
from django.db import models

from webapp.core.models import Project, TimeStampedModel
from webapp.registry.models import ModelEntry


class JobKind(models.TextChoices):
    GRPO = "grpo", "GRPO"
    DISTILL = "distill", "Distillation"
    REWARD_MODEL = "reward_model", "Reward model (Bradley-Terry)"


class Backend(models.TextChoices):
    LOCAL = "local", "Local (torch, CPU or one GPU)"
    VERL = "verl", "VERL (GPU workers)"


class JobState(models.TextChoices):
    QUEUED = "queued", "Queued"
    STARTING = "starting", "Starting"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"
    LOST = "lost", "Lost"


ACTIVE_STATES = (JobState.QUEUED, JobState.STARTING, JobState.RUNNING)
FINAL_STATES = (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.LOST)


class Job(TimeStampedModel):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="jobs")
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=16, choices=JobKind.choices)
    backend = models.CharField(max_length=8, choices=Backend.choices, default=Backend.LOCAL)
    state = models.CharField(max_length=16, choices=JobState.choices, default=JobState.QUEUED, db_index=True)
    preset = models.CharField(max_length=64, blank=True)
    config = models.JSONField(default=dict)  # the resolved hyperparameters (job.json "hp" and friends)
    base_model = models.ForeignKey(ModelEntry, null=True, blank=True, on_delete=models.PROTECT, related_name="jobs")
    teacher_model = models.ForeignKey(ModelEntry, null=True, blank=True, on_delete=models.PROTECT,
                                      related_name="teacher_jobs")
    dataset_version = models.ForeignKey("datasets.DatasetVersion", null=True, blank=True, on_delete=models.PROTECT,
                                        related_name="jobs")
    reward_versions = models.ManyToManyField("rewards.RewardVersion", blank=True, related_name="jobs")
    # {"shaping", "components": [{type, version_id|model_id, weight}]}
    reward_spec = models.JSONField(default=dict, blank=True)
    data_manifest = models.JSONField(default=dict, blank=True)  # what was included/excluded and why
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="children")
    resume_checkpoint = models.ForeignKey("runs.Checkpoint", null=True, blank=True, on_delete=models.PROTECT,
                                          related_name="resumed_jobs")
    run_dir = models.CharField(max_length=500, blank=True)
    queue = models.CharField(max_length=16, default="cpu")
    attempt_count = models.PositiveIntegerField(default=0)
    cancel_requested = models.BooleanField(default=False)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    last_step = models.IntegerField(default=0)
    error = models.TextField(blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    # The reviewed launch that created this job: a second POST of the same review finds it instead of
    # launching again (Back after Launch, a double click, two tabs).
    launch_token = models.UUIDField(null=True, blank=True, unique=True, editable=False)
    # A run the app did not launch, followed read-only from this folder (webapp/runs/services/attach.py); "" else.
    attached_dir = models.CharField(max_length=500, blank=True)
    attached = models.JSONField(default=dict, blank=True)  # its layout (training.external.Layout) and follow state

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["project", "-created_at"])]

    def __str__(self) -> str:
        return f"#{self.pk} {self.name}"

    @property
    def is_active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def is_attached(self) -> bool:
        return bool(self.attached_dir)


class JobAttempt(models.Model):
    """One launch of a job's training process: the first start, a resume, or a guard rule's restore."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="attempts")
    number = models.PositiveIntegerField()
    reason = models.CharField(max_length=32, default="start")  # start / resume / guard_rule
    resume_from = models.CharField(max_length=500, blank=True)
    supervisor_pid = models.IntegerField(null=True, blank=True)
    host = models.CharField(max_length=200, blank=True)
    started_at = models.DateTimeField(auto_now_add=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    returncode = models.IntegerField(null=True, blank=True)
    state = models.CharField(max_length=16, choices=JobState.choices, default=JobState.STARTING)
    # Where metric ingestion stopped in this attempt's metrics.jsonl (byte offset, file identity).
    ingest = models.JSONField(default=dict, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["job", "number"], name="unique_attempt")]
        ordering = ["job", "number"]

    def __str__(self) -> str:
        return f"job {self.job_id} attempt {self.number}"


class MetricPoint(models.Model):
    """One value of one metric at one step; ingest is idempotent through the unique key."""

    # No index of its own: both indexes below lead with the job. A lone job index misled PostgreSQL into scanning
    # a whole run for a live poll's `step > last` (20 ms instead of 0.3 ms on a 2,000-step run of 150 metrics).
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="metric_points", db_index=False)
    step = models.IntegerField()
    name = models.CharField(max_length=128)
    value = models.FloatField(null=True)  # NaN is stored as NULL (VERL's file logger writes null)
    wall_time = models.FloatField(null=True, blank=True)  # unix seconds when ingested/logged
    attempt = models.PositiveIntegerField(default=0)  # the attempt that logged it: a later attempt wins a step

    class Meta:
        constraints = [models.UniqueConstraint(fields=["job", "name", "step"], name="unique_metric_point")]
        # The stall check after every sync reads an attempt's newest steps: without this it scanned the whole run.
        indexes = [models.Index(fields=["job", "attempt", "step"], name="metric_point_attempt_step")]

    def __str__(self) -> str:
        return f"{self.name}@{self.step}={self.value}"


class CheckpointStatus(models.TextChoices):
    AVAILABLE = "available", "Available"
    DELETED = "deleted", "Deleted (retention)"
    MISSING = "missing", "Missing on disk"


class Checkpoint(TimeStampedModel):
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="checkpoints")
    step = models.IntegerField()
    path = models.CharField(max_length=500)
    size_bytes = models.BigIntegerField(default=0)
    metrics = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=16, choices=CheckpointStatus.choices, default=CheckpointStatus.AVAILABLE)
    promoted = models.BooleanField(default=False)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["job", "step"], name="unique_checkpoint_step")]
        ordering = ["job", "step"]

    def __str__(self) -> str:
        return f"{self.job} step {self.step}"


class RunEvent(TimeStampedModel):
    """Something that happened to a run and belongs on its curves: state change, checkpoint, rollback, guard rule."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    kind = models.CharField(max_length=32, db_index=True)
    step = models.IntegerField(null=True, blank=True)
    message = models.CharField(max_length=500)
    data = models.JSONField(default=dict, blank=True)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                              related_name="+")

    class Meta:
        ordering = ["job", "created_at", "id"]


class RescoreState(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"


class Rescore(models.Model):
    """A run's stored rollout samples scored again with another reward version (no regeneration).

    With `component` set, the new version takes that component's place in the job's mix (same weight and
    shaping, the other components' stored scores kept); else the new version's score stands alone."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="rescores")
    reward_version = models.ForeignKey("rewards.RewardVersion", on_delete=models.PROTECT, related_name="+")
    component = models.CharField(max_length=200, blank=True)  # the replaced component's name, "" = alone
    steps = models.JSONField(default=list)  # the rollout steps asked for
    state = models.CharField(max_length=16, choices=RescoreState.choices, default=RescoreState.QUEUED)
    sample_count = models.PositiveIntegerField(default=0)
    done_count = models.PositiveIntegerField(default=0)
    changed_count = models.PositiveIntegerField(default=0)
    summary = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"re-score {self.pk} of {self.job} with {self.reward_version}"

    @property
    def is_active(self) -> bool:
        return self.state in (RescoreState.QUEUED, RescoreState.RUNNING)

    @property
    def changed_share(self) -> float | None:
        return self.changed_count / self.done_count if self.done_count else None


class RescoreSample(models.Model):
    """One stored sample's old and new score."""

    rescore = models.ForeignKey(Rescore, on_delete=models.CASCADE, related_name="samples")
    step = models.IntegerField()
    row = models.IntegerField()  # line of samples/rollout/<step>.jsonl
    uid = models.CharField(max_length=100, blank=True)
    prompt = models.TextField()
    response = models.TextField()
    old_score = models.FloatField(null=True)
    new_score = models.FloatField(null=True)
    delta = models.FloatField(null=True)
    changed = models.BooleanField(default=False)
    error = models.TextField(blank=True)
    log = models.TextField(blank=True)  # what the new reward version printed for this sample (capped)

    class Meta:
        ordering = ["rescore", "step", "row"]
        indexes = [models.Index(fields=["rescore", "changed"], name="rescore_sample_changed")]
        constraints = [models.UniqueConstraint(fields=["rescore", "step", "row"], name="unique_rescore_sample")]

    def __str__(self) -> str:
        return f"{self.rescore} step {self.step} row {self.row}"


class ZeroSignalStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"


class ZeroSignalRun(TimeStampedModel):
    """A dry run of a verifiable prompt set (`python -m training.zero_signal`): group_size sampled responses per
    prompt from a model or checkpoint, scored with a reward version; which prompts' groups tie."""

    version = models.ForeignKey("datasets.DatasetVersion", on_delete=models.CASCADE, related_name="zero_signal_runs")
    model = models.ForeignKey(ModelEntry, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    checkpoint = models.ForeignKey(Checkpoint, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    reward_version = models.ForeignKey("rewards.RewardVersion", null=True, blank=True, on_delete=models.SET_NULL,
                                       related_name="+")
    params = models.JSONField(default=dict, blank=True)  # group_size, max_response_length, temperature, seed, …
    status = models.CharField(max_length=16, choices=ZeroSignalStatus.choices, default=ZeroSignalStatus.QUEUED)
    progress = models.FloatField(default=0.0)
    result = models.JSONField(default=dict, blank=True)  # the summary, the tied indices, examples
    error = models.TextField(blank=True)
    derived = models.ForeignKey("datasets.DatasetVersion", null=True, blank=True, on_delete=models.SET_NULL,
                                related_name="+")  # the version without the tied prompts, once made
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"zero-signal dry run {self.pk} of {self.version}"

    @property
    def finished(self) -> bool:
        return self.status in (ZeroSignalStatus.SUCCEEDED, ZeroSignalStatus.FAILED)
