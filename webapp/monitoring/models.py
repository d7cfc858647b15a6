"""Monitoring state: the run guard per job (health rules, the KL guard among them), on-demand checkpoint
evaluations, blind pairwise tasks, judges."""
from __future__ import annotations

from django.conf import settings
from django.db import models

from webapp.core.models import Project, TimeStampedModel


class GuardRulesRecord(models.Model):
    """The persisted run health of a job: its rules' state (training.guard_rules.EngineState as JSON, the KL
    guard's included) and whether it is stalled (training.stall)."""

    job = models.OneToOneField("runs.Job", on_delete=models.CASCADE, related_name="guard_rules_record")
    state = models.JSONField(default=dict)
    trips = models.PositiveIntegerField(default=0)
    stalled_since = models.DateTimeField(null=True, blank=True)
    stall = models.JSONField(default=dict, blank=True)  # the last stall check: idle_s, limit_s, step_s
    stall_resumes = models.PositiveIntegerField(default=0)
    notified_state = models.CharField(max_length=16, blank=True)  # the final state already notified
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"guard rules of job {self.job_id}"


class MetricRollup(models.Model):
    """Per (job, metric, level, bucket of 4**level steps): the points holding the min and the max (see rollup.py)."""

    job = models.ForeignKey("runs.Job", on_delete=models.CASCADE, related_name="+", db_index=False)
    name = models.CharField(max_length=128)
    level = models.PositiveSmallIntegerField()
    bucket = models.BigIntegerField()
    min_step = models.IntegerField()
    min_value = models.FloatField()
    min_time = models.FloatField(null=True)
    max_step = models.IntegerField()
    max_value = models.FloatField()
    max_time = models.FloatField(null=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["job", "name", "level", "bucket"], name="unique_rollup_bucket")]

    def __str__(self) -> str:
        return f"{self.name} L{self.level} #{self.bucket}"


class MetricRollupState(models.Model):
    """How far a series has been rolled up (reads roll up anything logged after it)."""

    job = models.ForeignKey("runs.Job", on_delete=models.CASCADE, related_name="+", db_index=False)
    name = models.CharField(max_length=128)
    through_step = models.IntegerField(null=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["job", "name"], name="unique_rollup_state")]

    def __str__(self) -> str:
        return f"{self.name} rolled up to step {self.through_step}"


class EvaluationStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"


class CheckpointWork(TimeStampedModel):
    """Work on a checkpoint that a worker does after the request: queued, running, then done or failed."""

    status = models.CharField(max_length=16, choices=EvaluationStatus.choices, default=EvaluationStatus.QUEUED)
    error = models.TextField(blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")

    class Meta:
        abstract = True
        ordering = ["-created_at", "-id"]

    @property
    def is_active(self) -> bool:
        return self.status in (EvaluationStatus.QUEUED, EvaluationStatus.RUNNING)


class CheckpointEvaluation(CheckpointWork):
    """One on-demand validation win-rate evaluation of a checkpoint (`python -m training.evaluate`)."""

    checkpoint = models.ForeignKey("runs.Checkpoint", on_delete=models.CASCADE, related_name="evaluations")
    win_rate = models.FloatField(null=True, blank=True)
    win_rate_lo = models.FloatField(null=True, blank=True)
    win_rate_hi = models.FloatField(null=True, blank=True)
    n = models.PositiveIntegerField(default=0)
    samples_path = models.CharField(max_length=500, blank=True)
    result = models.JSONField(default=dict, blank=True)  # the evaluator's whole output (per-source metrics)

    class Meta(CheckpointWork.Meta):
        pass

    def __str__(self) -> str:
        return f"evaluation {self.pk} of checkpoint {self.checkpoint_id} ({self.status})"


class CheckpointExport(CheckpointWork):
    """A checkpoint zipped as a Hugging Face folder, built on a worker (a real model takes minutes)."""

    checkpoint = models.ForeignKey("runs.Checkpoint", on_delete=models.CASCADE, related_name="exports")
    variant = models.CharField(max_length=16)  # "full", or for LoRA "merged" / "adapter"
    path = models.CharField(max_length=500, blank=True)  # the zip, once it is built
    size_bytes = models.BigIntegerField(default=0)

    class Meta(CheckpointWork.Meta):
        pass

    def __str__(self) -> str:
        return f"export {self.pk} of checkpoint {self.checkpoint_id} ({self.variant}, {self.status})"


class BlindSource(models.TextChoices):
    ARENA = "arena", "Arena"
    PERIODIC = "periodic", "Periodic human evaluation"
    CHECKPOINT = "checkpoint", "Human evaluation against the references"


class BlindTask(CheckpointWork):
    """A blind pairwise task: two sides answer the same prompts and people pick the better response without
    knowing which side wrote it. Side B is the one under test (an arena's B, the policy's checkpoint), side A
    what it is compared with (an arena's A, an earlier checkpoint, the base model, the references); results
    are B's wins, ties and losses. `status` follows the generation of both sides (queued → running →
    succeeded | failed); `sides` snapshots what each side was. How pairs are shown is services/blind.py's."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="blind_tasks")
    source = models.CharField(max_length=16, choices=BlindSource.choices)
    title = models.CharField(max_length=200)
    sides = models.JSONField(default=dict)  # {"a": {kind, label, checkpoint, job, step, model, path, base_model}}
    a_checkpoint = models.ForeignKey("runs.Checkpoint", null=True, blank=True, on_delete=models.SET_NULL,
                                     related_name="+")
    a_model = models.ForeignKey("registry.ModelEntry", null=True, blank=True, on_delete=models.SET_NULL,
                                related_name="+")
    b_checkpoint = models.ForeignKey("runs.Checkpoint", null=True, blank=True, on_delete=models.SET_NULL,
                                     related_name="blind_tasks")
    b_model = models.ForeignKey("registry.ModelEntry", null=True, blank=True, on_delete=models.SET_NULL,
                                related_name="+")
    dataset_version = models.ForeignKey("datasets.DatasetVersion", null=True, blank=True, on_delete=models.SET_NULL,
                                        related_name="+")
    origin = models.CharField(max_length=300, blank=True)  # where the prompts came from, in words
    # the prompts asked, in order: {"prompt" (text or messages), "ground_truth", "data_source", "extra_info"}
    prompts = models.JSONField(default=list)
    sampling = models.JSONField(default=dict)  # max_response_length, temperature, top_p (the same for both sides)
    seed = models.BigIntegerField(default=0)  # prompt i is sampled with seed + i on both sides
    engine = models.CharField(max_length=16, blank=True)  # which generation engine answered (vllm / transformers)
    progress = models.FloatField(default=0.0)
    is_open = models.BooleanField(default=True)
    closed_at = models.DateTimeField(null=True, blank=True)
    # who may judge: the assignees, or (explicitly, shown on the task) every member who may review
    anyone_may_judge = models.BooleanField(default=False)
    assignees = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="+")
    gap = models.JSONField(default=dict, blank=True)  # periodic: the reward-vs-human gap check (services/periodic.py)
    flagged_at = models.DateTimeField(null=True, blank=True)  # when the gap was first flagged (notified once)

    class Meta(CheckpointWork.Meta):
        constraints = [models.UniqueConstraint(fields=["b_checkpoint"], condition=models.Q(source="periodic"),
                                               name="unique_periodic_blind_task")]

    def __str__(self) -> str:
        return self.title

    def label(self, side: str) -> str:
        return str((self.sides.get(side) or {}).get("label") or side.upper())

    @property
    def opponent(self) -> str:
        """What side B is compared with, in words ("step 5", "base model", "reference")."""
        return self.label("a")

    @property
    def opponent_step(self) -> int | None:
        """A periodic task's earlier checkpoint step (0: the base model); None for other tasks."""
        step = (self.sides.get("a") or {}).get("step")
        return int(step) if self.source == BlindSource.PERIODIC and step is not None else None


class BlindPair(models.Model):
    """One prompt with both sides' responses. `identical` pairs (the same text once whitespace is normalised)
    count as ties and are never shown to reviewers; `order_key` is the pair's secret from which each
    reviewer's left side is drawn (services/blind.py), never shown."""

    task = models.ForeignKey(BlindTask, on_delete=models.CASCADE, related_name="pairs")
    index = models.PositiveIntegerField()
    prompt = models.JSONField(null=True, blank=True)  # a string or a message list, as asked
    prompt_text = models.TextField()
    response_a = models.TextField()
    response_b = models.TextField()
    truncated_a = models.BooleanField(default=False)
    truncated_b = models.BooleanField(default=False)
    seed = models.BigIntegerField(null=True, blank=True)
    # what a reward needs to score the responses, as in training: the dataset row's fields
    ground_truth = models.JSONField(null=True, blank=True)
    data_source = models.CharField(max_length=200, blank=True)
    extra_info = models.JSONField(default=dict, blank=True)
    score_a = models.FloatField(null=True, blank=True)  # the run's reward, when the samples carried it
    score_b = models.FloatField(null=True, blank=True)
    auto_outcome = models.FloatField(null=True, blank=True)  # the reward's verdict for B: 1 / 0.5 / 0
    identical = models.BooleanField(default=False)
    order_key = models.CharField(max_length=64)

    class Meta:
        ordering = ["task", "index"]
        constraints = [models.UniqueConstraint(fields=["task", "index"], name="unique_blind_pair")]

    def __str__(self) -> str:
        return f"task {self.task_id} pair {self.index}"

    def response(self, side: str) -> str:
        return self.response_a if side == "a" else self.response_b

    def truncated(self, side: str) -> bool:
        return self.truncated_a if side == "a" else self.truncated_b


class Side(models.TextChoices):
    A = "a", "A"
    B = "b", "B"


class BlindChoice(models.TextChoices):
    A = "a", "A is better"
    B = "b", "B is better"
    TIE = "tie", "Tie"
    BOTH_BAD = "both_bad", "Both bad"


class BlindVerdict(models.Model):
    """One reviewer's verdict on a pair, by side (a / b / tie / both_bad); `shown_left` is the side they saw on
    the left."""

    pair = models.ForeignKey(BlindPair, on_delete=models.CASCADE, related_name="verdicts")
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    choice = models.CharField(max_length=8, choices=BlindChoice.choices)
    shown_left = models.CharField(max_length=1, choices=Side.choices)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["pair", "created_at"]
        constraints = [models.UniqueConstraint(fields=["pair", "reviewer"], name="unique_blind_verdict")]

    def __str__(self) -> str:
        return f"{self.reviewer_id} on pair {self.pair_id}: {self.choice}"


class JudgeKind(models.TextChoices):
    REWARD_MODEL = "reward_model", "Reward model"
    REWARD = "reward", "The run's reward"
    JUDGE_MODEL = "judge_model", "Judge model (answers A or B)"


class JudgeRun(CheckpointWork):
    """An automatic judge over a blind task's pairs, each judged twice with positions swapped
    (`python -m training.judges`); side B's W/T/L, bootstrap interval and position-bias share."""

    task = models.ForeignKey(BlindTask, on_delete=models.CASCADE, related_name="judge_runs")
    kind = models.CharField(max_length=16, choices=JudgeKind.choices)
    label = models.CharField(max_length=300)  # the judge's name as shown (model name, "reward of run #7")
    model_path = models.CharField(max_length=500, blank=True)  # reward / judge models: the folder judged with
    wins = models.PositiveIntegerField(default=0)
    ties = models.PositiveIntegerField(default=0)
    losses = models.PositiveIntegerField(default=0)
    n = models.PositiveIntegerField(default=0)
    win_rate = models.FloatField(null=True, blank=True)
    win_rate_lo = models.FloatField(null=True, blank=True)
    win_rate_hi = models.FloatField(null=True, blank=True)
    inconsistent = models.PositiveIntegerField(default=0)
    unjudged = models.PositiveIntegerField(default=0)
    result = models.JSONField(default=dict, blank=True)  # the summary (per-pair verdicts stay in the run dir)

    class Meta(CheckpointWork.Meta):
        pass

    def __str__(self) -> str:
        return f"judge run {self.pk} on blind task {self.task_id} ({self.status})"

    @property
    def position_bias_share(self) -> float | None:
        return self.inconsistent / self.n if self.n else None


class DiagnosticBundle(CheckpointWork):
    """A run's diagnostic zip (spec, configs, versions, logs, metrics, guard history, samples, reward code, data
    fingerprints, stack dumps; secrets scrubbed), built on a worker: a long run's logs and samples are large."""

    job = models.ForeignKey("runs.Job", on_delete=models.CASCADE, related_name="diagnostic_bundles")
    sample_steps = models.PositiveIntegerField(default=5)  # the last N steps' rollout samples go in
    path = models.CharField(max_length=500, blank=True)  # the zip, once built
    size_bytes = models.BigIntegerField(default=0)
    files = models.JSONField(default=list, blank=True)  # [{"name", "bytes"}] what went in
    left_out = models.JSONField(default=list, blank=True)  # [{"name", "why"}] what the bounds kept out

    class Meta(CheckpointWork.Meta):
        pass

    def __str__(self) -> str:
        return f"diagnostic bundle {self.pk} of job {self.job_id} ({self.status})"
